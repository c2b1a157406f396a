#!/usr/bin/env bash
# The spin-read experiment: our agent and our pool (agentwire agent-protocol serve / bench),
# 16 requests in flight on one connection, 200,000 requests per run, interleaved rounds.
# BASE is a release build of the commit named in commands.txt, SPIN the same tree with
# spin-read.patch applied; AGENTWIRE_ZAP_SPIN_US sets the spin budget of both processes.
# usage: run.sh OUT ROUNDS BASE SPIN
set -euo pipefail
out=$1 rounds=$2 base=$3 spin=$4
mkdir -p "$out"
sock=$(mktemp -u /tmp/zap-spin-XXXXXX.sock)
one() { # NAME BIN SPIN_US
  rm -f "$sock"
  AGENTWIRE_ZAP_SPIN_US=$3 "$2" agent-protocol serve --socket "$sock" >/dev/null &
  local agent=$!
  for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.02; done
  AGENTWIRE_ZAP_SPIN_US=$3 timeout 120 "$2" agent-protocol bench --socket "$sock" --requests 200000 \
    --concurrency 16 --agent-pid "$agent" --json >"$out/$1-r$round.json"
  kill "$agent"; wait "$agent" 2>/dev/null || true
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], round(d['requests_per_sec']), 'p50', d['latency']['p50_us'], 'p99', d['latency']['p99_us'], 'cpu', round(d['client_cpu_us_per_request'],2), round(d['agent_cpu_us_per_request'],2))" "$out/$1-r$round.json" "r$round $1"
}
for round in $(seq 1 "$rounds"); do
  one base "$base" 0
  for us in 0 5 10 20 50; do one "spin$us" "$spin" "$us"; done
done
