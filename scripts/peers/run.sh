#!/usr/bin/env bash
# Peer servers vs agentwire, loopback only.
# Usage: scripts/peers/run.sh OUTDIR
# Servers (each pinned with taskset -c 1; clients pinned to core 0); optional: quic-go :8447
# (built from scripts/peers/quicgo if Go is present), TQUIC tquic_server :8448 (if installed).
#   agentwire serve  :8443 (h3, h2)   gtlsserver (ngtcp2) :8444 (h3)
#   caddy            :8445 (h3, h2)   nginx-light         :8446 (h2)
# Load: agentwire load URL --duration 3s --json --ca ca.pem (certificate verified: every server
# uses hub.pem/hub.key from `agentwire cert --name 127.0.0.1`). h2load and gtlsclient do not verify.
# Reverse interop: h2load (HTTP/2) and gtlsclient (ngtcp2, HTTP/3) against agentwire serve.
set -uo pipefail
ROOTDIR="$(cd "$(dirname "$0")/../.." && pwd)"
AW="${AW:-$ROOTDIR/target/release/agentwire}"
OUT="${1:?usage: run.sh OUTDIR}"; mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
DUR="${DUR:-3s}"; FILE="${FILE:-1k.bin}"; CONNS="${CONNS:-2}"; STREAMS="${STREAMS:-8}"
TMP="$(mktemp -d /tmp/peers.XXXXXX)"
chmod 755 "$TMP"   # nginx workers run as nobody and must read $TMP/www
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
CMDS="$OUT/commands.txt"; : > "$CMDS"
log() { echo "+ $*" | tee -a "$CMDS" >&2; }
run() { log "$@"; "$@"; }

# Certs and files (generated once by agentwire serve --generate).
run "$AW" cert --out "$TMP/certs" --name 127.0.0.1 > "$OUT/cert.log" 2>&1
mkdir -p "$TMP/www"
log taskset -c 1 "$AW" serve --root "$TMP/www" --listen 127.0.0.1:8443 --cert-dir "$TMP/certs" --generate --threads 1
taskset -c 1 "$AW" serve --root "$TMP/www" --listen 127.0.0.1:8443 --cert-dir "$TMP/certs" --generate --threads 1 > "$OUT/server-agentwire.log" 2>&1 &
PIDS+=($!)
sleep 1.5
ls -l "$TMP/www" > "$OUT/files.txt"

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

# 3. ngtcp2 gtlsserver (HTTP/3 only)
log taskset -c 1 gtlsserver -q -d "$TMP/www" 127.0.0.1 8444 "$TMP/certs/hub.key" "$TMP/certs/hub.pem"
taskset -c 1 gtlsserver -q -d "$TMP/www" 127.0.0.1 8444 "$TMP/certs/hub.key" "$TMP/certs/hub.pem" > "$OUT/server-gtlsserver.log" 2>&1 &
PIDS+=($!)
sleep 1
load gtlsserver h3 8444

# 4. Caddy (h3 + h2)
mkdir -p "$TMP/caddy"
cat > "$TMP/caddy/Caddyfile" <<CF
{
	admin off
	# Without default_sni Caddy 2.6.2 answers QUIC handshakes without SNI (IP URL) with
	# CRYPTO_ERROR 0x150 (TLS internal_error); TCP/h2 works either way. See README.
	default_sni 127.0.0.1
	auto_https disable_redirects
	servers {
		protocols h1 h2 h3
	}
}
https://127.0.0.1:8445 {
	tls $TMP/certs/hub.pem $TMP/certs/hub.key
	root * $TMP/www
	file_server
}
CF
cp "$TMP/caddy/Caddyfile" "$OUT/Caddyfile"
log XDG_DATA_HOME=$TMP/caddy XDG_CONFIG_HOME=$TMP/caddy taskset -c 1 caddy run --config "$TMP/caddy/Caddyfile" --adapter caddyfile
XDG_DATA_HOME=$TMP/caddy XDG_CONFIG_HOME=$TMP/caddy HOME=$TMP/caddy taskset -c 1 caddy run --config "$TMP/caddy/Caddyfile" --adapter caddyfile > "$OUT/server-caddy.log" 2>&1 &
PIDS+=($!)
sleep 2
load caddy h3 8445
log taskset -c 0 gtlsclient --exit-on-all-streams-close --no-quic-dump --no-http-dump 127.0.0.1 8445 "https://127.0.0.1:8445/$FILE"
timeout 20 taskset -c 0 gtlsclient --exit-on-all-streams-close --no-quic-dump --no-http-dump 127.0.0.1 8445 "https://127.0.0.1:8445/$FILE" \
  > "$OUT/gtlsclient-caddy.txt" 2>&1; echo "rc=$?" >> "$OUT/gtlsclient-caddy.txt"
load caddy h2 8445

# 5. nginx-light (HTTP/2 over TLS)
mkdir -p "$TMP/nginx"
cat > "$TMP/nginx/nginx.conf" <<NC
daemon off;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $TMP/nginx/body;
  sendfile on;
  keepalive_requests 100000000;   # brief said 100000; that made nginx GOAWAY every ~100k requests mid-run (see run1-failed)
  server {
    listen 127.0.0.1:8446 ssl http2;
    ssl_certificate $TMP/certs/hub.pem;
    ssl_certificate_key $TMP/certs/hub.key;
    ssl_protocols TLSv1.3;
    root $TMP/www;
  }
}
NC
cp "$TMP/nginx/nginx.conf" "$OUT/nginx.conf"
log taskset -c 1 nginx -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log"
taskset -c 1 nginx -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log" > "$OUT/server-nginx.log" 2>&1 &
PIDS+=($!)
sleep 1
load nginx h2 8446
tail -n 50 "$TMP/nginx/error.log" > "$OUT/nginx-error.tail.log" 2>/dev/null

# 6. quic-go (h3) + Go net/http (h2), built from scripts/peers/quicgo (needs Go + Go module proxy;
#    skipped if go is missing or the build fails). SKIP_QUICGO=1 skips it.
if [ -z "${SKIP_QUICGO:-}" ] && command -v go >/dev/null; then
  log "(cd $ROOTDIR/scripts/peers/quicgo && go build -o $TMP/quicgo-server .)"
  if (cd "$ROOTDIR/scripts/peers/quicgo" && timeout 300 go build -o "$TMP/quicgo-server" .) > "$OUT/quicgo-build.log" 2>&1; then
    (cd "$ROOTDIR/scripts/peers/quicgo" && go list -m github.com/quic-go/quic-go && go version) >> "$OUT/quicgo-build.log" 2>&1
    log taskset -c 1 "$TMP/quicgo-server" 127.0.0.1:8447 "$TMP/www" "$TMP/certs/hub.pem" "$TMP/certs/hub.key"
    taskset -c 1 "$TMP/quicgo-server" 127.0.0.1:8447 "$TMP/www" "$TMP/certs/hub.pem" "$TMP/certs/hub.key" > "$OUT/server-quicgo.log" 2>&1 &
    PIDS+=($!)
    sleep 1
    load quicgo h3 8447
    load quicgo h2 8447
  else
    echo "quic-go build failed, skipped" >&2
  fi
fi

# 7. TQUIC tquic_server (h3), if installed: `cargo install tquic_tools --root DIR` (~4.5 min here),
#    found via $TQUIC_SERVER or PATH. Skipped otherwise.
TQ="${TQUIC_SERVER:-$(command -v tquic_server || true)}"
if [ -n "$TQ" ] && [ -x "$TQ" ]; then
  "$TQ" --version > "$OUT/tquic-version.txt" 2>&1
  log taskset -c 1 "$TQ" --listen 127.0.0.1:8448 --cert "$TMP/certs/hub.pem" --key "$TMP/certs/hub.key" --root "$TMP/www" --log-level OFF
  taskset -c 1 "$TQ" --listen 127.0.0.1:8448 --cert "$TMP/certs/hub.pem" --key "$TMP/certs/hub.key" --root "$TMP/www" --log-level OFF \
    > "$OUT/server-tquic.log" 2>&1 &
  PIDS+=($!)
  sleep 1
  load tquic h3 8448
fi

echo "done: $OUT" >&2
