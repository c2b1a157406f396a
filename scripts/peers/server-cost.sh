#!/usr/bin/env bash
# Where a server's time goes per request, on loopback (server on core 1, client on core 0):
#  1. 5 KB over one long HTTP/3 connection (1 x 1) from `agentwire load`, against agentwire
#     serve and ngtcp2's gtlsserver: the server's sendmsg / recvmmsg / recvmsg / epoll_wait
#     calls per request (perf stat on the server's syscall tracepoints, which slows both a
#     little, so req/s here are not the benchmark's);
#  2. agentwire serve's CPU time per 5 KB request over HTTP/2 (4 connections x 16 streams)
#     under `agentwire load` and under h2load, interleaved for ROUNDS rounds.
# Usage: scripts/peers/server-cost.sh AGENTWIRE_BINARY   Env: ROUNDS (4), DUR (seconds, 4).
# Needs perf, gtlsserver, h2load. Loopback only; every run is bounded by DUR.
set -uo pipefail
[ $# -ge 1 ] || { sed -n 2,11p "$0"; exit 2; }
AW=$(readlink -f "$1"); DUR=${DUR:-4}; ROUNDS=${ROUNDS:-4}
D=$(mktemp -d); chmod 755 "$D"; mkdir -p "$D/www"
"$AW" cert --out "$D/certs" --name 127.0.0.1 >/dev/null
taskset -c 1 "$AW" serve --root "$D/www" --listen 127.0.0.1:9701 --cert-dir "$D/certs" --generate --threads 1 >/dev/null 2>&1 &
SERVE=$!
sleep 1.5
taskset -c 1 gtlsserver -q -d "$D/www" 127.0.0.1 9702 "$D/certs/hub.key" "$D/certs/hub.pem" >/dev/null 2>&1 &
NGTCP2=$!
trap 'kill $SERVE $NGTCP2 2>/dev/null; rm -rf "$D"' EXIT
sleep 1
EVENTS=syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendmmsg,syscalls:sys_enter_recvmmsg,syscalls:sys_enter_recvmsg,syscalls:sys_enter_epoll_wait
echo "== 1. HTTP/3, 5k.bin, 1 connection x 1 stream, ${DUR} s: server syscalls per request"
for t in "agentwire 9701 $SERVE" "ngtcp2 9702 $NGTCP2"; do
  read -r name port pid <<< "$t"
  perf stat -x, -e "$EVENTS" -p "$pid" -- sleep $((DUR + 1)) 2> "$D/stat.txt" &
  PERF=$!
  sleep 0.3
  n=$(timeout $((DUR + 30)) taskset -c 0 "$AW" load "https://127.0.0.1:$port/5k.bin" --proto h3 --duration "${DUR}s" \
      --ca "$D/certs/ca.pem" --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['succeeded'])")
  wait "$PERF"
  python3 - "$name" "$n" "$D/stat.txt" <<'PY'
import sys
name, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
parts = []
for line in open(path):
    f = line.strip().split(",")
    if len(f) > 2 and f[2].startswith("syscalls:sys_enter_") and f[0].isdigit():
        parts.append(f"{f[2].split('sys_enter_')[1]} {int(f[0]) / max(1, n):.2f}")
print(f"{name}: {n} requests; per request: " + ", ".join(parts))
PY
done
echo "== 2. HTTP/2, 5k.bin, 4 connections x 16 streams, ${DUR} s each: agentwire serve's CPU us per request"
TCK=$(getconf CLK_TCK)
for r in $(seq "$ROUNDS"); do
  s0=$(awk '{print $14+$15}' /proc/$SERVE/stat)
  n=$(timeout $((DUR + 30)) taskset -c 0 "$AW" load https://127.0.0.1:9701/5k.bin --proto h2 --duration "${DUR}s" \
      --connections 4 --streams 16 --ca "$D/certs/ca.pem" --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['succeeded'])")
  s1=$(awk '{print $14+$15}' /proc/$SERVE/stat)
  echo "round $r agentwire-load $n requests, server $(python3 -c "print(round(($s1 - $s0) * 1e6 / $TCK / max(1, $n), 2))") us/req"
  s0=$(awk '{print $14+$15}' /proc/$SERVE/stat)
  n=$(timeout $((DUR + 30)) taskset -c 0 h2load -D "$DUR" -t 1 -c 4 -m 16 https://127.0.0.1:9701/5k.bin 2>/dev/null \
      | sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p')
  s1=$(awk '{print $14+$15}' /proc/$SERVE/stat)
  echo "round $r h2load $n requests, server $(python3 -c "print(round(($s1 - $s0) * 1e6 / $TCK / max(1, ${n:-0}), 2))") us/req"
done
