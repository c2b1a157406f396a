#!/usr/bin/env bash
# Holds agentwire's changes to the vendored crates (vendor/README.md) to our own fmt and clippy
# rules, without holding the upstream code around them to them:
#
#   fmt     every line a patch adds is as rustfmt writes it: each changed file is formatted
#           twice, as published and as patched, and the lines the patch adds must be the same
#           before and after formatting (the crate's edition; upstream's style may differ
#           elsewhere in the file, which is not ours to change)
#   clippy  the patched crate has no clippy warning the published one does not have
#           (`cargo clippy --lib`, warnings compared by lint, file and the line's text)
#
# The published crates come from a throwaway `cargo vendor` (needs the crates registry).
#
# usage: scripts/check-vendored.sh [quinn quinn-proto quinn-udp nfq]   (env: CARGO_TARGET_DIR)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
crates=("$@")
[ ${#crates[@]} -gt 0 ] || crates=(quinn quinn-proto quinn-udp nfq)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$work/target}
status=0

version_of() { sed -n 's/^version = "\(.*\)"/\1/p' "$root/vendor/$1/Cargo.toml" | head -1; }
edition_of() { sed -n 's/^edition = "\(.*\)"/\1/p' "$1/Cargo.toml" | head -1; }

# The published crates, all in one vendor directory.
mkdir -p "$work/fetch/src"
{
  printf '[package]\nname = "fetch-vendored"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n[dependencies]\n'
  for c in "${crates[@]}"; do printf '%s = "=%s"\n' "$c" "$(version_of "$c")"; done
  printf '\n[workspace]\n'
} >"$work/fetch/Cargo.toml"
touch "$work/fetch/src/lib.rs"
(cd "$work/fetch" && cargo vendor --quiet --versioned-dirs "$work/published" >/dev/null)

# The lines a diff from $1 to $2 adds, without their leading '+', blank ones left out.
added() { diff -u "$1" "$2" | sed -n 's/^+\([^+]\)/\1/p; s/^+$//p' | sed '/^[[:space:]]*$/d' || true; }

for c in "${crates[@]}"; do
  published="$work/published/$c-$(version_of "$c")"
  [ -d "$published/src" ] || { echo "$c: cargo vendor gave no $published" >&2; exit 1; }
  edition=$(edition_of "$published")
  changed=0
  while IFS= read -r rel; do
    changed=$((changed + 1))
    a="$published/src/$rel" b="$root/vendor/$c/src/$rel"
    fa="$work/fmt-a.rs" fb="$work/fmt-b.rs"
    if [ ! -f "$a" ]; then : >"$work/empty.rs"; a="$work/empty.rs"; fi
    # Through stdin, so that rustfmt formats this file alone (not the modules it declares).
    if ! rustfmt --edition "$edition" --emit stdout <"$a" >"$fa" 2>"$work/fmt.err" ||
      ! rustfmt --edition "$edition" --emit stdout <"$b" >"$fb" 2>>"$work/fmt.err"; then
      echo "$c: src/$rel: rustfmt could not format it:" >&2
      cat "$work/fmt.err" >&2
      status=1
      continue
    fi
    if ! diff <(added "$a" "$b") <(added "$fa" "$fb") >"$work/fmt.diff"; then
      echo "$c: src/$rel: lines the patch adds are not as rustfmt writes them (< as patched, > formatted):" >&2
      cat "$work/fmt.diff" >&2
      status=1
    fi
  done < <(cd "$root/vendor/$c/src" && find . -name '*.rs' | sed 's|^\./||' | sort | while read -r f; do
      cmp -s "$f" "$published/src/$f" || echo "$f"
    done)
  echo "$c: fmt checked over $changed changed file(s)"

  # clippy: published, then patched (same target directory, so dependencies are checked once).
  lint() {
    local dir=$1 out
    shift
    rm -f "$dir/.cargo-checksum.json"
    grep -q '^\[workspace\]' "$dir/Cargo.toml" || printf '\n[workspace]\n' >>"$dir/Cargo.toml"
    if ! out=$(cd "$dir" && cargo clippy --quiet --lib --message-format short -- "$@" 2>&1 >/dev/null); then
      echo "$c: clippy could not check $dir:" >&2
      echo "$out" | grep -E '^(error|src/)' | head -20 >&2
      return 1
    fi
    echo "$out" | sed -n 's/^\(src\/[^:]*\):\([0-9]*\):[0-9]*: warning: \(.*\)$/\1 \2 \3/p' |
      while read -r file line msg; do
        printf '%s | %s | %s\n' "$file" "$msg" "$(sed -n "${line}p" "$dir/$file" | tr -s ' ')"
      done | sort -u
  }
  patched="$work/patched-$c"
  cp -r "$published" "$patched"
  rm -rf "$patched/src"
  cp -r "$root/vendor/$c/src" "$patched/src"
  if [ "$c" = quinn ]; then
    # As agentwire builds it: on the patched protocol and UDP crates.
    printf '\n[workspace]\n\n[patch.crates-io]\nquinn-proto = { path = "%s" }\nquinn-udp = { path = "%s" }\n' \
      "$root/vendor/quinn-proto" "$root/vendor/quinn-udp" >>"$patched/Cargo.toml"
    # The published lock file pins other versions, which would leave the patches unused.
    (cd "$patched" && cargo update --quiet -p quinn-proto -p quinn-udp)
  fi
  # nfq as published trips the compiler's dangerous_implicit_autorefs (denied outside the
  # registry), which its patch mends; the published copy is linted with it allowed.
  allow=(); [ "$c" = nfq ] && allow=(-A dangerous_implicit_autorefs)
  lint "$published" "${allow[@]}" >"$work/clippy-a.txt" || { status=1; continue; }
  lint "$patched" >"$work/clippy-b.txt" || { status=1; continue; }
  new=$(comm -13 "$work/clippy-a.txt" "$work/clippy-b.txt")
  if [ -n "$new" ]; then
    echo "$c: clippy warnings the patch brings (file | lint | line):" >&2
    echo "$new" >&2
    status=1
  else
    echo "$c: clippy: $(wc -l <"$work/clippy-a.txt") warning(s) as published, none new"
  fi
done
exit $status
