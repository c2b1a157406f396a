#!/usr/bin/env python3
"""The table of a scripts/peers/nats.sh run: per round and cell, NATS (plain TCP, TLS) and
agentwire (each transport) msg/s, p99, the server's (nats-server's, the hub's) and the load
generator's (clients and echo workers together) CPU per response, and the ratios the issue's
goals name (agentwire unix / NATS TCP, wss / NATS TLS, quic / NATS TLS), then their medians
against the goal of the run's pattern (request/reply: issue 36's; fanout: issue 44's, 1.3x at
1 KiB, 1.0x at 64 B; none for gather, stream and queue).

Usage: python3 scripts/peers/nats_summary.py OUT

It only rearranges numbers already in OUT's JSON files.
"""

import glob
import json
import os
import re
import statistics
import sys


PATTERN = {"pattern": "request"}


def load(out):
    rows = {}  # (round, cell) -> {name: {msg, p99, cpu}}
    for name in ("tcp", "tls"):
        path = os.path.join(out, f"nats-{name}.json")
        if not os.path.exists(path):
            continue
        for line in open(path):
            r = json.loads(line)
            PATTERN["pattern"] = r.get("pattern", "request")
            cell = f"{r['clients']}x{r['size']}"
            rows.setdefault((r["round"], cell), {})[f"nats-{name}"] = {
                "msg": r["msg_per_sec"],
                "p99": r["p99_ms"],
                "cpu": r["server_cpu_us_per_response"],
                "client": r.get("client_cpu_secs", 0) * 1e6 / max(1, r["completed"]),
                "errors": r["errors"],
            }
    for path in glob.glob(os.path.join(out, "agentwire-*-r*")):
        m = re.match(r"agentwire-(.+)-r(\d+)$", os.path.basename(path))
        files = sorted(glob.glob(os.path.join(path, "bench-*.json")))
        if not m or not files:
            continue
        for c in json.load(open(files[-1]))["cells"]:
            if c.get("skipped"):
                continue
            rows.setdefault((int(m.group(2)), m.group(1)), {})[c["config"]["transport"]] = {
                "msg": c["responses_per_sec"],
                "p99": (c.get("p99_us") or 0) / 1000,
                "cpu": c.get("hub_cpu_us_per_response") or 0,
                "client": (c.get("agents_cpu_seconds") or 0)
                * 1e6
                / max(1.0, c["responses_per_sec"] * c["config"]["duration_ms"] / 1000),
                "errors": c.get("errors", 0),
            }
    return rows


GOALS = [("unix", "nats-tcp", 1.2), ("wss", "nats-tls", 1.0), ("quic", "nats-tls", 1.0)]


def goal(cell, a, b):
    """The goal for ratio a/b in `cell` (AGENTSxSIZE) under the run's pattern (None: the
    issues set none against NATS for it)."""
    if PATTERN["pattern"] == "fanout":
        return 1.3 if int(cell.split("x")[1]) >= 1024 else 1.0
    if PATTERN["pattern"] != "request":
        return None
    return next(g for x, y, g in GOALS if (x, y) == (a, b))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = load(sys.argv[1])
    if not rows:
        sys.exit(f"no runs under {sys.argv[1]}")
    names = ["nats-tcp", "nats-tls", "unix", "wss", "quic"]
    head = ["round", "cell"] + [f"{n} msg/s" for n in names] + [f"{n} p99 ms" for n in names]
    head += [f"{n} server µs/resp" for n in names] + [f"{n} client µs/resp" for n in names]
    head += [f"{a}/{b}" for a, b, _ in GOALS]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    ratios = {}
    for (rnd, cell) in sorted(rows, key=lambda k: (k[1], k[0])):
        r = rows[(rnd, cell)]
        line = [str(rnd), cell]
        line += [f"{r[n]['msg']:,.0f}" if n in r else "-" for n in names]
        line += [f"{r[n]['p99']:.1f}" if n in r else "-" for n in names]
        line += [f"{r[n]['cpu']:.1f}" if n in r else "-" for n in names]
        line += [f"{r[n]['client']:.1f}" if n in r and r[n]["client"] else "-" for n in names]
        for a, b, _ in GOALS:
            if a in r and b in r and r[b]["msg"]:
                x = r[a]["msg"] / r[b]["msg"]
                ratios.setdefault((cell, a, b), []).append(x)
                line.append(f"{x:.2f}x")
            else:
                line.append("-")
        print("| " + " | ".join(line) + " |")
    print()
    print("| cell | ratio | per round | median | goal |")
    print("|---|---|---|---|---|")
    for (cell, a, b), xs in sorted(ratios.items()):
        want = goal(cell, a, b)
        med = statistics.median(xs)
        target = "none set" if want is None else f"≥ {want}x ({'met' if med >= want else 'missed'})"
        print(f"| {cell} | {a}/{b} | {' / '.join(f'{x:.2f}' for x in xs)} | {med:.2f}x | {target} |")


if __name__ == "__main__":
    main()
