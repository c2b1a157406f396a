#!/usr/bin/env bash
# Interleaved A/B of QUIC congestion controllers in one agentwire bench cell, with the TCP
# transports as the reference in every round: rounds × (each --quic-cc, then h2 and wss).
# Needs root for the emulated (netsim packet-mode) network.
#
#   scripts/cc-ab.sh OUT [ROUNDS] [CELL ARGS...]
#   scripts/cc-ab.sh docs/benchmarks/2026-11-23-cc-ab 2
#
# Defaults: 10 agents x 1 KiB over 50 ms RTT + 1 % loss each way, window 64, 1 run of 3 s per
# round. CCS overrides the controllers (default "cubic bbr bbr3"). Writes every run's JSON
# and report under OUT/rR-NAME/, the console lines to OUT/runs.txt and the command and machine
# to OUT/commands.txt and OUT/machine.txt.
set -euo pipefail
out=${1:?usage: cc-ab.sh OUT [ROUNDS] [CELL ARGS...]}
rounds=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
cell=("$@")
if [ ${#cell[@]} -eq 0 ]; then
  cell=(--agents 10 --sizes 1024 --networks 50ms+1% --window 64 --duration-ms 3000)
fi
ccs=${CCS:-"cubic bbr bbr3"}
bin=${BIN:-./target/release/agentwire}
mkdir -p "$out"
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD)"
  echo "CCS=\"$ccs\" scripts/cc-ab.sh $out $rounds ${cell[*]}"
} >> "$out/commands.txt"
{ uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true; "$bin" --version || true; } > "$out/machine.txt"
for r in $(seq 1 "$rounds"); do
  for cc in $ccs; do
    "$bin" bench --transports quic,quic-lanes --quic-cc "$cc" --repetitions 1 "${cell[@]}" \
      --out "$out/r$r-quic-$cc" --no-progress 2>/dev/null \
      | grep -E '^(quic|quic-lanes) ' | sed "s/^/r$r $cc /" | tee -a "$out/runs.txt"
  done
  "$bin" bench --transports h2,wss --repetitions 1 "${cell[@]}" \
    --out "$out/r$r-tcp" --no-progress 2>/dev/null \
    | grep -E '^(h2|wss) ' | sed "s/^/r$r tcp /" | tee -a "$out/runs.txt"
done
