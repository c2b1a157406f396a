#!/usr/bin/env bash
# Headless Chromium in the client namespace of an emulated path (netsim's bridge stage), a hub
# and a Rust echo agent in the server namespace: request/reply latency over WebTransport and
# over WebSocket, side by side in interleaved rounds (bindings/web/bench/latency.mjs), then
# report.md and the JSON. Needs root (other processes enter netsim's namespaces).
#
# usage: scripts/browser-netsim.sh OUT [ROUNDS]
#   env: SPEC ("delay=25ms,loss=1%": 50 ms RTT, 1 % loss each way), REQUESTS (1000),
#        INFLIGHT (16), SIZE (1024), PROFILE (release)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/browser-netsim.sh OUT [ROUNDS]}
ROUNDS=${2:-5}
SPEC=${SPEC:-delay=25ms,loss=1%}
PROFILE=${PROFILE:-release}
DIR=$([ "$PROFILE" = release ] && echo release || echo debug)
[ "$(id -u)" = 0 ] || { echo "needs root: the browser and the hub run in netsim's namespaces" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(realpath "$OUT")

cargo build --locked -q --profile "$PROFILE" -p agentwire-cli
(cd bindings/web && { [ -d node_modules ] || npm ci --no-audit --no-fund --silent; } && npm run --silent build)
BIN="$PWD/target/$DIR/agentwire"
NAME="wtb$$"
C="aw-$NAME-c"
S="aw-$NAME-s"
SERVER=198.18.0.2
TOKEN="bench-$$"

source scripts/lib/hub.sh
"$BIN" netsim up --name "$NAME" --spec "$SPEC" --stage bridge >"$WORK/netsim.log" 2>&1 &
NETSIM=$!
PIDS+=($NETSIM)
for _ in $(seq 100); do grep -q "^Ctrl-C" "$WORK/netsim.log" && break; sleep 0.1; done
grep -q "^Ctrl-C" "$WORK/netsim.log" || { cat "$WORK/netsim.log" >&2; exit 1; }

"$BIN" cert --out "$WORK/certs" --name "$SERVER" --webtransport >"$WORK/cert.txt"
HASH=$(sed -n 's/^sha-256: *\([0-9a-f]\{64\}\)$/\1/p' "$WORK/cert.txt")
ip netns exec "$S" "$BIN" hub --cert-dir "$WORK/certs" --auth-token "$TOKEN" \
  --listen "quic://$SERVER:4433" --listen "wss://$SERVER:4444" --webtransport --allow-origin '*' \
  >"$WORK/hub.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q "hub key pin" "$WORK/hub.log" && break; sleep 0.1; done
PIN=$(sed -n 's/^hub key pin: sha256:\([0-9a-f]\{64\}\)$/\1/p' "$WORK/hub.log")
[ -n "$PIN" ] || { cat "$WORK/hub.log" >&2; exit 1; }
ip netns exec "$S" "$BIN" agent --hub "quic://$SERVER:4433" --ca "$WORK/certs/ca.pem" \
  --auth-token "$TOKEN" --id echo --echo >"$WORK/echo.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q "connected" "$WORK/echo.log" && break; sleep 0.1; done

ip netns exec "$C" node bindings/web/bench/latency.mjs \
  --wt "https://$SERVER:4433/agentwire" --ws "wss://$SERVER:4444" --hash "$HASH" --pin "$PIN" \
  --token "$TOKEN" --rounds "$ROUNDS" --requests "${REQUESTS:-1000}" --inflight "${INFLIGHT:-16}" \
  --size "${SIZE:-1024}" --out "$OUT/browser-latency.json" | tee "$OUT/rounds.txt"

kill -TERM "$NETSIM"
wait "$NETSIM" 2>/dev/null || true
python3 scripts/browser_netsim_report.py "$OUT/browser-latency.json" "$SPEC" "$(git rev-parse --short HEAD)" >"$OUT/report.md"
cat "$OUT/report.md"
