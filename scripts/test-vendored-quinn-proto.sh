#!/usr/bin/env bash
# Runs quinn-proto's own unit and in-memory connection tests (its `Pair` harness, 300+ tests)
# against agentwire's patched copy in vendor/quinn-proto. The vendored copy has no
# dev-dependencies, so this takes the published 0.11.19 manifest (with them) from a throwaway
# `cargo vendor`, puts the patched sources beside it in a temporary directory and runs
# `cargo test --lib` there. Needs the crates registry; touches no network beyond it.
#
# usage: scripts/test-vendored-quinn-proto.sh   (env: CARGO_TARGET_DIR to reuse a build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/fetch/src"
cat >"$work/fetch/Cargo.toml" <<'EOF'
[package]
name = "fetch-quinn-proto"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
quinn-proto = "=0.11.19"

[workspace]
EOF
touch "$work/fetch/src/lib.rs"
(cd "$work/fetch" && cargo vendor --quiet "$work/published" >/dev/null)
crate="$work/published/quinn-proto"
[ -f "$crate/Cargo.toml" ] || { echo "cargo vendor gave no quinn-proto" >&2; exit 1; }
rm -rf "$crate/src"
cp -r "$root/vendor/quinn-proto/src" "$crate/src"
# The published manifest's checksum file would reject the patched sources.
rm -f "$crate/.cargo-checksum.json"
cd "$crate"
# Outside any workspace: its own lock file and, unless given, its own target directory.
printf '\n[workspace]\n' >>Cargo.toml
cargo test --lib --quiet
