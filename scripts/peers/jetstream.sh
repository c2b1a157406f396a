#!/usr/bin/env bash
# Durable work queues: NATS JetStream (file storage) beside agentwire's queues (`hub --store`),
# interleaved round by round, same shape, loopback only.
#
# usage: scripts/peers/jetstream.sh OUT [ROUNDS]
# env:   AGENTWIRE    agentwire binary (default target/release/agentwire)
#        NATS_VERSION nats-server module version (default v2.15.2)
#        PRODUCERS WINDOW CONSUMERS CREDIT SIZE  the shape (default 4 16 2 64 1024)
#        DURATION_MS  measured window per run (default 5000)
#        TOOLS        where nats-server and the client are installed (default target/peers-nats)
#
# Each round, with a fresh store every run: nats-server -js with its default sync (JetStream
# writes each message to its file and flushes to disk every 2 minutes), nats-server with
# `sync_interval: always` (a flush per write, like agentwire's store), both over plain TCP;
# then an agentwire hub with --store over a Unix socket and over plain WebSocket (ws://, TCP).
# Producers keep WINDOW enqueues in flight, each waiting for the server's acknowledgement that
# the task is stored; consumers hold up to CREDIT tasks and ack each (scripts/peers/jetstream
# for NATS, `agentwire queue bench` for agentwire). Raw results: OUT/*.json (one JSON line per
# run); the table: OUT/summary.md (scripts/peers/jetstream_summary.py OUT).
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,20p "$0" >&2; exit 2; }
out=$1 rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
aw=${AGENTWIRE:-$root/target/release/agentwire}
nats_version=${NATS_VERSION:-v2.15.2}
producers=${PRODUCERS:-4} window=${WINDOW:-16} consumers=${CONSUMERS:-2} credit=${CREDIT:-64}
size=${SIZE:-1024} duration_ms=${DURATION_MS:-5000}
tools=${TOOLS:-$root/target/peers-nats}
mkdir -p "$out" "$tools"
out=$(cd "$out" && pwd)

[ -x "$aw" ] || { echo "no agentwire binary at $aw (cargo build --release -p agentwire-cli)" >&2; exit 1; }
command -v go >/dev/null || { echo "needs Go (the Go toolchain) to install nats-server and the client" >&2; exit 1; }
NATS_VERSION=$nats_version "$root/scripts/lib/nats-server.sh" "$tools"
(cd "$here/jetstream" && go build -o "$tools/jsbench" .)

work=$(mktemp -d)
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

{
  echo "# $(date -u +%FT%TZ) git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$root" diff --quiet -- crates Cargo.lock 2>/dev/null || echo ' (uncommitted changes)')"
  echo "scripts/peers/jetstream.sh $out $rounds  (PRODUCERS=$producers WINDOW=$window CONSUMERS=$consumers CREDIT=$credit SIZE=$size DURATION_MS=$duration_ms)"
} >>"$out/commands.txt"
{
  uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true
  df -hT "$work" | tail -1
  "$tools/nats-server" --version
  go version
  echo "agentwire: $aw ($(sha256sum "$aw" | cut -c1-16), built $(stat -c %y "$aw"))"
} >"$out/machine.txt"

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

# finish NAME ROUND T0 T1 FILE: adds the server's CPU to the run's JSON line, appends it.
finish() {
  python3 - "$5" "$3" "$4" "$2" "$1" >>"$out/$1.json" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
ticks = os.sysconf("SC_CLK_TCK")
r["server_cpu_secs"] = (int(sys.argv[3]) - int(sys.argv[2])) / ticks
r["server_cpu_us_per_task"] = r["server_cpu_secs"] * 1e6 / max(1.0, r["consumed_per_sec"] * r["duration_ms"] / 1000)
r["round"] = int(sys.argv[4])
r["name"] = sys.argv[5]
print(json.dumps(r))
PY
  tail -1 "$out/$1.json" | python3 -c "import json,sys; r=json.load(sys.stdin); print(f\"r{r['round']} {r['name']:16} stored {r['enqueued_per_sec']:,.0f}/s consumed {r['consumed_per_sec']:,.0f}/s, server {r['server_cpu_us_per_task']:.1f} us/task, errors {r['errors']}\")"
}

run_js() { # NAME SYNC ROUND
  local name=$1 sync=$2 round=$3 port=14230
  rm -rf "$work/js"
  {
    echo "listen: 127.0.0.1:$port"
    echo "jetstream {"
    echo "  store_dir: \"$work/js\""
    [ "$sync" = always ] && echo "  sync_interval: always"
    echo "}"
  } >"$work/js.conf"
  "$tools/nats-server" -c "$work/js.conf" >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  local t0 t1
  t0=$(cpu_ticks "$server_pid")
  timeout $((duration_ms / 1000 + 60)) "$tools/jsbench" -url "nats://127.0.0.1:$port" -mode "$sync" \
    -producers "$producers" -window "$window" -consumers "$consumers" -credit "$credit" \
    -size "$size" -duration "${duration_ms}ms" >"$work/run.json"
  t1=$(cpu_ticks "$server_pid")
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
  finish "$name" "$round" "$t0" "$t1" "$work/run.json"
}

run_aw() { # NAME LISTEN-URL ROUND
  local name=$1 url=$2 round=$3
  rm -rf "$work/aw"
  "$aw" hub --listen "$url" --store "$work/aw" >"$work/hub.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do grep -q "hub listening" "$work/hub.log" 2>/dev/null && break; sleep 0.05; done
  local t0 t1
  t0=$(cpu_ticks "$server_pid")
  timeout $((duration_ms / 1000 + 60)) "$aw" queue --hub "$url" bench qbench --producers "$producers" \
    --window "$window" --consumers "$consumers" --credit "$credit" --size "$size" \
    --duration-ms "$duration_ms" >"$work/run.json"
  t1=$(cpu_ticks "$server_pid")
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps(r))" "$work/run.json" >"$work/run1.json"
  finish "$name" "$round" "$t0" "$t1" "$work/run1.json"
}

for round in $(seq 1 "$rounds"); do
  run_js jetstream-default default "$round"
  run_js jetstream-sync always "$round"
  run_aw agentwire-unix "unix://$work/hub.sock" "$round"
  run_aw agentwire-ws "ws://127.0.0.1:14240" "$round"
done
python3 "$here/jetstream_summary.py" "$out" | tee "$out/summary.md"
