#!/usr/bin/env bash
# Issue 17's benchmark: request/reply msg/s and latency from a Python client and a Node client
# beside the Rust client, against the same hub, in the same run, in interleaved rounds.
#
# usage: scripts/sdk-bench.sh [OUT_DIR]        (default docs/benchmarks/DATE-sdk)
#   env: ROUNDS (5), DURATION (5 s measured per client and cell), WINDOWS ("16 1")
#
# One hub (QUIC on loopback) and 10 Rust echo agents (crates/bench/examples/echo_agents.rs);
# each client (crates/bench/examples/request_client.rs, bindings/python/bench/
# request_client.py, bindings/node/bench/request_client.js) connects 10 agents that each keep
# WINDOW requests of 1 KiB in flight, 1 s unmeasured, then DURATION s measured. The order of
# the three clients rotates every round. Raw JSON lines go to OUT/raw.jsonl, the machine and
# versions to OUT/env.json, the tables to OUT/README.md (scripts/sdk_bench_summary.py).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/benchmarks/$(date -u +%F)-sdk}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
WINDOWS=${WINDOWS:-"16 1"}
AGENTS=10 SIZE=1024 TARGETS=10 WARMUP=1
mkdir -p "$OUT"

cargo build --release --locked -q -p agentwire-cli
cargo build --release --locked -q -p agentwire-bench --examples
VENV=target/sdk-bench-venv
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q ./bindings/python
(cd bindings/node && npm install --no-audit --no-fund --silent && npm run --silent build)

source scripts/lib/hub.sh
start_hub target/release/agentwire
CELLS=$(wc -w <<<"$WINDOWS")
LIFE=$(( ROUNDS * CELLS * 3 * (DURATION + WARMUP + 5) + 60 ))
target/release/examples/echo_agents "$HUB" "$CA" "$TARGETS" "$LIFE" >"$WORK/echo.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do grep -q ready "$WORK/echo.log" && break; sleep 0.1; done

client() {
  case $1 in
    rust) target/release/examples/request_client "${@:2}" ;;
    python) "$VENV/bin/python" bindings/python/bench/request_client.py "${@:2}" ;;
    node) node bindings/node/bench/request_client.js "${@:2}" ;;
  esac
}

: >"$OUT/raw.jsonl"
ORDER=(rust python node)
for round in $(seq "$ROUNDS"); do
  for window in $WINDOWS; do
    for i in 0 1 2; do
      c=${ORDER[$(( (i + round) % 3 ))]}
      line=$(client "$c" "$HUB" "$CA" "$AGENTS" "$window" "$SIZE" "$DURATION" "$WARMUP" "$TARGETS")
      echo "{\"round\": $round, \"result\": $line}" | tee -a "$OUT/raw.jsonl"
    done
  done
done

python3 scripts/lib/bench_env.py "$OUT" \
  "scripts/sdk-bench.sh $OUT (ROUNDS=$ROUNDS DURATION=$DURATION WINDOWS='$WINDOWS')" \
  "{\"agents\": $AGENTS, \"size\": $SIZE, \"targets\": $TARGETS, \"warmup_s\": $WARMUP,
    \"duration_s\": $DURATION, \"rounds\": $ROUNDS, \"transport\": \"quic, loopback\"}" \
  rustc="rustc --version" python="$VENV/bin/python --version" node="node --version"
python3 scripts/sdk_bench_summary.py "$OUT"
