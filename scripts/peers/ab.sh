#!/usr/bin/env bash
# A/B of agentwire serve builds on 5 KB over one long connection (1 connection, 1 stream),
# interleaved round by round, with ngtcp2's gtlsserver beside them over HTTP/3.
# Usage: scripts/peers/ab.sh BIN_A [BIN_B ...]   (copies of target/release/agentwire)
# Env: ROUNDS (4), DUR (seconds, 4), PROTO (h3), FILE (5k.bin), CLIENT (binary running load;
#      default the first one), EXTRA (more load flags), NO_NGTCP2=1 to leave ngtcp2 out,
#      NGTCP2_ARGS (more gtlsserver flags, e.g. --max-udp-payload-size=65507).
# Servers on core 1, the client on core 0; prints per round "name req/s server-us/req errors"
# and the medians. Loopback only; every run is bounded by DUR.
set -uo pipefail
[ $# -ge 1 ] || { sed -n 2,8p "$0"; exit 2; }
CLIENT=${CLIENT:-$1}; PROTO=${PROTO:-h3}
D=$(mktemp -d); chmod 755 "$D"; mkdir -p "$D/www"
"$CLIENT" cert --out "$D/certs" --name 127.0.0.1 >/dev/null
PIDS=(); NAMES=(); PORTS=(); port=9600
for b in "$@"; do
  port=$((port+1))
  taskset -c 1 "$b" serve --root "$D/www" --listen 127.0.0.1:$port --cert-dir "$D/certs" --generate --threads 1 >/dev/null 2>&1 &
  PIDS+=($!); NAMES+=("$(basename "$b")"); PORTS+=($port)
done
if [ "$PROTO" = h3 ] && [ -z "${NO_NGTCP2:-}" ] && command -v gtlsserver >/dev/null; then
  sleep 1.5
  # shellcheck disable=SC2086 # the extra flags are split on purpose
  taskset -c 1 gtlsserver -q ${NGTCP2_ARGS:-} -d "$D/www" 127.0.0.1 9599 "$D/certs/hub.key" "$D/certs/hub.pem" >/dev/null 2>&1 &
  PIDS+=($!); NAMES+=(ngtcp2); PORTS+=(9599)
fi
trap 'kill "${PIDS[@]}" 2>/dev/null; rm -rf "$D"' EXIT
sleep 2
for r in $(seq "${ROUNDS:-4}"); do
  for i in "${!PIDS[@]}"; do
    p=${PIDS[$i]}
    s0=$(awk '{print $14+$15}' /proc/$p/stat)
    # shellcheck disable=SC2086
    timeout $(( ${DUR:-4} + 30 )) taskset -c 0 "$CLIENT" load "https://127.0.0.1:${PORTS[$i]}/${FILE:-5k.bin}" --proto "$PROTO" \
      --duration "${DUR:-4}s" ${EXTRA:-} --ca "$D/certs/ca.pem" --json > "$D/l.json" 2>/dev/null
    s1=$(awk '{print $14+$15}' /proc/$p/stat)
    python3 -c "import json,os;j=json.load(open('$D/l.json'));t=os.sysconf('SC_CLK_TCK');print('${NAMES[$i]}', round(j['rps']), round(($s1-$s0)*1e6/t/max(1,j['succeeded']),1), j['errors'])"
  done
done | tee "$D/res.txt"
echo "-- medians (req/s, server us/req)"
python3 - "$D/res.txt" <<'PY'
import sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, r, u, e = line.split()
    d[n].append((float(r), float(u)))
for n, v in d.items():
    print(n, round(statistics.median(x[0] for x in v)), round(statistics.median(x[1] for x in v), 1))
PY
