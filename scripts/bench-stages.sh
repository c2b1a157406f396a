#!/usr/bin/env bash
# The netsim packet stages side by side (issue 41): the quick preset's lossy cell (QUIC, HTTP/2
# and WebSocket, 10 agents x 1 KiB, 64 in flight, 50 ms + 1 % loss each way) through the bridge
# stage and through the NFQUEUE stage, in ROUNDS interleaved rounds (bridge first in odd
# rounds, NFQUEUE first in even ones), one bench run per stage and round. Prints, per stage,
# QUIC's msg/s and p90 over the best TCP transport's in each round and the median of those
# ratios, and the emulator's CPU; the bridge's ratio over NFQUEUE's is the issue's goal
# (>= 0.9x). Needs root and iptables for the NFQUEUE stage. Writes OUT/<stage>-r<N>.json,
# OUT/command.txt, OUT/machine.txt and OUT/summary.txt.
#
# usage: scripts/bench-stages.sh OUT [ROUNDS]   (default 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
out=$1 rounds=${2:-3}
mkdir -p "$out"
cargo build --release --locked -q -p agentwire-cli
bin=target/release/agentwire
args=(bench --agents 10 --sizes 1024 --networks 50ms+1% --window 64 --transports quic,h2,wss --no-progress --json)
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "scripts/bench-stages.sh $*"
  echo "per round and stage: $bin ${args[*]} --netsim-stage STAGE --out $out/STAGE-rN"
} >"$out/command.txt"
{ uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true; } >"$out/machine.txt"
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="bridge nfqueue"; else order="nfqueue bridge"; fi
  for stage in $order; do
    echo "round $r: $stage" >&2
    "$bin" "${args[@]}" --netsim-stage "$stage" --out "$out/$stage-r$r" >"$out/$stage-r$r.json"
  done
done
python3 - "$out" "$rounds" <<'PY' | tee "$out/summary.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ratios = {}
for stage in ("bridge", "nfqueue"):
    rows = []
    for r in range(1, rounds + 1):
        rep = json.load(open(f"{out}/{stage}-r{r}.json"))
        cells = {c["config"]["transport"]: c for c in rep["cells"] if c.get("runs")}
        q = cells["quic"]
        tcp = max((cells[t] for t in ("h2", "wss") if t in cells), key=lambda c: c["responses_per_sec"])
        cpu = sum(run["network"]["emulator"]["cpu_seconds"] for c in cells.values() for run in c["runs"])
        pkts = sum(run["network"]["emulator"]["packets"] for c in cells.values() for run in c["runs"])
        rows.append((q["responses_per_sec"] / tcp["responses_per_sec"], q["p90_us"] / tcp["p90_us"],
                     q["responses_per_sec"], tcp["config"]["transport"], tcp["responses_per_sec"], cpu, pkts))
    ratios[stage] = statistics.median(x[0] for x in rows)
    print(f"{stage}: QUIC / best TCP msg/s median {ratios[stage]:.2f}x (rounds "
          + ", ".join(f"{x[0]:.2f}" for x in rows) + f"), p90 median {statistics.median(x[1] for x in rows):.2f}x; "
          + "; ".join(f"r{i+1}: quic {x[2]:.0f} vs {x[3]} {x[4]:.0f} msg/s, emulator {x[5]:.2f} CPU s for {x[6]} packets"
                      for i, x in enumerate(rows)))
print(f"bridge ratio / nfqueue ratio: {ratios['bridge'] / ratios['nfqueue']:.2f}x (goal >= 0.9x)")
PY
