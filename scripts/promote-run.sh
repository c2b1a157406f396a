#!/usr/bin/env bash
# Promote a benchmark run into docs/benchmarks/NAME/, keeping only what the repository keeps of
# a run (issue 41): its JSON, its report.md, its command, commit and machine. Regenerable HTML
# and SVG, and logs, stay behind.
#
# usage: scripts/promote-run.sh [--from-anywhere] RUN_DIR NAME
#
#   RUN_DIR  a run that `agentwire bench --out target/...` (or any script) wrote; it must be
#            under the repository's target/ unless --from-anywhere is given
#   NAME     the new directory docs/benchmarks/NAME (must not exist yet)
#
# Copies, keeping paths relative to RUN_DIR: every *.json, *.jsonl and *.json.gz, every
# report.md (links to .html/.svg files turned into plain text naming the file, so the promoted
# report has no dead links), command.txt and commands.txt. Copies commit.txt and machine.txt from RUN_DIR, or
# writes them when absent: commit.txt is `git rev-parse HEAD` (with " dirty" when the tree has
# uncommitted changes), machine.txt is uname -srm, nproc, the CPU model and the memory.
# Then packs the copy with scripts/pack-run.py: the raw data (JSON, per-round reports) into one
# data.tar.xz, the top report.md, command, commit and machine as plain files.
# Nothing is staged: review docs/benchmarks/NAME, then `git add` it.
set -euo pipefail

usage() { sed -n 2,21p "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

from_anywhere=0
args=()
for a in "$@"; do
  case $a in
    --from-anywhere) from_anywhere=1 ;;
    -h|--help) usage ;;
    -*) echo "promote-run: unknown option $a" >&2; usage ;;
    *) args+=("$a") ;;
  esac
done
[ "${#args[@]}" -eq 2 ] || usage
run_arg=${args[0]} name=${args[1]}

root=$(cd "$(dirname "$0")/.." && pwd -P)
cd "$root"

case $name in
  ''|.*|*/*|*[[:space:]]*) echo "promote-run: NAME must be one plain directory name, got '$name'" >&2; exit 2 ;;
esac
[ -d "$run_arg" ] || { echo "promote-run: $run_arg is not a directory" >&2; exit 2; }
run=$(cd "$run_arg" && pwd -P)

target=$root/target
[ -d "$target" ] && target=$(cd "$target" && pwd -P)
case $run/ in
  "$target"/?*) ;;
  *)
    if [ "$from_anywhere" = 0 ]; then
      echo "promote-run: $run is outside $target/; pass --from-anywhere to promote it anyway" >&2
      exit 2
    fi ;;
esac

dest=$root/docs/benchmarks/$name
if [ -e "$dest" ]; then
  echo "promote-run: docs/benchmarks/$name already exists; not overwriting it" >&2
  exit 1
fi

# What gets copied, relative to RUN_DIR.
mapfile -d '' json < <(cd "$run" && find . -type f \( -name '*.json' -o -name '*.jsonl' -o -name '*.json.gz' \) -print0 | sort -z)
mapfile -d '' reports < <(cd "$run" && find . -type f -name report.md -print0 | sort -z)
if [ "${#json[@]}" -eq 0 ]; then
  echo "promote-run: no *.json in $run: a promoted run keeps its JSON" >&2
  exit 1
fi
[ "${#reports[@]}" -gt 0 ] || echo "promote-run: warning: no report.md in $run" >&2

mkdir "$dest"   # fails if it appeared meanwhile
done_ok=0
trap '[ "$done_ok" = 1 ] || rm -rf "$dest"' EXIT

for f in "${json[@]}"; do
  f=${f#./}
  mkdir -p "$dest/$(dirname "$f")"
  cp -p "$run/$f" "$dest/$f"
done

# Links to charts and HTML pages that are not kept become plain text naming the file:
#   ![Title](charts/x.svg)  ->  Title (chart `charts/x.svg`, not kept in the repository)
#   [text](report.html)     ->  text (`report.html`, not kept in the repository)
# (likewise <a href="...">text</a> and <img src="..." alt="...">). URLs are left alone.
for f in "${reports[@]}"; do
  f=${f#./}
  mkdir -p "$dest/$(dirname "$f")"
  sed -E \
    -e 's/!\[([^]]*)\]\(([^):#]+\.(svg|html))(#[^)]*)?\)/\1 (chart `\2`, not kept in the repository)/g' \
    -e 's/\[([^]]*)\]\(([^):#]+\.(svg|html))(#[^)]*)?\)/\1 (`\2`, not kept in the repository)/g' \
    -e 's/<a [^>]*href="([^":#]+\.(svg|html))(#[^"]*)?"[^>]*>([^<]*)<\/a>/\4 (`\1`, not kept in the repository)/g' \
    -e 's/<img [^>]*src="([^":#]+\.(svg|html))"[^>]*>/(chart `\1`, not kept in the repository)/g' \
    "$run/$f" >"$dest/$f"
done

for f in command.txt commands.txt commit.txt machine.txt; do
  if [ -f "$run/$f" ]; then cp -p "$run/$f" "$dest/$f"; fi
done

if [ ! -f "$dest/commit.txt" ]; then
  sha=$(git rev-parse HEAD)
  if git diff --quiet HEAD -- 2>/dev/null; then
    echo "$sha" >"$dest/commit.txt"
  else
    echo "$sha dirty" >"$dest/commit.txt"
  fi
fi

if [ ! -f "$dest/machine.txt" ]; then
  {
    uname -srm
    echo "$(nproc) CPUs"
    grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/^model name[[:space:]]*:[[:space:]]*/CPU: /' || echo "CPU: unknown"
    awk '/^MemTotal:/ { printf "memory: %.1f GiB\n", $2 / 1048576 }' /proc/meminfo 2>/dev/null || true
  } >"$dest/machine.txt"
fi

python3 "$root/scripts/pack-run.py" "$dest" >/dev/null

done_ok=1
echo "promoted $run -> docs/benchmarks/$name:"
(cd "$dest" && find . -type f -printf '%s\t%P\n' | sort -k2 | awk -F'\t' '{ printf "  %10d  %s\n", $1, $2; t += $1 } END { printf "  %10d  total\n", t }')
echo "review it, then: git add docs/benchmarks/$name"
