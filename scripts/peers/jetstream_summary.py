#!/usr/bin/env python3
"""Table of scripts/peers/jetstream.sh's runs: per round and medians, tasks consumed (stored,
delivered and acked) per second, and agentwire's ratio to JetStream in the same round.

usage: scripts/peers/jetstream_summary.py OUT
"""
import json
import statistics
import sys
from pathlib import Path

NAMES = ["jetstream-default", "jetstream-sync", "agentwire-unix", "agentwire-ws"]


def main() -> None:
    out = Path(sys.argv[1])
    runs = {}
    for name in NAMES:
        f = out / f"{name}.json"
        if f.exists():
            runs[name] = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    rounds = sorted({r["round"] for rs in runs.values() for r in rs})
    by = {(r["name"], r["round"]): r for rs in runs.values() for r in rs}
    print("| round | " + " | ".join(f"{n} consumed/s" for n in NAMES) + " | unix ÷ JS default | unix ÷ JS sync | ws ÷ JS default | ws ÷ JS sync |")
    print("|---" * (len(NAMES) + 5) + "|")
    ratios = {k: [] for k in ["ud", "us", "wd", "ws"]}
    for rnd in rounds:
        row = [str(rnd)]
        v = {n: by.get((n, rnd), {}).get("consumed_per_sec") for n in NAMES}
        row += [f"{v[n]:,.0f}" if v[n] else "-" for n in NAMES]
        for key, a, b in [("ud", "agentwire-unix", "jetstream-default"), ("us", "agentwire-unix", "jetstream-sync"),
                          ("wd", "agentwire-ws", "jetstream-default"), ("ws", "agentwire-ws", "jetstream-sync")]:
            if v[a] and v[b]:
                ratios[key].append(v[a] / v[b])
                row.append(f"{v[a] / v[b]:.2f}x")
            else:
                row.append("-")
        print("| " + " | ".join(row) + " |")
    med = ["median"]
    for n in NAMES:
        xs = [r["consumed_per_sec"] for r in runs.get(n, [])]
        med.append(f"{statistics.median(xs):,.0f}" if xs else "-")
    for key in ["ud", "us", "wd", "ws"]:
        xs = ratios[key]
        med.append(f"{statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})" if xs else "-")
    print("| " + " | ".join(med) + " |")
    print()
    print("Stored (acknowledged to the producer) per second, median: " + ", ".join(
        f"{n} {statistics.median([r['enqueued_per_sec'] for r in runs[n]]):,.0f}" for n in NAMES if n in runs))
    print("Server CPU per task, µs, median: " + ", ".join(
        f"{n} {statistics.median([r['server_cpu_us_per_task'] for r in runs[n]]):.1f}" for n in NAMES if n in runs))
    print("Errors: " + ", ".join(f"{n} {sum(r['errors'] for r in runs[n])}" for n in NAMES if n in runs))


if __name__ == "__main__":
    main()
