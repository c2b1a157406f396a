# Shared by scripts/peers/run.sh and scripts/peers/scorecard.sh (source it; not run alone).
#
# Starts the peer servers on 127.0.0.1, each pinned to one core (taskset -c "$SERVER_CORE"),
# all serving the same root ($TMP/www, the standard files written by `agentwire serve
# --generate`) with the same certificate ($TMP/certs from `agentwire cert --name 127.0.0.1`).
# Each start_* function sets SERVER_PID to the process that does the work (for nginx: its one
# worker) and adds what it started to PIDS for cleanup. Ports:
#   agentwire serve 8443 (h3, h2, http1.1)  ngtcp2 gtlsserver 8444 (h3)
#   caddy           8445 (h3, h2, http1.1)  nginx             8446 (h2, http1.1)
#   quic-go         8447 (h3, h2, http1.1)  TQUIC tquic_server 8448 (h3)
# Needs: AW (agentwire binary), OUT (output dir), ROOTDIR (repo). Commands are appended to
# $OUT/commands.txt as they run.

SERVER_CORE="${SERVER_CORE:-1}"
CLIENT_CORE="${CLIENT_CORE:-0}"
TMP="$(mktemp -d /tmp/peers.XXXXXX)"
chmod 755 "$TMP"   # nginx workers run as nobody and must read $TMP/www
PIDS=()
SERVER_PID=""   # the process doing the work (CPU measured)
SERVER_MAIN=""  # the process to stop (nginx: the master)

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

CMDS="$OUT/commands.txt"
echo "# $(date -u +%FT%TZ): $0 $*" >> "$CMDS"
log() { echo "+ $*" | tee -a "$CMDS" >&2; }
run() { log "$@"; "$@"; }

# Stops the server started last.
stop_server() {
  [ -n "$SERVER_MAIN" ] || return 0
  kill "$SERVER_MAIN" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$SERVER_MAIN" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$SERVER_MAIN" 2>/dev/null
  SERVER_MAIN=""
  sleep 0.5
}

# Certificates and files, once.
prepare_root() {
  run "$AW" cert --out "$TMP/certs" --name 127.0.0.1 > "$OUT/cert.log" 2>&1
  mkdir -p "$TMP/www"
}

# Waits (up to 10 s) until something listens on TCP or UDP port $1.
wait_port() {
  for _ in $(seq 100); do
    if ss -Htlun "sport = :$1" | grep -q .; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on port $1" >&2
  return 1
}

start_agentwire() {
  log taskset -c "$SERVER_CORE" "$AW" serve --root "$TMP/www" --listen 127.0.0.1:8443 --cert-dir "$TMP/certs" --generate --threads 1
  taskset -c "$SERVER_CORE" "$AW" serve --root "$TMP/www" --listen 127.0.0.1:8443 --cert-dir "$TMP/certs" \
    --generate --threads 1 > "$OUT/server-agentwire.log" 2>&1 &
  SERVER_PID=$!; SERVER_MAIN=$!; PIDS+=("$SERVER_PID")
  wait_port 8443 && sleep 0.5
  ls -l "$TMP/www" > "$OUT/files.txt"
}

start_gtlsserver() {
  log taskset -c "$SERVER_CORE" gtlsserver -q -d "$TMP/www" 127.0.0.1 8444 "$TMP/certs/hub.key" "$TMP/certs/hub.pem"
  taskset -c "$SERVER_CORE" gtlsserver -q -d "$TMP/www" 127.0.0.1 8444 "$TMP/certs/hub.key" "$TMP/certs/hub.pem" \
    > "$OUT/server-gtlsserver.log" 2>&1 &
  SERVER_PID=$!; SERVER_MAIN=$!; PIDS+=("$SERVER_PID")
  wait_port 8444
}

start_caddy() {
  mkdir -p "$TMP/caddy"
  cat > "$TMP/caddy/Caddyfile" <<CF
{
	admin off
	# Without default_sni Caddy 2.6.2 answers QUIC handshakes without SNI (IP URL) with
	# CRYPTO_ERROR 0x150 (TLS internal_error); TCP/h2 works either way. See the peers README.
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
  log XDG_DATA_HOME="$TMP/caddy" XDG_CONFIG_HOME="$TMP/caddy" taskset -c "$SERVER_CORE" caddy run --config "$TMP/caddy/Caddyfile" --adapter caddyfile
  XDG_DATA_HOME="$TMP/caddy" XDG_CONFIG_HOME="$TMP/caddy" HOME="$TMP/caddy" taskset -c "$SERVER_CORE" \
    caddy run --config "$TMP/caddy/Caddyfile" --adapter caddyfile > "$OUT/server-caddy.log" 2>&1 &
  SERVER_PID=$!; SERVER_MAIN=$!; PIDS+=("$SERVER_PID")
  wait_port 8445 && sleep 1
}

start_nginx() {
  mkdir -p "$TMP/nginx"
  cat > "$TMP/nginx/nginx.conf" <<NC
daemon off;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $TMP/nginx/body;
  sendfile on;
  # nginx ends a connection with a graceful GOAWAY / Connection: close after this many
  # requests; agentwire load sends the turned-away requests again (counted as retried).
  keepalive_requests 100000000;
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
  log taskset -c "$SERVER_CORE" nginx -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log"
  taskset -c "$SERVER_CORE" nginx -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log" > "$OUT/server-nginx.log" 2>&1 &
  local master=$!; PIDS+=("$master"); SERVER_MAIN=$master
  wait_port 8446 && sleep 0.3
  SERVER_PID="$(pgrep -P "$master" | head -1)"
  [ -n "$SERVER_PID" ] || SERVER_PID=$master
}

# Builds scripts/peers/quicgo into $TMP/quicgo-server (a quic-go server, and an HTTP/3 client
# mode). Needs Go and the Go module proxy. Returns 1 if it cannot be built.
build_quicgo() {
  [ -x "$TMP/quicgo-server" ] && return 0
  command -v go >/dev/null || { echo "no Go: quic-go skipped" >&2; return 1; }
  log "(cd $ROOTDIR/scripts/peers/quicgo && go build -o $TMP/quicgo-server .)"
  if ! (cd "$ROOTDIR/scripts/peers/quicgo" && timeout 300 go build -o "$TMP/quicgo-server" .) > "$OUT/quicgo-build.log" 2>&1; then
    echo "quic-go build failed, skipped (see $OUT/quicgo-build.log)" >&2
    return 1
  fi
  (cd "$ROOTDIR/scripts/peers/quicgo" && go list -m github.com/quic-go/quic-go && go version) >> "$OUT/quicgo-build.log" 2>&1
}

# quic-go h3 + Go net/http h2/http1.1 (build_quicgo). Returns 1 (and starts nothing) if it
# cannot be built.
start_quicgo() {
  build_quicgo || return 1
  log taskset -c "$SERVER_CORE" "$TMP/quicgo-server" 127.0.0.1:8447 "$TMP/www" "$TMP/certs/hub.pem" "$TMP/certs/hub.key"
  taskset -c "$SERVER_CORE" "$TMP/quicgo-server" 127.0.0.1:8447 "$TMP/www" "$TMP/certs/hub.pem" "$TMP/certs/hub.key" \
    > "$OUT/server-quicgo.log" 2>&1 &
  SERVER_PID=$!; SERVER_MAIN=$!; PIDS+=("$SERVER_PID")
  wait_port 8447
}

# TQUIC's tquic_server, if installed (install.sh --with-tquic, or $TQUIC_SERVER, or PATH).
# Returns 1 if it is not there.
tquic_bin() {
  local name=$1 var=$2
  local given="${!var:-}"
  if [ -n "$given" ]; then echo "$given"; return; fi
  command -v "$name" 2>/dev/null || { [ -x "/opt/tquic/bin/$name" ] && echo "/opt/tquic/bin/$name"; } || true
}
start_tquic() {
  local tq; tq="$(tquic_bin tquic_server TQUIC_SERVER)"
  [ -n "$tq" ] && [ -x "$tq" ] || { echo "no tquic_server: TQUIC skipped" >&2; return 1; }
  "$tq" --version > "$OUT/tquic-version.txt" 2>&1
  log taskset -c "$SERVER_CORE" "$tq" --listen 127.0.0.1:8448 --cert "$TMP/certs/hub.pem" --key "$TMP/certs/hub.key" --root "$TMP/www" --log-level OFF
  taskset -c "$SERVER_CORE" "$tq" --listen 127.0.0.1:8448 --cert "$TMP/certs/hub.pem" --key "$TMP/certs/hub.key" \
    --root "$TMP/www" --log-level OFF > "$OUT/server-tquic.log" 2>&1 &
  SERVER_PID=$!; SERVER_MAIN=$!; PIDS+=("$SERVER_PID")
  wait_port 8448
}

# CPU seconds x 100 (clock ticks) used so far by process $1, all threads.
cpu_ticks() {
  sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}
