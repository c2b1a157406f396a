# Sourced by scripts that run a hub for a while (sdk-bench.sh, examples/polyglot/run.sh): a
# work directory and background processes that go away when the script exits, and
# `start_hub AGENTWIRE_BINARY`, which makes certificates and starts a hub on a free loopback
# QUIC port, then sets HUB (its address) and CA (the CA file agents trust it with).
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

start_hub() {
  "$1" cert --out "$WORK/certs" >/dev/null
  CA="$WORK/certs/ca.pem"
  "$1" hub --listen quic://127.0.0.1:0 --cert-dir "$WORK/certs" >"$WORK/hub.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q "hub listening on quic://" "$WORK/hub.log" && break; sleep 0.1; done
  HUB=$(grep -o "quic://127.0.0.1:[0-9]*" "$WORK/hub.log" | head -1)
  [ -n "$HUB" ] || { cat "$WORK/hub.log" >&2; return 1; }
}
