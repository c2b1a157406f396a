#!/usr/bin/env bash
# A/B of agentwire load builds as clients, interleaved round by round, with h2load beside them
# (HTTP/2) on the generators' shape of scripts/peers/scorecard.sh: 1 thread, 4 connections x
# 16 requests in flight, 5k.bin, against one server on core 1; every client on core 0.
# Usage: scripts/peers/gen-ab.sh BIN_A [BIN_B ...]   (copies of target/release/agentwire)
# Env: ROUNDS (6), DUR (seconds, 4), TARGET (agentwire: BIN_A's serve; or nginx), PROTO (h2;
#      with h3 there is no h2load), OUT (a directory for the raw outputs; default a temporary one).
# Prints per round "name req/s client-us/req failed" and the medians. Client CPU is user + sys
# of the client process (bash `time`). Loopback only; every run is bounded by DUR.
set -uo pipefail
[ $# -ge 1 ] || { sed -n 2,9p "$0"; exit 2; }
ROOTDIR="$(cd "$(dirname "$0")/../.." && pwd)"
AW=$(readlink -f "$1"); PROTO=${PROTO:-h2}; DUR=${DUR:-4}
OUT=${OUT:-$(mktemp -d /tmp/gen-ab.XXXXXX)}; mkdir -p "$OUT"
# shellcheck source=lib.sh
. "$ROOTDIR/scripts/peers/lib.sh"
prepare_root
start_agentwire   # also writes the standard files into $TMP/www
port=8443
if [ "${TARGET:-agentwire}" = nginx ]; then stop_server; start_nginx; port=8446; fi
url="https://127.0.0.1:$port/5k.bin"
TIMEFORMAT='%3U %3S %3R'
: > "$OUT/res.txt"
for r in $(seq "${ROUNDS:-6}"); do
  i=0
  for b in "$@"; do
    i=$((i+1)); name="$(basename "$b")"
    f="$OUT/$name-$r"
    { time timeout $((DUR + 30)) taskset -c "$CLIENT_CORE" "$b" load "$url" --proto "$PROTO" --duration "${DUR}s" \
        --connections 4 --streams 16 --ca "$TMP/certs/ca.pem" --json > "$f.out" 2>&1 ; } 2> "$f.time"
    python3 - "$f" "$name" >> "$OUT/res.txt" <<'PY'
import json, sys
f, name = sys.argv[1], sys.argv[2]
j = json.loads(open(f + ".out").read().strip().splitlines()[-1])
u, s = (float(x) for x in open(f + ".time").read().split()[:2])
print(name, round(j["rps"]), round((u + s) * 1e6 / max(1, j["succeeded"]), 2), j["requests"] - j["succeeded"])
PY
  done
  if [ "$PROTO" = h2 ] && command -v h2load >/dev/null; then
    f="$OUT/h2load-$r"
    { time timeout $((DUR + 30)) taskset -c "$CLIENT_CORE" h2load -D "$DUR" -t 1 -c 4 -m 16 "$url" > "$f.out" 2>&1 ; } 2> "$f.time"
    python3 - "$f" >> "$OUT/res.txt" <<'PY'
import re, sys
f = sys.argv[1]
t = open(f + ".out", errors="replace").read()
m = re.search(r"requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored", t)
rps = re.search(r"finished in [0-9.]+m?s, ([0-9.]+) req/s", t)
u, s = (float(x) for x in open(f + ".time").read().split()[:2])
ok = int(m.group(2)) if m else 0
print("h2load", round(float(rps.group(1))) if rps else 0, round((u + s) * 1e6 / max(1, ok), 2), (int(m.group(3)) + int(m.group(4))) if m else -1)
PY
  fi
  tail -n $(( $# + 1 )) "$OUT/res.txt" >&2
done
echo "-- medians over ${ROUNDS:-6} rounds (req/s, client us/req, failed in all), raw in $OUT" | tee "$OUT/medians.txt"
python3 - "$OUT/res.txt" <<'PY' | tee -a "$OUT/medians.txt"
import sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, r, u, e = line.split()
    d[n].append((float(r), float(u), int(e)))
for n, v in d.items():
    print(n, round(statistics.median(x[0] for x in v)), round(statistics.median(x[1] for x in v), 2), sum(x[2] for x in v))
PY
