#!/usr/bin/env bash
# Issue 15, 16 requests in flight: our pool's writer (three builds) and the tokio runtime's
# worker count, against the reference's client and agent, interleaved round by round.
# usage: run.sh OUT ROUNDS REQUESTS   (binaries in /tmp/bins, see README.md)
set -euo pipefail
out=$1 rounds=$2 n=$3
mkdir -p "$out"
ref=/tmp/bins/zref-d317
sock=/tmp/zap-levers.sock
one() { # NAME CLIENT_BIN(or ref) AGENT(ours BIN|ref) THREADS FILE
  local name=$1 client=$2 agent=$3 threads=$4 file=$5 envs=()
  [ "$threads" = default ] || envs=(TOKIO_WORKER_THREADS=$threads)
  rm -f "$sock"
  if [ "$agent" = ref ]; then env "${envs[@]}" "$ref" agent --socket "$sock" >/dev/null &
  else env "${envs[@]}" "$agent" agent-protocol serve --socket "$sock" >/dev/null & fi
  local pid=$!
  for _ in $(seq 1 200); do [ -S "$sock" ] && break; sleep 0.02; done
  if [ "$client" = ref ]; then
    env "${envs[@]}" timeout 120 "$ref" bench --socket "$sock" --requests "$n" --concurrency 16 --agent-pid "$pid" >"$file"
  else
    env "${envs[@]}" timeout 120 "$client" agent-protocol bench --socket "$sock" --requests "$n" --concurrency 16 --agent-pid "$pid" --json >"$file"
  fi
  kill "$pid"; wait "$pid" 2>/dev/null || true; rm -f "$sock"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], round(d['requests_per_sec']), 'p99', d['latency']['p99_us'], 'cpu', round(d['client_cpu_us_per_request'],2), round(d['agent_cpu_us_per_request'],2), 'errors', d['errors'])" "$file" "$name"
}
echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD) $0 $*" >>"$out/commands.txt"
{ uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true
  for b in /tmp/bins/agentwire-head /tmp/bins/agentwire-direct /tmp/bins/agentwire-yield "$ref"; do
    echo "$(sha256sum "$b" | cut -c1-16) $b"; done; } >"$out/machine.txt"
for r in $(seq 1 "$rounds"); do
  for threads in default 1; do
    for v in head direct yield; do
      bin=/tmp/bins/agentwire-$v
      one "r$r $v threads=$threads" "$bin" "$bin" "$threads" "$out/$v-t$threads-r$r.json"
    done
    one "r$r ref threads=$threads" ref ref "$threads" "$out/ref-t$threads-r$r.json"
  done
done | tee -a "$out/runs.txt"
