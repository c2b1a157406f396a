#!/usr/bin/env bash
# Fault (issue 40): a hub held to a small CPU quota while agents close right after sending.
# Starts `agentwire hub` on QUIC inside a CPU cgroup (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us)
# limited to QUOTA percent of one core, runs the send_then_close example against it (ROUNDS
# rounds of AGENTS agents connecting at once, each sending one event to a collector and closing
# at once), and writes OUT/result.json, OUT/command.txt and OUT/machine.txt. Needs root (the
# cgroup); without it the script says so and stops.
#
# usage: scripts/faults/cpu-quota-close.sh OUT [QUOTA_PERCENT] [AGENTS] [ROUNDS]
#   defaults: 10 %, 200 agents, 200 rounds; HUB_BIN=path runs another agentwire as the hub
#   (for a side-by-side with an older build)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
out=$1 quota=${2:-10} agents=${3:-200} rounds=${4:-200}
if [ "$(id -u)" != 0 ]; then
  echo "skipped: a CPU cgroup needs root" >&2
  exit 0
fi
mkdir -p "$out"
cargo build --release --locked -q -p agentwire-cli
cargo build --release --locked -q -p agentwire --example send_then_close
dir=$(mktemp -d)
target/release/agentwire cert --out "$dir/certs" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
period=100000 max=$((quota * 1000))
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  group=/sys/fs/cgroup/agentwire-quota-$$
  echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  mkdir "$group"
  echo "$max $period" >"$group/cpu.max"
else
  group=/sys/fs/cgroup/cpu/agentwire-quota-$$
  mkdir "$group"
  echo "$period" >"$group/cpu.cfs_period_us"
  echo "$max" >"$group/cpu.cfs_quota_us"
fi
"${HUB_BIN:-target/release/agentwire}" hub --listen "quic://127.0.0.1:$port" --cert-dir "$dir/certs" \
  >"$dir/hub.log" 2>&1 &
hub=$!
echo "$hub" >"$group/cgroup.procs"
cleanup() {
  kill "$hub" 2>/dev/null || true
  wait "$hub" 2>/dev/null || true
  rmdir "$group" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 200); do grep -q "hub listening" "$dir/hub.log" && break; sleep 0.05; done
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "scripts/faults/cpu-quota-close.sh $*"
  echo "hub: ${HUB_BIN:-target/release/agentwire} ($("${HUB_BIN:-target/release/agentwire}" --version)) hub --listen quic://127.0.0.1:PORT --cert-dir CERTS, in a cgroup of $quota % of one core ($max/$period us)"
  echo "client: send_then_close quic://127.0.0.1:PORT CERTS/ca.pem $agents $rounds"
} >"$out/command.txt"
{ uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true; } >"$out/machine.txt"
target/release/examples/send_then_close "quic://127.0.0.1:$port" "$dir/certs/ca.pem" \
  "$agents" "$rounds" >"$out/result.json"
cat "$out/result.json"
python3 - "$out/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['sent']} events sent by agents that closed at once, {r['received']} received: "
      f"{r['lost']} lost, {r['doubled']} doubled ({r['not_connected']} agents could not connect, "
      f"{r['send_failed']} sends refused) in {r['seconds']:.0f} s")
sys.exit(1 if r["lost"] or r["doubled"] else 0)
PY
