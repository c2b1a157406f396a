#!/usr/bin/env bash
# NATS beside agentwire, interleaved, on the bench's closed-loop cells (loopback only).
#
# usage: scripts/peers/nats.sh OUT [ROUNDS]
# env:   AGENTWIRE   agentwire binary (default target/release/agentwire)
#        NATS_VERSION nats-server module version (default v2.15.2)
#        CELLS       "AGENTSxSIZE ..." (default "10x1024 100x10240")
#        WINDOW      requests in flight per client connection (default 16)
#        DURATION_MS measured window per run (default 5000)
#        TRANSPORTS  agentwire transports (default unix,wss,quic)
#        TOOLS       where nats-server and the client are installed (default target/peers-nats)
#        HUB_THREADS, CLIENT_THREADS  threads of the server side and of the client side: the
#                    hub's and nats-server's (GOMAXPROCS), the bench clients' and natsbench's
#                    (default, as agentwire bench: the server half of the cores, the clients
#                    all of them)
#        PATTERN     request (default), or a one-way pattern of agentwire bench's (fanout:
#                    one publisher to AGENTS subscribers; gather: AGENTS senders to one
#                    aggregator; stream: AGENTS sender-receiver pairs; queue: AGENTS producers
#                    to AGENTS consumers of one work queue, JetStream in memory on the NATS
#                    side, the hub's queue on agentwire's), each sender keeping WINDOW messages
#                    its pacing receiver has not yet received (deliveries per second, latency
#                    from send to delivery)
#
# Installs nats-server (Go module github.com/nats-io/nats-server/v2) and builds the request/reply
# client in scripts/peers/nats (nats.go) into TOOLS. Each round runs, per cell: NATS over
# plain TCP, NATS over TLS 1.3 (certificates from `agentwire cert`), then `agentwire bench` on
# the same cell (AGENTS client connections, WINDOW requests in flight each, echo workers one per
# ten clients in a queue group, the hub or server its own process). Raw results: OUT/nats-*.json
# (one JSON line per run), OUT/agentwire-*/bench-*.json; the table: OUT/summary.md
# (scripts/peers/nats_summary.py OUT). Every run stops by itself after its window.
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,29p "$0" >&2; exit 2; }
out=$1 rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
aw=${AGENTWIRE:-$root/target/release/agentwire}
nats_version=${NATS_VERSION:-v2.15.2}
cells=${CELLS:-"10x1024 100x10240"}
window=${WINDOW:-16}
duration_ms=${DURATION_MS:-5000}
transports=${TRANSPORTS:-unix,wss,quic}
pattern=${PATTERN:-request}
cores=$(nproc)
hub_threads=${HUB_THREADS:-$(( cores / 2 > 0 ? cores / 2 : 1 ))}
client_threads=${CLIENT_THREADS:-$cores}
tools=${TOOLS:-$root/target/peers-nats}
mkdir -p "$out" "$tools"
out=$(cd "$out" && pwd)

[ -x "$aw" ] || { echo "no agentwire binary at $aw (cargo build --release -p agentwire-cli)" >&2; exit 1; }
command -v go >/dev/null || { echo "needs Go (the Go toolchain) to install nats-server and the client" >&2; exit 1; }
NATS_VERSION=$nats_version "$root/scripts/lib/nats-server.sh" "$tools"
(cd "$here/nats" && go build -o "$tools/natsbench" .)

work=$(mktemp -d)
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
"$aw" cert --out "$work/certs" >/dev/null
cat >"$work/tls.conf" <<EOF
tls {
  cert_file: "$work/certs/hub.pem"
  key_file: "$work/certs/hub.key"
  min_version: "1.3"
}
EOF

{
  echo "# $(date -u +%FT%TZ) git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "scripts/peers/nats.sh $out $rounds  (PATTERN=$pattern CELLS=\"$cells\" WINDOW=$window DURATION_MS=$duration_ms TRANSPORTS=$transports HUB_THREADS=$hub_threads CLIENT_THREADS=$client_threads)"
} >>"$out/commands.txt"
{
  uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true
  "$tools/nats-server" --version
  go version
  echo "agentwire: $aw ($("$aw" --version 2>/dev/null || echo unknown))"
} >"$out/machine.txt"

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

# run_nats NAME PORT [TLS]: one nats-server, one client run; appends a JSON line to OUT/nats-NAME.json.
run_nats() {
  local name=$1 port=$2 tls=${3:-} agents=$4 size=$5 round=$6
  local args=(-a 127.0.0.1 -p "$port")
  # The queue pattern's work queue is a JetStream stream (in memory; the store directory is
  # the run's own).
  [ "$pattern" = queue ] && args+=(-js -sd "$work/js-$name")
  local client_args=(-url "nats://127.0.0.1:$port")
  if [ -n "$tls" ]; then
    args+=(-c "$work/tls.conf")
    client_args+=(-ca "$work/certs/ca.pem")
  fi
  GOMAXPROCS=$hub_threads "$tools/nats-server" "${args[@]}" >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  local t0 t1
  t0=$(cpu_ticks "$server_pid")
  GOMAXPROCS=$client_threads timeout $((duration_ms / 1000 + 30)) "$tools/natsbench" "${client_args[@]}" -clients "$agents" \
    -window "$window" -size "$size" -duration "${duration_ms}ms" -pattern "$pattern" >"$work/run.json"
  t1=$(cpu_ticks "$server_pid")
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
  python3 - "$work/run.json" "$t0" "$t1" "$round" "$name" >>"$out/nats-$name.json" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
ticks = os.sysconf("SC_CLK_TCK")
r["server_cpu_secs"] = (int(sys.argv[3]) - int(sys.argv[2])) / ticks
r["server_cpu_us_per_response"] = r["server_cpu_secs"] * 1e6 / max(1, r["completed"])
r["round"] = int(sys.argv[4])
r["name"] = sys.argv[5]
print(json.dumps(r))
PY
  tail -1 "$out/nats-$name.json" | python3 -c "import json,sys; r=json.load(sys.stdin); print(f\"r{r['round']} {r['name']:10} {r['clients']}x{r['size']}: {r['msg_per_sec']:,.0f} msg/s p50/p90/p99 {r['p50_ms']}/{r['p90_ms']}/{r['p99_ms']} ms, server {r['server_cpu_us_per_response']:.1f} us/response, errors {r['errors']}\")"
}

for round in $(seq 1 "$rounds"); do
  for cell in $cells; do
    agents=${cell%x*} size=${cell#*x}
    run_nats tcp 14222 "" "$agents" "$size" "$round"
    run_nats tls 14223 tls "$agents" "$size" "$round"
    "$aw" bench --pattern "$pattern" --transports "$transports" --agents "$agents" --sizes "$size" --networks 0ms \
      --window "$window" --duration-ms "$duration_ms" --hub-threads "$hub_threads" \
      --client-threads "$client_threads" --repetitions 1 --no-progress \
      --out "$out/agentwire-$cell-r$round" 2>&1 | grep 'msg/s,' | sed "s/^/r$round agentwire $cell: /"
  done
done
python3 "$here/nats_summary.py" "$out" | tee "$out/summary.md"
