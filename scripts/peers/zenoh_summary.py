#!/usr/bin/env python3
"""The table of a scripts/peers/zenoh.sh run: per round, network, pattern and cell, Zenoh (QUIC,
TCP) and agentwire (each transport) msg/s (deliveries or round trips per second), p90 and p99,
then the ratio issue 44 names (agentwire quic / Zenoh over QUIC, goal >= 1.0x on every pattern
both have) and agentwire quic / Zenoh over TCP, as medians of the rounds.

Usage: python3 scripts/peers/zenoh_summary.py OUT

It only rearranges numbers already in OUT's JSON files.
"""

import glob
import json
import os
import re
import statistics
import sys


def load(out):
    rows = {}  # (network, pattern, cell, round) -> {name: {msg, p90, p99, errors}}
    for link in ("quic", "tcp"):
        path = os.path.join(out, f"zenoh-{link}.json")
        if not os.path.exists(path):
            continue
        for line in open(path):
            r = json.loads(line)
            key = (r["network"], r["pattern"], f"{r['clients']}x{r['size']}", r["round"])
            rows.setdefault(key, {})[f"zenoh-{link}"] = {
                "msg": r.get("msg_per_sec", 0),
                "p90": r.get("p90_ms", 0),
                "p99": r.get("p99_ms", 0),
                "errors": r.get("errors", 0),
            }
    for path in glob.glob(os.path.join(out, "agentwire-*-r*")):
        m = re.match(r"agentwire-([a-z]+)-(\d+x\d+)-(.+)-r(\d+)$", os.path.basename(path))
        files = sorted(glob.glob(os.path.join(path, "bench-*.json")))
        if not m or not files:
            continue
        pattern, cell, net, rnd = m.group(1), m.group(2), m.group(3), int(m.group(4))
        for c in json.load(open(files[-1]))["cells"]:
            if c.get("skipped"):
                continue
            rows.setdefault((net, pattern, cell, rnd), {})[c["config"]["transport"]] = {
                "msg": c["responses_per_sec"],
                "p90": (c.get("p90_us") or 0) / 1000,
                "p99": (c.get("p99_us") or 0) / 1000,
                "errors": c.get("errors", 0),
            }
    return rows


RATIOS = [("quic", "zenoh-quic", 1.0), ("quic", "zenoh-tcp", None)]


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    rows = load(sys.argv[1])
    if not rows:
        print("no results", file=sys.stderr)
        sys.exit(1)
    names = sorted({n for v in rows.values() for n in v}, key=lambda n: (not n.startswith("zenoh"), n))
    head = ["round", "network", "pattern", "cell"]
    head += [f"{n} msg/s" for n in names] + [f"{n} p90/p99 ms" for n in names]
    head += [f"{a}/{b}" for a, b, _ in RATIOS]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    ratios = {}
    for key in sorted(rows, key=lambda k: (k[3], k[0], k[1], k[2])):
        net, pattern, cell, rnd = key
        v = rows[key]
        line = [str(rnd), net, pattern, cell]
        line += [f"{v[n]['msg']:,.0f}" if n in v else "-" for n in names]
        line += [f"{v[n]['p90']:.1f}/{v[n]['p99']:.1f}" if n in v else "-" for n in names]
        for a, b, _ in RATIOS:
            if a in v and b in v and v[b]["msg"] > 0:
                r = v[a]["msg"] / v[b]["msg"]
                ratios.setdefault((net, pattern, cell, a, b), []).append(r)
                line.append(f"{r:.2f}x")
            else:
                line.append("-")
        print("| " + " | ".join(line) + " |")
    print()
    print("| network | pattern | cell | ratio | per round | median | goal |")
    print("|---|---|---|---|---|---|---|")
    for (net, pattern, cell, a, b), rs in sorted(ratios.items()):
        med = statistics.median(rs)
        want = next(g for x, y, g in RATIOS if (x, y) == (a, b))
        verdict = "-" if want is None else f"≥ {want}x ({'met' if med >= want else 'missed'})"
        per = " / ".join(f"{r:.2f}" for r in rs)
        print(f"| {net} | {pattern} | {cell} | {a}/{b} | {per} | {med:.2f}x | {verdict} |")


if __name__ == "__main__":
    main()
