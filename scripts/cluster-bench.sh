#!/usr/bin/env bash
# Issue 18's benchmark: request/reply between agents on two hubs joined through NATS, beside
# the same between agents on one hub, in the same run, in interleaved rounds.
#
# usage: scripts/cluster-bench.sh [OUT_DIR]     (default docs/benchmarks/DATE-cluster)
#   env: ROUNDS (5), DURATION (5 s measured per cell), WINDOWS ("1 16"), AGENTS (100),
#        HUBS (2: hub A and the hubs the remote echo agents are spread over)
#
# A nats-server with JetStream (target/peers-nats, installed with Go if missing), HUBS hubs
# (`agentwire hub --cluster`), 10 echo agents on hub A (local-echo-*) and 10 spread over the
# other hubs (remote-echo-*), and the Rust request client (crates/bench/examples/request_client.rs) on hub A with
# AGENTS agents keeping WINDOW requests of 1 KiB in flight: to local-echo-* (one hub) or to
# remote-echo-* (across hubs, one hop through NATS each way). Raw JSON lines in OUT/raw.jsonl,
# machine and versions in OUT/env.json, tables in OUT/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/benchmarks/$(date -u +%F)-cluster}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
WINDOWS=${WINDOWS:-"1 16"}
AGENTS=${AGENTS:-100}
HUBS=${HUBS:-2}
[ "$HUBS" -ge 2 ] || { echo "HUBS must be at least 2" >&2; exit 1; }
SIZE=1024 TARGETS=10 WARMUP=1
mkdir -p "$OUT"

cargo build --release --locked -q -p agentwire-cli
cargo build --release --locked -q -p agentwire-bench --examples
scripts/lib/nats-server.sh target/peers-nats
source scripts/lib/hub.sh
BIN=target/release/agentwire
"$BIN" cert --out "$WORK/certs" >/dev/null
CA="$WORK/certs/ca.pem"
target/peers-nats/nats-server -a 127.0.0.1 -p -1 -js -sd "$WORK/jetstream" >"$WORK/nats.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q "Listening for client connections" "$WORK/nats.log" && break; sleep 0.1; done
NATS="nats://$(grep -o 'Listening for client connections on [0-9.:]*' "$WORK/nats.log" | awk '{print $NF}')"

start_member() { # NAME -> sets MEMBER to the hub's quic:// address (not in a subshell, so
  # that the hub's pid reaches PIDS and the hub is stopped on exit)
  "$BIN" hub --listen quic://127.0.0.1:0 --cert-dir "$WORK/certs" --cluster "$NATS" \
    --hub-id "$1" >"$WORK/$1.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q "hub listening on" "$WORK/$1.log" && break; sleep 0.1; done
  MEMBER=$(grep -o "quic://127.0.0.1:[0-9]*" "$WORK/$1.log" | head -1)
}
start_member hub-a
HUB_A=$MEMBER
OTHERS=()
for k in $(seq 2 "$HUBS"); do
  start_member "hub-$k"
  OTHERS+=("$MEMBER")
done
CELLS=$(wc -w <<<"$WINDOWS")
LIFE=$(( ROUNDS * CELLS * 2 * (DURATION + WARMUP + 5) + 60 ))
target/release/examples/echo_agents "$HUB_A" "$CA" "$TARGETS" "$LIFE" local-echo- >"$WORK/echo-a.log" 2>&1 &
PIDS+=($!)
# The remote echo agents, spread over the other hubs in turn.
PER=$(( (TARGETS + HUBS - 2) / (HUBS - 1) ))
ECHOS=(echo-a)
for k in $(seq 0 $((HUBS - 2))); do
  first=$((k * PER)); n=$(( TARGETS - first < PER ? TARGETS - first : PER ))
  [ "$n" -gt 0 ] || continue
  target/release/examples/echo_agents "${OTHERS[$k]}" "$CA" "$n" "$LIFE" remote-echo- "$first" \
    >"$WORK/echo-r$k.log" 2>&1 &
  PIDS+=($!)
  ECHOS+=("echo-r$k")
done
for f in "${ECHOS[@]}"; do
  for _ in $(seq 300); do grep -q ready "$WORK/$f.log" && break; sleep 0.1; done
done
sleep 2 # every hub sees the others' echo agents (presence every second)

: >"$OUT/raw.jsonl"
for round in $(seq "$ROUNDS"); do
  for window in $WINDOWS; do
    order=("local-echo-" "remote-echo-")
    [ $((round % 2)) -eq 0 ] && order=("remote-echo-" "local-echo-")
    for prefix in "${order[@]}"; do
      line=$(target/release/examples/request_client "$HUB_A" "$CA" "$AGENTS" "$window" "$SIZE" \
        "$DURATION" "$WARMUP" "$TARGETS" "$prefix")
      echo "{\"round\": $round, \"result\": $line}" | tee -a "$OUT/raw.jsonl"
    done
  done
done

python3 scripts/lib/bench_env.py "$OUT" \
  "scripts/cluster-bench.sh $OUT (HUBS=$HUBS ROUNDS=$ROUNDS DURATION=$DURATION WINDOWS='$WINDOWS' AGENTS=$AGENTS)" \
  "{\"hubs\": $HUBS, \"agents\": $AGENTS, \"size\": $SIZE, \"targets\": $TARGETS, \"warmup_s\": $WARMUP,
    \"duration_s\": $DURATION, \"rounds\": $ROUNDS, \"transport\": \"quic, loopback\"}" \
  rustc="rustc --version" nats_server="target/peers-nats/nats-server --version"
python3 scripts/cluster_bench_summary.py "$OUT"
