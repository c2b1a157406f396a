#!/usr/bin/env python3
"""Table of a scripts/peers/zentinel.sh run: medians over rounds of req/s and p99 per pair
(client -> agent) and requests in flight, with ours->ours against ref->ref per round.

usage: scripts/peers/zentinel_summary.py OUT
"""
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    runs = defaultdict(dict)  # (pair, c) -> round -> report
    for path in glob.glob(os.path.join(out, "*.json")):
        m = re.match(r"(.+)-c(\d+)-r(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            runs[(m.group(1), int(m.group(2)))][int(m.group(3))] = json.load(f)

    def med(pair, c, key):
        vals = [key(r) for r in runs.get((pair, c), {}).values()]
        return statistics.median(vals) if vals else None

    def rps(r):
        return r["requests_per_sec"]

    def p99(r):
        return r["latency"]["p99_us"]

    def errors(pair, c):
        return sum(sum(r["errors"].values()) for r in runs.get((pair, c), {}).values())

    pairs = ["ours-ours", "ref-ref", "ours-ref", "ref-ours", "ours-ours-json"]
    names = {"ours-ours": "ours → ours", "ref-ref": "ref → ref", "ours-ref": "ours → ref agent",
             "ref-ours": "ref client → ours", "ours-ours-json": "ours → ours, JSON"}
    fmt = lambda v, unit="": "-" if v is None else f"{v:,.0f}{unit}"
    print("| in flight | " + " | ".join(names[p] for p in pairs) + " | ours/ref per round |")
    print("|---|" + "---|" * (len(pairs) + 1))
    for c in (1, 16, 128):
        ratios = []
        for rnd in sorted(runs.get(("ours-ours", c), {})):
            a = runs[("ours-ours", c)].get(rnd)
            b = runs.get(("ref-ref", c), {}).get(rnd)
            if a and b:
                ratios.append(f"{rps(a) / rps(b):.2f}")
        cells = [f"{fmt(med(p, c, rps))} req/s, p99 {fmt(med(p, c, p99))} µs" for p in pairs]
        print(f"| {c} | " + " | ".join(cells) + f" | {' / '.join(ratios)} |")
    print()
    print("One request in 100 takes 10 ms (the agent's handler sleeps):")
    print()
    print("| in flight | ours → ours | ref → ref | ours without slow requests |")
    print("|---|---|---|---|")
    for c in (16, 128):
        cells = [f"{fmt(med(p, c, rps))} req/s, p50 {fmt(med(p, c, lambda r: r['latency']['p50_us']))} µs, p99 {fmt(med(p, c, p99))} µs"
                 for p in ("ours-ours-slow", "ref-ref-slow", "ours-ours")]
        print(f"| {c} | " + " | ".join(cells) + " |")
    print()
    total = {p: sum(errors(p, c) for c in (1, 16, 128)) for p in pairs}
    total.update({p: sum(errors(p, c) for c in (16, 128)) for p in ("ours-ours-slow", "ref-ref-slow")})
    print("errors: " + ", ".join(f"{k} {v}" for k, v in total.items()))
    cpu = lambda p, c, k: med(p, c, lambda r: r.get(k) or 0)
    print()
    print("CPU per request, µs (client / agent), medians:")
    for c in (1, 16, 128):
        print(f"- {c} in flight: " + "; ".join(
            f"{names[p]} {cpu(p, c, 'client_cpu_us_per_request'):.1f} / {cpu(p, c, 'agent_cpu_us_per_request'):.1f}"
            for p in pairs if (p, c) in runs))


if __name__ == "__main__":
    main()
