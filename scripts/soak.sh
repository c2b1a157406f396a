#!/usr/bin/env bash
# A soak run (issue 16; a script, not CI): a hub with a queue store on loopback QUIC, AGENTS
# agents for SECONDS with requests, topic messages and a durable queue at once
# (crates/bench/examples/soak.rs), the hub's RSS sampled every 10 s. Writes OUT/rss.csv,
# OUT/counts.jsonl, OUT/rss.svg, OUT/summary.md, OUT/commands.txt, OUT/machine.txt.
#
# usage: scripts/soak.sh OUT [AGENTS] [SECONDS]   (defaults: 1000 agents, 600 s)
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,8p "$0" >&2; exit 2; }
out=$1 agents=${2:-1000} seconds=${3:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root"
cargo build --release --locked -p agentwire-cli >&2
cargo build --release --locked -p agentwire-bench --example soak >&2
aw=target/release/agentwire
soak=target/release/examples/soak
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
hub_pid=
cleanup() { [ -n "$hub_pid" ] && kill "$hub_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
"$aw" cert --out "$work/certs" >/dev/null
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD)$(git diff --quiet -- crates Cargo.lock || echo ' (uncommitted changes)')"
  echo "scripts/soak.sh $out $agents $seconds"
} >>"$out/commands.txt"
{
  uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true
  for bin in "$aw" "$soak"; do echo "$(sha256sum "$bin" | cut -c1-16) $(stat -c %y "$bin") $bin"; done
} >"$out/machine.txt"
"$aw" hub --listen quic://127.0.0.1:0 --cert-dir "$work/certs" --store "$work/store" \
  --handshake-timeout-ms 60000 >"$work/hub.log" 2>&1 &
hub_pid=$!
for _ in $(seq 100); do grep -q "hub listening on quic://" "$work/hub.log" && break; sleep 0.1; done
url=$(grep -o "quic://[0-9.:]*" "$work/hub.log" | head -1)
echo "t_secs,hub_rss_kib" >"$out/rss.csv"
"$soak" "$url" "$work/certs/ca.pem" "$agents" "$seconds" >"$out/counts.jsonl" &
soak_pid=$!
start=$(date +%s)
while kill -0 "$soak_pid" 2>/dev/null; do
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$hub_pid/status")
  echo "$(( $(date +%s) - start )),$rss" | tee -a "$out/rss.csv" >&2
  sleep 10
done
wait "$soak_pid"
python3 - "$out" <<'PY'
import csv, json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = [(int(r["t_secs"]), int(r["hub_rss_kib"])) for r in csv.DictReader(open(out / "rss.csv"))]
counts = [json.loads(l) for l in open(out / "counts.jsonl") if l.strip()]
first_min = next((kib for t, kib in rows if t >= 60), rows[-1][1])
end = rows[-1][1]
change = (end - first_min) / first_min * 100
last = counts[-1] if counts else {}
w, h, pad = 640, 300, 50
tmax = max(t for t, _ in rows) or 1
kmax = max(k for _, k in rows) * 1.1
pts = " ".join(f"{pad + t / tmax * (w - 2 * pad):.1f},{h - pad - k / kmax * (h - 2 * pad):.1f}" for t, k in rows)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
       f'<rect width="{w}" height="{h}" fill="white"/>',
       f'<text x="{w/2}" y="20" text-anchor="middle">hub RSS during the soak (MiB)</text>',
       f'<line x1="{pad}" y1="{h-pad}" x2="{w-pad}" y2="{h-pad}" stroke="black"/>',
       f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h-pad}" stroke="black"/>',
       f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{pts}"/>']
for frac in (0, 0.5, 1):
    y = h - pad - frac * (h - 2 * pad)
    svg.append(f'<text x="{pad-5}" y="{y+4:.1f}" text-anchor="end">{frac*kmax/1024:.0f}</text>')
    x = pad + frac * (w - 2 * pad)
    svg.append(f'<text x="{x:.1f}" y="{h-pad+16}" text-anchor="middle">{frac*tmax:.0f} s</text>')
svg.append("</svg>")
(out / "rss.svg").write_text("\n".join(svg))
summary = [f"hub RSS after the first minute: {first_min/1024:.1f} MiB; at the end: {end/1024:.1f} MiB ({change:+.1f} %)",
           f"peak: {max(k for _, k in rows)/1024:.1f} MiB; samples: {len(rows)}",
           "last counts: " + json.dumps(last)]
(out / "summary.md").write_text("\n".join(summary) + "\n")
print("\n".join(summary))
PY
