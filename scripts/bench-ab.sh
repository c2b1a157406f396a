#!/usr/bin/env bash
# Interleaved A/B of agentwire binaries: ROUNDS rounds, each running every binary once with the
# same `agentwire bench` arguments, so that machine noise hits every variant alike. Each run
# writes its JSON and report to OUT/<name>-r<round>/; one line per measured cell goes to
# OUT/runs.txt (and stdout), the command to OUT/commands.txt, the machine to OUT/machine.txt.
#
# usage: scripts/bench-ab.sh OUT ROUNDS "BENCH ARGS" NAME=BINARY[ EXTRA ARGS] [...]
# (a variant may add bench arguments of its own: "mtu1452=target/release/agentwire
# --quic-max-mtu 1452")
# e.g.:  scripts/bench-ab.sh ab 3 "--transports quic,wss --agents 100 --sizes 10240 \
#            --networks 0ms --window 16" base=/tmp/agentwire-base new=target/release/agentwire
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
out=$1 rounds=$2 args=$3
shift 3
mkdir -p "$out"
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  printf 'scripts/bench-ab.sh %s %s "%s"' "$out" "$rounds" "$args"
  printf ' "%s"' "$@"
  echo
} >>"$out/commands.txt"
{ uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true; } >"$out/machine.txt"
for spec in "$@"; do
  read -ra cmd <<<"${spec#*=}"
  echo "${spec%%=*} = ${spec#*=} ($("${cmd[0]}" --version 2>/dev/null || echo unknown))" >>"$out/machine.txt"
done
for round in $(seq 1 "$rounds"); do
  for spec in "$@"; do
    name=${spec%%=*}
    read -ra cmd <<<"${spec#*=}"
    # shellcheck disable=SC2086 # the bench arguments are split on purpose
    "${cmd[0]}" bench $args "${cmd[@]:1}" --repetitions 1 --no-progress --out "$out/$name-r$round" 2>&1 |
      grep 'msg/s,' | sed "s/^cell [0-9]*\/[0-9]*, run 1\/1: /r$round $name /" | tee -a "$out/runs.txt"
  done
done
