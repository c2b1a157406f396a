#!/usr/bin/env bash
# Runs a patched crate's own tests against agentwire's copy in vendor/ (vendor/README.md):
#
#   quinn-proto  its unit and in-memory connection tests (the `Pair` harness, 300+ tests),
#                `cargo test --lib`
#   quinn        its unit tests, the in-process endpoint tests of src/tests.rs and tests/,
#                built on the patched vendor/quinn-proto and vendor/quinn-udp as agentwire
#                builds it
#
# The vendored copies have no dev-dependencies, so this takes the published manifest (with
# them) from a throwaway `cargo vendor`, puts the patched sources beside it in a temporary
# directory and runs the tests there. Needs the crates registry; the tests use loopback only.
#
# usage: scripts/test-vendored.sh quinn-proto|quinn   (env: CARGO_TARGET_DIR to reuse a build)
set -euo pipefail
crate_name=${1:-}
case $crate_name in
  quinn-proto) version=0.11.19 test_args=(--lib --quiet) ;;
  quinn) version=0.11.12 test_args=(--quiet) ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/fetch/src"
cat >"$work/fetch/Cargo.toml" <<TOML
[package]
name = "fetch-$crate_name"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$crate_name = "=$version"

[workspace]
TOML
touch "$work/fetch/src/lib.rs"
(cd "$work/fetch" && cargo vendor --quiet "$work/published" >/dev/null)
crate="$work/published/$crate_name"
[ -f "$crate/Cargo.toml" ] || { echo "cargo vendor gave no $crate_name" >&2; exit 1; }
rm -rf "$crate/src"
cp -r "$root/vendor/$crate_name/src" "$crate/src"
# The published manifest's checksum file would reject the patched sources.
rm -f "$crate/.cargo-checksum.json"
cd "$crate"
# Outside any workspace: its own lock file and, unless given, its own target directory.
printf '\n[workspace]\n' >>Cargo.toml
if [ "$crate_name" = quinn ]; then
  # On the patched protocol and UDP crates, as agentwire uses them.
  printf '\n[patch.crates-io]\nquinn-proto = { path = "%s" }\nquinn-udp = { path = "%s" }\n' \
    "$root/vendor/quinn-proto" "$root/vendor/quinn-udp" >>Cargo.toml
  # The published lock file pins other versions of both, and cargo then leaves the patches
  # unused (with only a warning): the tests ran on the published crates until this line.
  cargo update --quiet -p quinn-proto -p quinn-udp
  for patched in quinn-proto quinn-udp; do
    if ! cargo tree --quiet -i "$patched" | grep -q "$root/vendor/$patched"; then
      echo "the tests would not use vendor/$patched" >&2
      exit 1
    fi
  done
fi
cargo test "${test_args[@]}"
