#!/usr/bin/env python3
"""Per-round table of a `scripts/bench-ab.sh` directory, read from the bench JSON of each run.

Usage:
    python3 scripts/bench_ab_summary.py DIR
    python3 scripts/bench_ab_summary.py --resources DIR
    python3 scripts/bench_ab_summary.py --cpu DIR
    python3 scripts/bench_ab_summary.py --memory DIR

For every round and variant it prints each transport's msg/s, p50/p90/p99, QUIC's ratios to
the best TCP transport of the same round and variant (msg/s: higher is better; p90/p99:
lower is better) and, where the run had one, the priority probe's critical p50/p99 for QUIC.
With --resources it prints instead each transport's time to connect every agent and the hub's
peak RSS, and QUIC's ratios to the best TCP transport by each (the fastest to connect, the
smallest hub; lower is better for both). With --cpu it prints the hub's CPU per response (µs;
each response is two messages forwarded by the hub) per transport, round and variant, and each
variant's median beside the first variant's (the base). With --memory it prints the hub's peak
RSS, the peak of its sockets' kernel queues and the peak of the two together (runs from
2026-11-26 on), and QUIC's ratios to the smallest TCP hub by RSS and by RSS plus queues. It
only rearranges numbers already in the JSON files.
"""

import glob
import json
import os
import re
import sys

TCP = ("h2", "wss")


def runs(directory):
    """(variant, round, {transport: cell}) for every run directory, in round order."""
    out = []
    for path in glob.glob(os.path.join(directory, "*-r*")):
        m = re.match(r"(.+)-r(\d+)$", os.path.basename(path))
        files = sorted(glob.glob(os.path.join(path, "bench-*.json")))
        if not m or not files:
            continue
        with open(files[-1]) as f:
            cells = json.load(f)["cells"]
        by_transport = {c["config"]["transport"]: c for c in cells if not c.get("skipped")}
        out.append((m.group(1), int(m.group(2)), by_transport))
    return sorted(out, key=lambda r: (r[1], r[0]))


def ms(us):
    return "-" if us is None else f"{us / 1000:.0f}"


def resources(rows, transports):
    """Connect time and hub peak RSS per round and variant, QUIC's ratios to the best TCP."""
    mib = lambda c: (c.get("hub_peak_rss_bytes") or 0) / 2**20
    head = ["round", "variant"] + [f"{t} connect ms" for t in transports]
    head += [f"{t} each p50 ms" for t in transports]
    head += [f"{t} hub MiB" for t in transports]
    quics = [t for t in transports if t.startswith("quic")]
    head += [f"{q}/TCP {what}" for q in quics for what in ("connect", "each p50", "hub MiB")]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for variant, rnd, cells in rows:
        line = [str(rnd), variant]
        line += [f"{cells[t]['connect_ms']:,.0f}" if t in cells else "-" for t in transports]
        # Reports from before 2026-11-26 have no per-client connect times.
        p50 = lambda c: c.get("connect_p50_ms")
        line += [f"{p50(cells[t]):,.0f}" if t in cells and p50(cells[t]) else "-"
                 for t in transports]
        line += [f"{mib(cells[t]):,.0f}" if t in cells else "-" for t in transports]
        tcp = [cells[t] for t in TCP if t in cells]
        for q in quics:
            c = cells.get(q)
            if not c or not tcp:
                line += ["-", "-", "-"]
                continue
            fastest = min(t["connect_ms"] for t in tcp)
            fastest_p50 = min((p50(t) or 0 for t in tcp), default=0)
            smallest = min(mib(t) for t in tcp)
            line.append(f"{c['connect_ms'] / fastest:.2f}x" if fastest else "-")
            line.append(f"{p50(c) / fastest_p50:.2f}x" if fastest_p50 and p50(c) else "-")
            line.append(f"{mib(c) / smallest:.2f}x" if smallest else "-")
        print("| " + " | ".join(line) + " |")


def cpu(rows, transports):
    """Hub CPU per response per round and variant, then medians and ratios to the base."""
    variants = []
    for variant, _, _ in rows:
        if variant not in variants:
            variants.append(variant)
    head = ["round", "variant"] + [f"{t} hub µs/response" for t in transports]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    per = {}
    for variant, rnd, cells in rows:
        line = [str(rnd), variant]
        for t in transports:
            c = cells.get(t)
            us = c.get("hub_cpu_us_per_response") if c else None
            if us:
                per.setdefault((variant, t), []).append(us)
            line.append(f"{us:,.1f}" if us else "-")
        print("| " + " | ".join(line) + " |")
    median = lambda xs: sorted(xs)[len(xs) // 2]
    print()
    head = ["variant"] + [f"{t} median µs" for t in transports]
    head += [f"{t} vs {variants[0]}" for t in transports]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for v in variants:
        line = [v]
        meds = {t: median(per[(v, t)]) for t in transports if per.get((v, t))}
        line += [f"{meds[t]:,.1f}" if t in meds else "-" for t in transports]
        for t in transports:
            base = per.get((variants[0], t))
            line.append(f"{meds[t] / median(base):.2f}x" if t in meds and base else "-")
        print("| " + " | ".join(line) + " |")


def memory(rows, transports):
    """Hub peak RSS, socket queues and both together per round and variant, QUIC's ratios."""
    mib = lambda c, key: (c.get(key) or 0) / 2**20
    rss = lambda c: mib(c, "hub_peak_rss_bytes")
    queued = lambda c: mib(c, "hub_peak_socket_queued_bytes")
    whole = lambda c: mib(c, "hub_peak_rss_plus_queued_bytes")
    head = ["round", "variant"]
    for what in ("RSS", "socket queues", "RSS + queues"):
        head += [f"{t} hub {what} MiB" for t in transports]
    quics = [t for t in transports if t.startswith("quic")]
    head += [f"{q}/TCP {what}" for q in quics for what in ("RSS", "RSS + queues")]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for variant, rnd, cells in rows:
        line = [str(rnd), variant]
        for measure in (rss, queued, whole):
            line += [f"{measure(cells[t]):,.1f}" if t in cells else "-" for t in transports]
        tcp = [cells[t] for t in TCP if t in cells]
        for q in quics:
            c = cells.get(q)
            for measure in (rss, whole):
                smallest = min((measure(t) for t in tcp), default=0)
                line.append(f"{measure(c) / smallest:.2f}x" if c and smallest else "-")
        print("| " + " | ".join(line) + " |")


def main():
    args = sys.argv[1:]
    show_resources = args[:1] == ["--resources"]
    show_cpu = args[:1] == ["--cpu"]
    show_memory = args[:1] == ["--memory"]
    if show_resources or show_cpu or show_memory:
        args = args[1:]
    if len(args) != 1:
        sys.exit(__doc__)
    rows = runs(args[0])
    if not rows:
        sys.exit(f"no bench runs under {args[0]}")
    transports = []
    for _, _, cells in rows:
        transports += [t for t in cells if t not in transports]
    if show_resources:
        resources(rows, transports)
        return
    if show_cpu:
        cpu(rows, transports)
        return
    if show_memory:
        memory(rows, transports)
        return
    head = ["round", "variant"] + [f"{t} msg/s" for t in transports]
    head += [f"{t} p50/p90/p99 ms" for t in transports]
    quics = [t for t in transports if t.startswith("quic")]
    for q in quics:
        head += [f"{q}/TCP msg/s", f"{q}/TCP p90", f"{q}/TCP p99", f"{q} critical p50/p99 ms"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for variant, rnd, cells in rows:
        line = [str(rnd), variant]
        line += [f"{cells[t]['responses_per_sec']:,.0f}" if t in cells else "-" for t in transports]
        line += [
            "/".join(ms(cells[t].get(k)) for k in ("p50_us", "p90_us", "p99_us"))
            if t in cells
            else "-"
            for t in transports
        ]
        tcp = [cells[t] for t in TCP if t in cells]
        best = max(tcp, key=lambda c: c["responses_per_sec"]) if tcp else None
        for q in quics:
            c = cells.get(q)
            if not c or not best:
                line += ["-"] * 4
                continue
            line.append(f"{c['responses_per_sec'] / best['responses_per_sec']:.2f}x")
            for k in ("p90_us", "p99_us"):
                line.append(f"{c[k] / best[k]:.2f}x" if c.get(k) and best.get(k) else "-")
            crit = next((p for p in c.get("priority") or [] if p["class"] == "critical"), None)
            line.append(f"{ms(crit['p50_us'])}/{ms(crit['p99_us'])}" if crit else "-")
        print("| " + " | ".join(line) + " |")


if __name__ == "__main__":
    main()
