#!/usr/bin/env bash
# Abuse (issue 40): agents that say hello and never read, while 8 MiB events queue for them.
# Starts `agentwire hub` on a Unix socket with a queue budget, runs the slow_reader example
# against it (interleaved rounds with and without the abusers: honest request/reply rate and
# the hub's peak RSS), and writes OUT/result.json, OUT/command.txt and OUT/machine.txt.
#
# usage: scripts/faults/slow-reader.sh OUT [HUB_QUEUE_BYTES] [ABUSERS] [EVENTS] [ROUNDS] [SECONDS]
#   defaults: 268435456 (256 MiB), 4 abusers, 200 events of 8 MiB per round, 3 rounds, 5 s
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
out=$1 budget=${2:-268435456} abusers=${3:-4} events=${4:-200} rounds=${5:-3} secs=${6:-5}
mkdir -p "$out"
cargo build --release --locked -q -p agentwire-cli
cargo build --release --locked -q -p agentwire --example slow_reader
dir=$(mktemp -d)
sock="$dir/hub.sock"
target/release/agentwire hub --listen "unix://$sock" --hub-queue-bytes "$budget" \
  >"$dir/hub.log" 2>&1 &
hub=$!
trap 'kill $hub 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "scripts/faults/slow-reader.sh $*"
  echo "hub: agentwire hub --listen unix://SOCK --hub-queue-bytes $budget"
  echo "client: slow_reader unix://SOCK HUB_PID $abusers $events 8388608 $secs $rounds"
} >"$out/command.txt"
{ uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true; } >"$out/machine.txt"
target/release/examples/slow_reader "unix://$sock" "$hub" "$abusers" "$events" 8388608 \
  "$secs" "$rounds" >"$out/result.json"
python3 - "$out/result.json" "$budget" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1])); budget = int(sys.argv[2])
rounds = r["rounds"]
peak = max(x["abuse_peak_rss_bytes"] for x in rounds)
def med(k): return statistics.median(x[k] for x in rounds)
clean, during, after = med("clean_requests_per_sec"), med("during_flood_requests_per_sec"), med("after_flood_requests_per_sec")
print(f"hub peak RSS with abusers: {peak/2**20:.0f} MiB (budget {budget/2**20:.0f} MiB + 64 MiB = {(budget/2**20)+64:.0f}); idle {r['hub_idle_rss_bytes']/2**20:.0f} MiB")
print(f"honest req/s, medians of {len(rounds)} rounds: clean {clean:.0f}, during the flood {during:.0f} ({during/clean:.2f}x), after it with full queues {after:.0f} ({after/clean:.2f}x)")
print("per round (clean/during/after):", "; ".join(f"{x['clean_requests_per_sec']:.0f}/{x['during_flood_requests_per_sec']:.0f}/{x['after_flood_requests_per_sec']:.0f}" for x in rounds))
print("events refused per round:", [x["events_refused"] for x in rounds], "of", r["events_per_round"])
PY
