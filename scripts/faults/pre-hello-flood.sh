#!/usr/bin/env bash
# Abuse (issue 40): CONNECTIONS connections at once, each sending one FRAME_BYTES frame before
# any hello, on each of QUIC, HTTP/2 and WebSocket over TLS. Starts `agentwire hub` on the three
# listeners and runs the pre_hello_flood example once per transport: ROUNDS rounds of honest
# request/reply on that transport for SECONDS without the flood, then for SECONDS while waves
# of it come back to back (WAVES=1: while one wave lasts) (the hub's peak RSS in each); writes
# OUT/<transport>.json, OUT/command.txt and OUT/machine.txt.
#
# usage: scripts/faults/pre-hello-flood.sh OUT [CONNECTIONS] [FRAME_BYTES] [SECONDS] [ROUNDS]
#   defaults: 500 connections, 16 MiB frames, 5 s, 3 rounds; HUB_BIN=path runs another
#   agentwire as the hub, HUB_ARGS="..." adds hub options, PIN=1 runs the hub and the honest
#   agents on CPU 1 and the flood on CPU 0 (as if the flooder were another machine)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
out=$1 connections=${2:-500} frame=${3:-16777216} secs=${4:-5} rounds=${5:-3}
mkdir -p "$out"
cargo build --release --locked -q -p agentwire-cli
cargo build --release --locked -q -p agentwire --example pre_hello_flood
dir=$(mktemp -d)
target/release/agentwire cert --out "$dir/certs" >/dev/null
pin=() flood_cpu=()
if [ "${PIN:-0}" = 1 ]; then
  pin=(taskset -c 1) flood_cpu=(env FLOOD_CPU=0)
fi
# shellcheck disable=SC2086 # HUB_ARGS are split on purpose
"${pin[@]}" "${HUB_BIN:-target/release/agentwire}" hub --cert-dir "$dir/certs" ${HUB_ARGS:-} --listen quic://127.0.0.1:0 \
  --listen h2://127.0.0.1:0 --listen wss://127.0.0.1:0 >"$dir/hub.log" 2>&1 &
hub=$!
trap 'kill $hub 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 200); do [ "$(grep -c 'hub listening' "$dir/hub.log")" -ge 3 ] && break; sleep 0.05; done
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "scripts/faults/pre-hello-flood.sh $*"
  echo "hub: ${HUB_BIN:-target/release/agentwire} ($("${HUB_BIN:-target/release/agentwire}" --version)) hub --cert-dir CERTS ${HUB_ARGS:-} --listen quic://127.0.0.1:0 --listen h2://127.0.0.1:0 --listen wss://127.0.0.1:0"
  [ "${WAVES:-}" = 1 ] && echo "WAVES=1: the flood window is one wave"
  [ "${PIN:-0}" = 1 ] && echo "PIN=1: hub and honest agents on CPU 1 (taskset -c 1), the flood on CPU 0 (FLOOD_CPU=0)"
  echo "client: pre_hello_flood URL CERTS/ca.pem HUB_PID $connections $frame $secs $rounds, once per transport"
} >"$out/command.txt"
{ uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true; } >"$out/machine.txt"
for transport in quic h2 wss; do
  url=$(grep -o "hub listening on $transport://[^ ]*" "$dir/hub.log" | head -1 | sed 's/hub listening on //')
  "${flood_cpu[@]}" "${pin[@]}" target/release/examples/pre_hello_flood "$url" "$dir/certs/ca.pem" "$hub" "$connections" \
    "$frame" "$secs" "$rounds" >"$out/$transport.json"
  python3 - "$out/$transport.json" "$transport" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
rounds = r["rounds"]
med = lambda k: statistics.median(x[k] for x in rounds)
clean, during = med("clean_requests_per_sec"), med("during_flood_requests_per_sec")
peak = max(x["flood_peak_rss_bytes"] for x in rounds)
conns = sum(x["flood_connections"] for x in rounds)
refused = sum(x["flood_refused"] for x in rounds)
print(f"{sys.argv[2]}: {conns} connections x {r['frame_bytes']/2**20:.0f} MiB before the hello "
      f"({refused} refused) over {len(rounds)} rounds: hub peak RSS {peak/2**20:.0f} MiB "
      f"(idle {r['hub_idle_rss_bytes']/2**20:.0f}); honest req/s clean {clean:.0f}, during "
      f"{during:.0f} ({during/clean:.2f}x; per round "
      + ", ".join(f"{x['during_flood_requests_per_sec']/x['clean_requests_per_sec']:.2f}" for x in rounds)
      + f"); newcomer served after: {r['newcomer_served_after']} "
      f"(in {r.get('newcomer_seconds', 0):.1f} s)")
PY
done
