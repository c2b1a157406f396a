#!/usr/bin/env bash
# Peer servers vs agentwire, loopback only: interop both ways and a first single-client table.
# Usage: scripts/peers/run.sh OUTDIR
# Servers (lib.sh: each pinned with taskset -c 1; clients pinned to core 0); quic-go if Go is
# there, TQUIC if installed (install.sh --with-tquic).
# Load: agentwire load URL --duration 3s --json --ca ca.pem (certificate verified: every server
# uses hub.pem/hub.key from `agentwire cert --name 127.0.0.1`). h2load and gtlsclient do not verify.
# Reverse interop against agentwire serve: h2load (HTTP/2), gtlsclient (ngtcp2, HTTP/3),
# quic-go's HTTP/3 client (scripts/peers/quicgo, client mode) and tquic_client (if installed).
# The side-by-side scorecard and the load-generator comparison are scorecard.sh.
set -uo pipefail
ROOTDIR="$(cd "$(dirname "$0")/../.." && pwd)"
AW="${AW:-$ROOTDIR/target/release/agentwire}"
OUT="${1:?usage: run.sh OUTDIR}"; mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
DUR="${DUR:-3s}"; FILE="${FILE:-1k.bin}"; CONNS="${CONNS:-2}"; STREAMS="${STREAMS:-8}"
# shellcheck source=lib.sh
source "$ROOTDIR/scripts/peers/lib.sh"
prepare_root
start_agentwire

load() { # name proto port
  local name=$1 proto=$2 port=$3
  log taskset -c 0 "$AW" load "https://127.0.0.1:$port/$FILE" --proto "$proto" --duration "$DUR" --connections "$CONNS" --streams "$STREAMS" --ca "$TMP/certs/ca.pem" --json
  timeout 30 taskset -c 0 "$AW" load "https://127.0.0.1:$port/$FILE" --proto "$proto" --duration "$DUR" \
     --connections "$CONNS" --streams "$STREAMS" --ca "$TMP/certs/ca.pem" --json > "$OUT/load-$name-$proto.json" 2> "$OUT/load-$name-$proto.stderr"
  echo "rc=$?" >> "$OUT/load-$name-$proto.stderr"
}
# curl-free single-request sanity checks come from the load errors themselves.

# 1. agentwire serve
load agentwire h3 8443
load agentwire h2 8443

# 2. Reverse interop against agentwire serve
log taskset -c 0 h2load -D 3 -c "$CONNS" -m "$STREAMS" "https://127.0.0.1:8443/$FILE"
timeout 30 taskset -c 0 h2load -D 3 -c "$CONNS" -m "$STREAMS" "https://127.0.0.1:8443/$FILE" > "$OUT/h2load-agentwire.txt" 2>&1
echo "rc=$?" >> "$OUT/h2load-agentwire.txt"
mkdir -p "$TMP/dl"
log taskset -c 0 gtlsclient --exit-on-all-streams-close --no-quic-dump --no-http-dump --download="$TMP/dl" 127.0.0.1 8443 "https://127.0.0.1:8443/$FILE"
timeout 20 taskset -c 0 gtlsclient --exit-on-all-streams-close --no-quic-dump --no-http-dump --download="$TMP/dl" \
  127.0.0.1 8443 "https://127.0.0.1:8443/$FILE" > "$OUT/gtlsclient-agentwire.txt" 2>&1
echo "rc=$?" >> "$OUT/gtlsclient-agentwire.txt"
{ echo "downloaded:"; ls -l "$TMP/dl" 2>&1; cmp "$TMP/dl/$FILE" "$TMP/www/$FILE" && echo "cmp: identical to served file"; } >> "$OUT/gtlsclient-agentwire.txt" 2>&1
# gtlsclient, 100 streams on one connection (bounded by -n)
log taskset -c 0 gtlsclient -n 100 --exit-on-all-streams-close --no-quic-dump --no-http-dump 127.0.0.1 8443 "https://127.0.0.1:8443/$FILE"
timeout 30 taskset -c 0 gtlsclient -n 100 --exit-on-all-streams-close --no-quic-dump --no-http-dump 127.0.0.1 8443 "https://127.0.0.1:8443/$FILE" \
  2>&1 | grep -E '^http: stream .*:status|rc=|error|ERR' > "$OUT/gtlsclient-agentwire-n100.txt"
echo "rc=${PIPESTATUS[0]} status-200-count=$(grep -c ':status: 200' "$OUT/gtlsclient-agentwire-n100.txt")" >> "$OUT/gtlsclient-agentwire-n100.txt"

# quic-go's HTTP/3 client (certificate verified), 200 requests on one connection
if [ -z "${SKIP_QUICGO:-}" ] && build_quicgo; then
  log taskset -c 0 "$TMP/quicgo-server" client "https://127.0.0.1:8443/$FILE" "$TMP/certs/ca.pem" 200
  timeout 60 taskset -c 0 "$TMP/quicgo-server" client "https://127.0.0.1:8443/$FILE" "$TMP/certs/ca.pem" 200 \
    > "$OUT/quicgo-client-agentwire.txt" 2>&1
  echo "rc=$?" >> "$OUT/quicgo-client-agentwire.txt"
fi
# TQUIC's tquic_client (HTTP/3 load generator; does not verify), 2 connections x 8 streams, 3 s
TQC="$(tquic_bin tquic_client TQUIC_CLIENT)"
if [ -n "$TQC" ]; then
  log taskset -c 0 "$TQC" -t 1 --max-concurrent-conns 2 --max-concurrent-requests 8 --max-requests-per-conn 0 --total-requests-per-thread 0 -d 3 --log-level OFF -c 127.0.0.1:8443 "https://127.0.0.1:8443/$FILE"
  timeout 30 taskset -c 0 "$TQC" -t 1 --max-concurrent-conns 2 --max-concurrent-requests 8 --max-requests-per-conn 0 \
    --total-requests-per-thread 0 -d 3 --log-level OFF -c 127.0.0.1:8443 "https://127.0.0.1:8443/$FILE" \
    > "$OUT/tquic_client-agentwire.txt" 2>&1
  echo "rc=$?" >> "$OUT/tquic_client-agentwire.txt"
fi

# 3. ngtcp2 gtlsserver (HTTP/3 only)
start_gtlsserver
load gtlsserver h3 8444

# 4. Caddy (h3 + h2)
start_caddy
load caddy h3 8445
log taskset -c 0 gtlsclient --exit-on-all-streams-close --no-quic-dump --no-http-dump 127.0.0.1 8445 "https://127.0.0.1:8445/$FILE"
timeout 20 taskset -c 0 gtlsclient --exit-on-all-streams-close --no-quic-dump --no-http-dump 127.0.0.1 8445 "https://127.0.0.1:8445/$FILE" \
  > "$OUT/gtlsclient-caddy.txt" 2>&1; echo "rc=$?" >> "$OUT/gtlsclient-caddy.txt"
load caddy h2 8445

# 5. nginx-light (HTTP/2 over TLS)
start_nginx
load nginx h2 8446
tail -n 50 "$TMP/nginx/error.log" > "$OUT/nginx-error.tail.log" 2>/dev/null

# 6. quic-go (h3) + Go net/http (h2); skipped without Go or if the build fails. SKIP_QUICGO=1 skips it.
if [ -z "${SKIP_QUICGO:-}" ] && start_quicgo; then
  load quicgo h3 8447
  load quicgo h2 8447
fi

# 7. TQUIC tquic_server (h3), if installed.
if start_tquic; then
  load tquic h3 8448
fi

echo "done: $OUT" >&2
