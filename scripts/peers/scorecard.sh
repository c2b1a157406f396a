#!/usr/bin/env bash
# The same `agentwire scorecard` against agentwire serve and every peer server, one server at a
# time, side by side; then the load generators (agentwire load, h2load, tquic_client) against
# the same servers, on CPU per request. Loopback only; every run is bounded.
#
# Usage: scripts/peers/scorecard.sh OUTDIR [full|quick|tiny]   (default: full)
#   SECTIONS="cards generators longconn" (the default: all three) picks what runs;
#   SERVERS="agentwire ngtcp2 ..." the servers of the cards and longconn sections.
#   Needs: a release build (cargo build --release -p agentwire-cli), scripts/peers/install.sh
#   (TQUIC with --with-tquic), Go for quic-go (skipped without it).
#   Each server runs alone on core $SERVER_CORE (default 1) and the client on core
#   $CLIENT_CORE (default 0), so a fast server can be client-bound: the scorecard also measures
#   the server's CPU time per request (--server-pid), which ranks servers when their
#   requests/s cannot.
# Writes: OUTDIR/<server>/scorecard.{json,md} + charts, OUTDIR/compare/ (compare.md + charts),
#   OUTDIR/generators/ (raw outputs, generators.json, generators.md), machine.txt, commands.txt.
set -uo pipefail
ROOTDIR="$(cd "$(dirname "$0")/../.." && pwd)"
AW="${AW:-$ROOTDIR/target/release/agentwire}"
OUT="${1:?usage: scorecard.sh OUTDIR [full|quick|tiny]}"; mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
SCALE="${2:-full}"
GEN_SECONDS="${GEN_SECONDS:-5}"; GEN_REPEATS="${GEN_REPEATS:-3}"
LONG_SECONDS="${LONG_SECONDS:-5}"; LONG_ROUNDS="${LONG_ROUNDS:-5}"
SECTIONS="${SECTIONS:-cards generators longconn}"
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
# SERVERS picks the servers of the cards and longconn sections (default: all six).
SERVERS="${SERVERS:-agentwire ngtcp2 caddy nginx quicgo tquic}"
pick() { [[ " $SERVERS " == *" $1 "* ]]; }
# shellcheck source=lib.sh
source "$ROOTDIR/scripts/peers/lib.sh"

{
  echo "== $(date -u +%FT%TZ): sections: $SECTIONS"
  echo "kernel: $(uname -srm)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') x $(nproc)"
  echo "agentwire: $("$AW" --version) git $(git -C "$ROOTDIR" rev-parse HEAD)"
  echo "scale: $SCALE; server core $SERVER_CORE, client core $CLIENT_CORE"
  for p in ngtcp2-server caddy nginx-light nghttp2-client; do
    echo "$p: $(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo missing)"
  done
  echo "go: $(go version 2>/dev/null || echo missing)"
  echo "tquic: $("$(tquic_bin tquic_server TQUIC_SERVER)" --version 2>/dev/null || echo missing)"
} >> "$OUT/machine.txt"
cat "$OUT/machine.txt" >&2

prepare_root
CARDS=()
card() { # slug label port protos
  local slug=$1 label=$2 port=$3 protos=$4
  mkdir -p "$OUT/$slug"
  log taskset -c "$CLIENT_CORE" "$AW" scorecard --url "https://127.0.0.1:$port" --ca "$TMP/certs/ca.pem" \
    --label "$label" --server-pid "$SERVER_PID" --protos "$protos" --scale "$SCALE" --out "$OUT/$slug"
  timeout 5400 taskset -c "$CLIENT_CORE" "$AW" scorecard --url "https://127.0.0.1:$port" --ca "$TMP/certs/ca.pem" \
    --label "$label" --server-pid "$SERVER_PID" --protos "$protos" --scale "$SCALE" --out "$OUT/$slug" \
    > /dev/null 2> "$OUT/$slug/progress.log"
  echo "rc=$?" >> "$OUT/$slug/progress.log"
  [ -f "$OUT/$slug/scorecard.json" ] && CARDS+=("$OUT/$slug/scorecard.json")
}

# --- 1. The scorecard against each server, alone on its core. ---------------------------------
if want cards; then
if pick agentwire; then start_agentwire && card agentwire "agentwire serve" 8443 h3,h2,http1.1; stop_server; fi
if pick ngtcp2; then start_gtlsserver && card ngtcp2 "ngtcp2 gtlsserver" 8444 h3; stop_server; fi
if pick caddy; then start_caddy && card caddy "Caddy" 8445 h3,h2,http1.1; stop_server; fi
if pick nginx; then start_nginx && card nginx "nginx" 8446 h2,http1.1; stop_server; fi
if pick quicgo; then start_quicgo && card quicgo "quic-go + net/http" 8447 h3,h2,http1.1; stop_server; fi
if pick tquic; then start_tquic && card tquic "TQUIC tquic_server" 8448 h3; stop_server; fi

log "$AW" scorecard --compare "${CARDS[@]}" --out "$OUT/compare"
"$AW" scorecard --compare "${CARDS[@]}" --out "$OUT/compare" > /dev/null
python3 "$ROOTDIR/scripts/peers/headline.py" "$OUT" > "$OUT/headline.md"
fi

# --- 2. Load generators on the same targets: requests and client CPU. -------------------------
if want generators; then
# Same shape for every tool: 1 thread, 4 connections x 16 requests in flight, 5k.bin,
# $GEN_SECONDS s, repeated $GEN_REPEATS times; client CPU from bash's `time` (user + sys).
G="$OUT/generators"; mkdir -p "$G"
TQC="$(tquic_bin tquic_client TQUIC_CLIENT)"
TIMEFORMAT='%3U %3S %3R'
measure() { # name: runs the rest of the line, stdout+stderr to $G/name.out, CPU to $G/name.time
  local name=$1; shift
  log "$@"
  { time timeout $((GEN_SECONDS * 3 + 10)) taskset -c "$CLIENT_CORE" "$@" > "$G/$name.out" 2>&1 ; } 2> "$G/$name.time"
}
generators() { # target port protos
  local target=$1 port=$2 protos=$3 url="https://127.0.0.1:$2/5k.bin"
  for i in $(seq "$GEN_REPEATS"); do
    for proto in $protos; do
      measure "$target-$proto-agentwire-load-$i" "$AW" load "$url" --proto "$proto" --duration "${GEN_SECONDS}s" \
        --connections 4 --streams 16 --ca "$TMP/certs/ca.pem" --json
      if [ "$proto" = h2 ]; then
        measure "$target-h2-h2load-$i" h2load -D "$GEN_SECONDS" -t 1 -c 4 -m 16 "$url"
      elif [ -n "$TQC" ]; then
        measure "$target-h3-tquic_client-$i" "$TQC" -t 1 --max-concurrent-conns 4 --max-concurrent-requests 16 \
          --max-requests-per-conn 0 --total-requests-per-thread 0 -d "$GEN_SECONDS" --log-level OFF \
          -c "127.0.0.1:$port" "$url"
      fi
    done
  done
}
start_agentwire && generators agentwire 8443 "h3 h2"; stop_server
start_gtlsserver && generators ngtcp2 8444 "h3"; stop_server
start_nginx && generators nginx 8446 "h2"; stop_server
python3 "$ROOTDIR/scripts/peers/generators.py" "$G" > "$G/generators.md"
cat "$G/generators.md" >&2
fi

# --- 3. 5 KB over one long connection, every server and protocol interleaved. -----------------
# The scorecard's long-5k.bin scenario (1 connection x 1 request in flight), but with every
# server up at once (idle ones cost nothing) and LONG_ROUNDS rounds in which each server x
# protocol gets one LONG_SECONDS-s run in turn, so that the machine's drift is spread over all
# of them; the server's CPU ticks (/proc/PID/stat) around each run. Medians over the rounds.
if want longconn; then
L="$OUT/longconn"; mkdir -p "$L"; : > "$L/cpu.txt"
TARGETS=()
pick agentwire && start_agentwire && TARGETS+=("agentwire 8443 h3,h2,http1.1 $SERVER_PID")
pick ngtcp2 && start_gtlsserver && TARGETS+=("ngtcp2 8444 h3 $SERVER_PID")
pick caddy && start_caddy && TARGETS+=("caddy 8445 h3,h2,http1.1 $SERVER_PID")
pick nginx && start_nginx && TARGETS+=("nginx 8446 h2,http1.1 $SERVER_PID")
pick quicgo && start_quicgo && TARGETS+=("quicgo 8447 h3,h2,http1.1 $SERVER_PID")
pick tquic && start_tquic && TARGETS+=("tquic 8448 h3 $SERVER_PID")
for round in $(seq "$LONG_ROUNDS"); do
  for t in "${TARGETS[@]}"; do
    read -r name port protos pid <<< "$t"
    for proto in ${protos//,/ }; do
      c0=$(cpu_ticks "$pid")
      log taskset -c "$CLIENT_CORE" "$AW" load "https://127.0.0.1:$port/5k.bin" --proto "$proto" --duration "${LONG_SECONDS}s" --ca "$TMP/certs/ca.pem" --json
      timeout $((LONG_SECONDS + 30)) taskset -c "$CLIENT_CORE" "$AW" load "https://127.0.0.1:$port/5k.bin" --proto "$proto" \
        --duration "${LONG_SECONDS}s" --ca "$TMP/certs/ca.pem" --json > "$L/$name-$proto-$round.json" 2> "$L/$name-$proto-$round.stderr"
      c1=$(cpu_ticks "$pid")
      echo "$name $proto $round $c0 $c1" >> "$L/cpu.txt"
    done
  done
done
python3 "$ROOTDIR/scripts/peers/longconn.py" "$L" > "$L/longconn.md"
cat "$L/longconn.md" >&2
fi
echo "done: $OUT" >&2
