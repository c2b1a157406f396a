#!/usr/bin/env bash
# Runs quinn's own tests (its unit tests and the in-process endpoint tests of src/tests.rs,
# and tests/) against agentwire's patched copy in vendor/quinn, built on the patched
# vendor/quinn-proto and vendor/quinn-udp as agentwire builds it. The vendored copy has no
# dev-dependencies, so this takes the published 0.11.12 manifest (with them) from a throwaway
# `cargo vendor`, puts the patched sources beside it in a temporary directory, points
# quinn-proto and quinn-udp at the patched copies and runs `cargo test` there. Needs the
# crates registry; the tests talk over loopback only.
#
# usage: scripts/test-vendored-quinn.sh   (env: CARGO_TARGET_DIR to reuse a build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/fetch/src"
cat >"$work/fetch/Cargo.toml" <<'TOML'
[package]
name = "fetch-quinn"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
quinn = "=0.11.12"

[workspace]
TOML
touch "$work/fetch/src/lib.rs"
(cd "$work/fetch" && cargo vendor --quiet "$work/published" >/dev/null)
crate="$work/published/quinn"
[ -f "$crate/Cargo.toml" ] || { echo "cargo vendor gave no quinn" >&2; exit 1; }
rm -rf "$crate/src"
cp -r "$root/vendor/quinn/src" "$crate/src"
# The published manifest's checksum file would reject the patched sources.
rm -f "$crate/.cargo-checksum.json"
cd "$crate"
# Outside any workspace, on the patched protocol and UDP crates as agentwire uses them.
cat >>Cargo.toml <<TOML

[workspace]

[patch.crates-io]
quinn-proto = { path = "$root/vendor/quinn-proto" }
quinn-udp = { path = "$root/vendor/quinn-udp" }
TOML
cargo test --quiet
