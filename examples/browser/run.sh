#!/usr/bin/env bash
# The browser demo: a hub taking WebTransport sessions (and WebSocket, for browsers without
# WebTransport), two Rust workers counting primes, and the page, served by `agentwire serve`
# on https://127.0.0.1:PORT. Open it in Chromium (the command to do so is printed) or
# Firefox and press the button; the page trusts the hub's WebTransport certificate by the
# hash this script writes into its config.js.
#
# usage: examples/browser/run.sh                   serves the page for SECONDS (600), then stops
#        examples/browser/run.sh --screenshot PNG  headless Chromium asks 200 questions, saves
#                                                  the page as PNG, and stops
#   env: PORT (8080), SECONDS (600)
set -euo pipefail
cd "$(dirname "$0")/../.."
PORT=${PORT:-8080}
RUN_FOR=${SECONDS_TO_RUN:-600}
SHOT=""
if [ "${1:-}" = "--screenshot" ]; then SHOT=$(realpath -m "${2:?--screenshot PNG}"); fi

cargo build --locked -q -p agentwire-cli
cargo build --locked -q -p agentwire --example browser_worker
(cd bindings/web && { [ -d node_modules ] || npm ci --no-audit --no-fund --silent; } && npm run --silent build)
BIN=target/debug/agentwire

source scripts/lib/hub.sh
"$BIN" cert --out "$WORK/certs" --webtransport >"$WORK/cert.txt"
HASH=$(sed -n 's/^sha-256: *\([0-9a-f]\{64\}\)$/\1/p' "$WORK/cert.txt")
PIN=$(sed -n 's/^hub key pin: *sha256:\([0-9a-f]\{64\}\)$/\1/p' "$WORK/cert.txt")
# WebTransport on the QUIC port; plain WebSocket on loopback as the fallback (a browser would
# not trust the hub's own certificate for wss:// without its CA installed).
"$BIN" hub --cert-dir "$WORK/certs" --listen quic://127.0.0.1:0 --listen ws://127.0.0.1:0 \
  --webtransport --allow-origin "https://127.0.0.1:$PORT" --allow-origin "https://localhost:$PORT" \
  >"$WORK/hub.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q "hub listening on ws://" "$WORK/hub.log" && break; sleep 0.1; done
QUIC=$(grep -o "quic://127.0.0.1:[0-9]*" "$WORK/hub.log" | head -1)
WS=$(grep -o "ws://127.0.0.1:[0-9]*" "$WORK/hub.log" | head -1)
[ -n "$QUIC" ] && [ -n "$WS" ] || { cat "$WORK/hub.log" >&2; exit 1; }
for w in worker-1 worker-2; do
  timeout "$((RUN_FOR + 30))" target/debug/examples/browser_worker "$QUIC" "$WORK/certs/ca.pem" "$w" &
  PIDS+=($!)
done

mkdir -p "$WORK/site/sdk"
cp examples/browser/index.html examples/browser/app.js "$WORK/site/"
cp bindings/web/dist/*.js "$WORK/site/sdk/"
cat >"$WORK/site/config.js" <<JS
export default {
  hub: ['wt://${QUIC#quic://}', '$WS'],
  serverCertificateHashes: ['$HASH'],
};
JS
# The page over HTTPS (HTTP/3, HTTP/2, HTTP/1.1) with the hub's own certificate.
"$BIN" serve --root "$WORK/site" --listen "127.0.0.1:$PORT" --cert-dir "$WORK/certs" >"$WORK/site.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do grep -q "^serving" "$WORK/site.log" && break; sleep 0.1; done
grep -q "^serving" "$WORK/site.log" || { cat "$WORK/site.log" >&2; exit 1; }

SPKI=$(python3 -c "import base64,sys; print(base64.b64encode(bytes.fromhex(sys.argv[1])).decode())" "$PIN")
if [ -n "$SHOT" ]; then
  node examples/browser/screenshot.mjs "https://127.0.0.1:$PORT/?auto=200" "$SHOT" 200 "$PIN"
  exit 0
fi
echo "the demo: https://127.0.0.1:$PORT/  (hub $QUIC, WebTransport sha-256 $HASH)"
echo "its certificate is the hub's, signed by a CA of this run: accept the browser's warning, or"
echo "  chromium --user-data-dir=\$(mktemp -d) --ignore-certificate-errors-spki-list=$SPKI https://127.0.0.1:$PORT/"
echo "stops in $RUN_FOR s, or press Ctrl-C"
sleep "$RUN_FOR"
