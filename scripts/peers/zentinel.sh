#!/usr/bin/env bash
# Side by side: agentwire's agent-protocol pool and agent against the reference implementation
# (zentinel-agent-protocol 0.6.45: its UDS client and agent server), over real Unix sockets on
# this machine, interleaved round by round so machine noise hits every pair alike.
#
# usage: scripts/peers/zentinel.sh OUT [ROUNDS] [REQUESTS]
# Pairs (client -> agent): ours->ours, ref->ref, ours->ref, ref->ours, at 1, 16 and 128
# requests in flight on one connection, MessagePack (the reference client always offers it
# first); plus ours->ours in JSON, and both agents with one request in 100 taking 10 ms
# (--slow-every 100 --slow-ms 10) at 16 and 128 in flight (REQUESTS/10 of them). One JSON report per run in
# OUT/<pair>-c<C>-r<round>.json; OUT/commands.txt, OUT/machine.txt; table:
# scripts/peers/zentinel_summary.py OUT
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
out=$1 rounds=${2:-3} requests=${3:-50000}
mkdir -p "$out"
# Two builds: with `--example` in the same command, cargo builds only examples of every
# package named, so the agentwire binary was never rebuilt and runs measured whatever build
# lay in target/ (found on 2026-11-26; see docs/benchmarks/2026-11-26-zentinel-codec/).
cargo build --release --locked -p agentwire-cli >&2
(cd crates/zap/interop && CARGO_TARGET_DIR="$OLDPWD/target" cargo build --release --locked --example zentinel_reference) >&2
ours=target/release/agentwire
ref=target/release/examples/zentinel_reference
newest_source=$(git ls-files -z crates Cargo.toml Cargo.lock | xargs -0 stat -c %Y | sort -n | tail -1)
for bin in "$ours" "$ref"; do
  if [ "$(stat -c %Y "$bin")" -lt "$newest_source" ]; then
    echo "error: $bin is older than the newest source file; the build did not refresh it" >&2
    exit 1
  fi
done
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet -- crates Cargo.toml Cargo.lock 2>/dev/null || echo ' (uncommitted changes)')"
  echo "scripts/peers/zentinel.sh $*"
} >>"$out/commands.txt"
{
  uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true; rustc --version
  for bin in "$ours" "$ref"; do echo "$(sha256sum "$bin" | cut -c1-16) $(stat -c %y "$bin") $bin"; done
} >"$out/machine.txt"
sock=$(mktemp -u /tmp/zentinel-XXXXXX.sock)
agent_pid=
start_agent() { # KIND [slow args]
  local kind=$1
  shift
  rm -f "$sock"
  if [ "$kind" = ours ]; then
    "$ours" agent-protocol serve --socket "$sock" "$@" >/dev/null &
  else
    "$ref" agent --socket "$sock" "$@" >/dev/null &
  fi
  agent_pid=$!
  for _ in $(seq 1 200); do [ -S "$sock" ] && break; sleep 0.02; done
}
stop_agent() { kill "$agent_pid" 2>/dev/null || true; wait "$agent_pid" 2>/dev/null || true; rm -f "$sock"; }
trap stop_agent EXIT
bench() { # CLIENT C FILE [encoding] [requests]
  local client=$1 c=$2 file=$3 enc=${4:-msgpack} n=${5:-$requests}
  if [ "$client" = ours ]; then
    timeout 300 "$ours" agent-protocol bench --socket "$sock" --requests "$n" --concurrency "$c" \
      --encoding "$enc" --agent-pid "$agent_pid" --json >"$file"
  else
    timeout 300 "$ref" bench --socket "$sock" --requests "$n" --concurrency "$c" \
      --agent-pid "$agent_pid" >"$file"
  fi
  python3 - "$file" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[1]}: {d['requests_per_sec']:.0f} req/s, p99 {d['latency']['p99_us']} us, errors {d['errors']}")
PY
}
for round in $(seq 1 "$rounds"); do
  for c in 1 16 128; do
    for pair in ours-ours ref-ref ours-ref ref-ours; do
      start_agent "${pair#*-}"
      bench "${pair%-*}" "$c" "$out/$pair-c$c-r$round.json"
      stop_agent
    done
    start_agent ours
    bench ours "$c" "$out/ours-ours-json-c$c-r$round.json" json
    stop_agent
  done
  for c in 16 128; do
    for kind in ours ref; do
      start_agent "$kind" --slow-every 100 --slow-ms 10
      # A tenth of the requests: the reference agent makes about 8k req/s here.
      bench "$kind" "$c" "$out/$kind-$kind-slow-c$c-r$round.json" msgpack $((requests / 10))
      stop_agent
    done
  done
done
