#!/usr/bin/env bash
# HTTP/3 beside HTTP/2 (and HTTP/1.1) on loopback, one `agentwire serve`, `agentwire load`
# with one connection and STREAMS requests in flight, protocols interleaved in every round.
# Prints each run and the medians, with HTTP/3 ÷ HTTP/2 per round.
#
# usage: scripts/load-ab.sh OUT [ROUNDS]        (ROUNDS default 3)
# env:   BIN (default target/release/agentwire), PROTOS ("h3 h2"), FILE_BYTES (1024),
#        STREAMS (1), SECONDS_PER_RUN (3), PORT (18443)
# Every run is bounded by SECONDS_PER_RUN; traffic stays on 127.0.0.1.
# Writes OUT/runs.jsonl (one load JSON per line, with round and proto), OUT/summary.md,
# OUT/commands.txt, OUT/machine.txt.
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { sed -n 2,11p "$0"; exit 2; }
OUT=$1 ROUNDS=${2:-3}
BIN=$(realpath "${BIN:-target/release/agentwire}")
PROTOS=${PROTOS:-"h3 h2"} FILE_BYTES=${FILE_BYTES:-1024} STREAMS=${STREAMS:-1}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-3} PORT=${PORT:-18443}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "BIN=$BIN PROTOS=\"$PROTOS\" FILE_BYTES=$FILE_BYTES STREAMS=$STREAMS SECONDS_PER_RUN=$SECONDS_PER_RUN scripts/load-ab.sh $OUT $ROUNDS"
} >>"$OUT/commands.txt"
{ uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true; "$BIN" --version; } >"$OUT/machine.txt"
WORK=$(mktemp -d)
SERVE_PID=
cleanup() {
  [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir "$WORK/root"
head -c "$FILE_BYTES" /dev/zero >"$WORK/root/file.bin"
"$BIN" cert --out "$WORK/certs" >/dev/null
"$BIN" serve --root "$WORK/root" --listen "127.0.0.1:$PORT" --cert-dir "$WORK/certs" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 50); do
  if "$BIN" load "https://127.0.0.1:$PORT/file.bin" --proto h2 --requests 1 --ca "$WORK/certs/ca.pem" \
      --json >/dev/null 2>&1; then
    break
  fi
  sleep 0.1
done
: >"$OUT/runs.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for proto in $PROTOS; do
    timeout $((SECONDS_PER_RUN + 30)) "$BIN" load "https://127.0.0.1:$PORT/file.bin" --proto "$proto" \
      --streams "$STREAMS" --duration "${SECONDS_PER_RUN}s" --ca "$WORK/certs/ca.pem" --json 2>/dev/null \
      | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
r["round"], r["proto"] = int(sys.argv[1]), sys.argv[2]
print(json.dumps(r))
' "$round" "$proto" >>"$OUT/runs.jsonl"
    tail -1 "$OUT/runs.jsonl" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("round %d %-8s %10s requests/s, errors %d" % (r["round"], r["proto"], format(r["rps"], ",.0f"), r["errors"]))'
  done
done
python3 - "$OUT/runs.jsonl" <<'PY' | tee "$OUT/summary.md"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
protos = list(dict.fromkeys(r["proto"] for r in runs))
rounds = sorted({r["round"] for r in runs})
rps = {(r["round"], r["proto"]): r["rps"] for r in runs}
print("| proto | requests/s per round | median | errors |")
print("|---|---|--:|--:|")
for p in protos:
    vals = [rps[(n, p)] for n in rounds if (n, p) in rps]
    errors = sum(r["errors"] for r in runs if r["proto"] == p)
    print(f"| {p} | {' / '.join(f'{v:,.0f}' for v in vals)} | {statistics.median(vals):,.0f} | {errors} |")
if "h3" in protos and "h2" in protos:
    ratios = [rps[(n, "h3")] / rps[(n, "h2")] for n in rounds if (n, "h3") in rps and (n, "h2") in rps]
    print(f"\nh3 / h2 per round: {' / '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}x)")
PY
