#!/usr/bin/env bash
# Sharing one bottleneck on real sockets: two bulk downloads from `agentwire serve` at once
# through netsim's packet stage (`agentwire netsim up`: two network namespaces, every packet
# through one rate limit and drop-tail queue), QUIC (agentwire's default congestion control)
# against kernel TCP (HTTP/2), and QUIC against QUIC. While they run, ping from the server's
# side samples the download direction every 200 ms: the queueing delay the pair causes is its
# RTT less the one-way delay (netsim's packet stage delays ICMP echo requests but lets echo
# replies through at once: from the client, `delay=10ms` one way and 40 ms back gave ping 10 ms,
# from the server 40 ms).
#
# usage: scripts/fairness.sh OUT
# env:   BIN (default target/release/agentwire), RATES ("20mbit 100mbit"),
#        QUEUES ("0.25bdp 4bdp"), TCP_CCS ("cubic bbr"), RTT_MS (50), DUR (20 seconds per pair),
#        FILE (1m.bin)
# Needs root (network namespaces) and ping (Debian: iputils-ping). Every run is bounded by DUR; traffic stays inside the two
# namespaces this script creates, and they are removed at the end (or on Ctrl-C).
# Writes OUT/<rate>-<queue>-<tcp cc>/{quic-vs-tcp,quic-vs-quic}/ (each flow's load JSON,
# ping.txt) and OUT/results.jsonl (one line per pair), OUT/commands.txt, OUT/machine.txt.
set -euo pipefail
[ $# -eq 1 ] || { sed -n 2,15p "$0"; exit 2; }
OUT=$1
BIN=$(realpath "${BIN:-target/release/agentwire}")
RATES=${RATES:-"20mbit 100mbit"} QUEUES=${QUEUES:-"0.25bdp 4bdp"} TCP_CCS=${TCP_CCS:-"cubic bbr"}
RTT_MS=${RTT_MS:-50} DUR=${DUR:-20} FILE=${FILE:-1m.bin}
SERVER=198.18.0.2
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "BIN=$BIN RATES=\"$RATES\" QUEUES=\"$QUEUES\" TCP_CCS=\"$TCP_CCS\" RTT_MS=$RTT_MS DUR=$DUR FILE=$FILE scripts/fairness.sh $OUT"
} >>"$OUT/commands.txt"
{ uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true; "$BIN" --version; } >"$OUT/machine.txt"
WORK=$(mktemp -d)
chmod 755 "$WORK"
"$BIN" cert --out "$WORK/certs" --name "$SERVER" >/dev/null
NETSIM_PID= SERVE_PID=
cleanup() {
  [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null || true
  if [ -n "$NETSIM_PID" ]; then
    kill "$NETSIM_PID" 2>/dev/null || true
    wait "$NETSIM_PID" 2>/dev/null || true
  fi
  NETSIM_PID= SERVE_PID=
}
trap 'cleanup; rm -rf "$WORK"' EXIT

# One download flow in the client namespace: PROTO, output file.
flow() {
  ip netns exec "$NS_C" timeout $((DUR + 30)) "$BIN" load "https://$SERVER:8443/$FILE" --proto "$1" \
    --streams 2 --duration "${DUR}s" --ca "$WORK/certs/ca.pem" --json >"$2" 2>/dev/null || true
}

for rate in $RATES; do
  for queue in $QUEUES; do
    for cc in $TCP_CCS; do
      dir="$OUT/$rate-$queue-$cc"
      mkdir -p "$dir"
      name="fair$$"
      NS_C="aw-$name-c" NS_S="aw-$name-s"
      "$BIN" netsim up --name "$name" --tcp-cc "$cc" --stats-interval 5 \
        --spec "delay=$((RTT_MS / 2))ms,rate=$rate,queue=$queue" >"$dir/netsim.log" 2>&1 &
      NETSIM_PID=$!
      for _ in $(seq 50); do
        grep -q "Ctrl-C" "$dir/netsim.log" 2>/dev/null && break
        sleep 0.2
      done
      ip netns exec "$NS_S" "$BIN" serve --root "$WORK/www" --listen "$SERVER:8443" \
        --cert-dir "$WORK/certs" --generate >/dev/null 2>&1 &
      SERVE_PID=$!
      sleep 2
      for pair in quic-vs-tcp quic-vs-quic; do
        mkdir -p "$dir/$pair"
        second=h2
        [ "$pair" = quic-vs-quic ] && second=h3
        ip netns exec "$NS_S" timeout $((DUR + 5)) ping -n -i 0.2 -w "$DUR" 198.18.0.1 >"$dir/$pair/ping.txt" 2>&1 &
        ping_pid=$!
        flow h3 "$dir/$pair/a-h3.json" &
        a=$!
        flow "$second" "$dir/$pair/b-$second.json" &
        b=$!
        wait "$a" "$b" "$ping_pid" || true
        sleep 6 # one more of netsim's 5 s statistics lines, for its drop counters
        python3 - "$dir/$pair" "$rate" "$queue" "$cc" "$pair" "$RTT_MS" "$dir/netsim.log" >>"$OUT/results.jsonl" <<'PY'
import glob, json, os, re, statistics, sys
d, rate, queue, cc, pair, rtt, netsim_log = sys.argv[1:8]
# Packets the kernel dropped before netsim's stage saw them (its socket full): loss outside
# the path's model, counted since the cell's emulator started (last statistics line).
kernel_dropped = None
for line in open(netsim_log, errors="replace"):
    try:
        st = json.loads(line)
        kernel_dropped = st["client_to_server"]["kernel_dropped"] + st["server_to_client"]["kernel_dropped"]
    except (ValueError, KeyError, TypeError):
        pass
flows = []
for f in sorted(glob.glob(os.path.join(d, "[ab]-*.json"))):
    try:
        j = json.load(open(f))
        mbit = j["bytes_per_s"] * 8 / 1e6
    except (OSError, ValueError, KeyError):
        mbit = 0.0
    flows.append({"flow": os.path.basename(f)[:-5], "mbit_per_sec": round(mbit, 2)})
rtts = [float(m) for m in re.findall(r"time=([0-9.]+) ms", open(os.path.join(d, "ping.txt")).read())]
queueing = sorted(max(0.0, r - float(rtt) / 2) for r in rtts)
def pct(p):
    return round(queueing[min(len(queueing) - 1, int(p * len(queueing)))], 1) if queueing else None
a, b = (flows + [{"mbit_per_sec": 0.0}] * 2)[:2]
print(json.dumps({
    "rate": rate, "queue": queue, "tcp_cc": cc, "pair": pair, "flows": flows,
    "share_first_over_second": round(a["mbit_per_sec"] / b["mbit_per_sec"], 2) if b["mbit_per_sec"] else None,
    "queueing_delay_ms_p50": pct(0.5), "queueing_delay_ms_p95": pct(0.95), "ping_samples": len(rtts),
    "netsim_kernel_dropped": kernel_dropped,
}))
PY
        tail -1 "$OUT/results.jsonl"
      done
      cleanup
      sleep 1
    done
  done
done
