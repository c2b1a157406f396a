#!/usr/bin/env bash
# Zenoh beside agentwire, interleaved round by round, on agentwire bench's patterns.
#
# usage: scripts/peers/zenoh.sh OUT [ROUNDS]
# env:   AGENTWIRE   agentwire binary (default target/release/agentwire)
#        PATTERNS    "request fanout gather stream" (the default; Zenoh has no work queue)
#        CELLS       "AGENTSxSIZE ..." (default "10x1024")
#        NETWORKS    "0ms 50ms+1%" (the default): loopback, and 50 ms RTT with 1 % loss each
#                    way through netsim's bridge stage (needs root: the router runs in the
#                    path's server namespace, the clients in its client namespace)
#        WINDOW      messages (requests) in flight per sender (default 16)
#        DURATION_MS measured window per run (default 5000)
#        TRANSPORTS  agentwire transports on loopback (default unix,wss,quic; over the
#                    emulated path unix is left out and h2 added)
#
# Builds scripts/peers/zenoh (the zenoh crate; its own lock file, target/peers-zenoh). Each
# round runs, per network, pattern and cell: Zenoh over QUIC (TLS 1.3, certificates from
# `agentwire cert`), Zenoh over plain TCP (its router in its own process, one client session per
# agent, as the hub and its agents), then `agentwire bench` on the same cell. Both sides pace
# alike: each sender keeps WINDOW messages its pacing receiver has not yet received, or WINDOW
# requests in flight. Raw results: OUT/zenoh-*.json (one JSON line per run),
# OUT/agentwire-*/bench-*.json; the table: OUT/summary.md (scripts/peers/zenoh_summary.py OUT).
# Every run stops by itself after its window.
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,23p "$0" >&2; exit 2; }
out=$1 rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
aw=${AGENTWIRE:-$root/target/release/agentwire}
patterns=${PATTERNS:-"request fanout gather stream"}
cells=${CELLS:-"10x1024"}
networks=${NETWORKS:-"0ms 50ms+1%"}
window=${WINDOW:-16}
duration_ms=${DURATION_MS:-5000}
transports=${TRANSPORTS:-unix,wss,quic}
mkdir -p "$out"
out=$(cd "$out" && pwd)

[ -x "$aw" ] || { echo "no agentwire binary at $aw (cargo build --release -p agentwire-cli)" >&2; exit 1; }
(cd "$here/zenoh" && CARGO_TARGET_DIR="$root/target/peers-zenoh/target" cargo build --release --locked -q)
zb="$root/target/peers-zenoh/target/release/zenohbench"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

{
  echo "# $(date -u +%FT%TZ) git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "scripts/peers/zenoh.sh $out $rounds  (PATTERNS=\"$patterns\" CELLS=\"$cells\" NETWORKS=\"$networks\" WINDOW=$window DURATION_MS=$duration_ms TRANSPORTS=$transports)"
} >>"$out/commands.txt"
{
  uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true
  echo "zenoh: $(grep -A1 '^name = "zenoh"$' "$here/zenoh/Cargo.lock" | sed -n 's/^version = //p')"
  echo "agentwire: $aw ($("$aw" --version 2>/dev/null || echo unknown))"
} >"$out/machine.txt"

# The emulated path, when one is asked for: netsim's namespaces, the server at 198.18.0.2.
netsim_name="zn$$"
server_ns="aw-$netsim_name-s" client_ns="aw-$netsim_name-c"
path_up=
path() {
  [ -n "$path_up" ] && return
  [ "$(id -u)" = 0 ] || { echo "the emulated path needs root (the router runs in its namespace)" >&2; exit 1; }
  "$aw" netsim up --name "$netsim_name" --spec "delay=25ms,loss=1%" --stage bridge >"$work/netsim.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "^Ctrl-C" "$work/netsim.log" && break; sleep 0.1; done
  grep -q "^Ctrl-C" "$work/netsim.log" || { cat "$work/netsim.log" >&2; exit 1; }
  path_up=1
}

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

# run_zenoh NET LINK PATTERN AGENTS SIZE ROUND: one router, one client run; a JSON line to
# OUT/zenoh-LINK.json.
run_zenoh() {
  local net=$1 link=$2 pattern=$3 agents=$4 size=$5 round=$6
  local host=127.0.0.1 in_server=() in_client=()
  if [ "$net" != 0ms ]; then
    path
    host=198.18.0.2 in_server=(ip netns exec "$server_ns") in_client=(ip netns exec "$client_ns")
  fi
  local certs="$work/certs-$host"
  [ -d "$certs" ] || "$aw" cert --out "$certs" --name "$host" >/dev/null
  local endpoint="tcp/$host:17448" tls=()
  if [ "$link" = quic ]; then
    endpoint="quic/$host:17447"
    tls=(--cert "$certs/hub.pem" --key "$certs/hub.key")
  fi
  "${in_server[@]}" "$zb" router --listen "$endpoint" "${tls[@]}" >"$work/router.log" 2>&1 &
  local router=$!
  pids+=($router)
  for _ in $(seq 100); do grep -q "router up" "$work/router.log" && break; sleep 0.1; done
  local t0 t1
  t0=$(cpu_ticks "$router")
  timeout $((duration_ms / 1000 + 60)) "${in_client[@]}" "$zb" run --connect "$endpoint" --ca "$certs/ca.pem" \
    --pattern "$pattern" --clients "$agents" --window "$window" --size "$size" \
    --duration-ms "$duration_ms" >"$work/run.json" || echo '{"completed":0,"errors":-1,"msg_per_sec":0}' >"$work/run.json"
  t1=$(cpu_ticks "$router")
  kill "$router" 2>/dev/null; wait "$router" 2>/dev/null || true
  python3 - "$work/run.json" "$t0" "$t1" "$round" "$link" "$net" "$pattern" "$agents" "$size" >>"$out/zenoh-$link.json" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
r["server_cpu_secs"] = (int(sys.argv[3]) - int(sys.argv[2])) / os.sysconf("SC_CLK_TCK")
r.update(round=int(sys.argv[4]), link=sys.argv[5], network=sys.argv[6], pattern=sys.argv[7],
         clients=int(sys.argv[8]), size=int(sys.argv[9]))
print(json.dumps(r))
PY
  tail -1 "$out/zenoh-$link.json" | python3 -c "import json,sys; r=json.load(sys.stdin); print(f\"r{r['round']} zenoh-{r['link']:4} {r['pattern']:7} {r['network']:7} {r['clients']}x{r['size']}: {r['msg_per_sec']:,.0f} msg/s p50/p90/p99 {r.get('p50_ms')}/{r.get('p90_ms')}/{r.get('p99_ms')} ms, errors {r['errors']}\")"
}

for round in $(seq 1 "$rounds"); do
  for net in $networks; do
    for pattern in $patterns; do
      for cell in $cells; do
        agents=${cell%x*} size=${cell#*x}
        run_zenoh "$net" quic "$pattern" "$agents" "$size" "$round"
        run_zenoh "$net" tcp "$pattern" "$agents" "$size" "$round"
        t=$transports
        [ "$net" != 0ms ] && t=$(echo "$transports" | tr , '\n' | grep -vx unix | paste -sd, | sed 's/$/,h2/')
        "$aw" bench --pattern "$pattern" --transports "$t" --agents "$agents" --sizes "$size" \
          --networks "$net" --window "$window" --duration-ms "$duration_ms" --repetitions 1 \
          --probe-ms 0 --no-progress --out "$out/agentwire-$pattern-$cell-$net-r$round" 2>&1 |
          grep 'msg/s,' | sed "s/^/r$round agentwire $pattern $net $cell: /"
      done
    done
  done
done
python3 "$here/zenoh_summary.py" "$out" | tee "$out/summary.md"
