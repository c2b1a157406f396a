#!/usr/bin/env python3
"""Tables of ours against the reference from a criterion run of the agent-protocol benches.

usage: scripts/peers/zentinel_criterion.py RAW.txt > table.md

RAW.txt is the output of
`cargo bench -p agentwire-zap --bench zentinel_codec --bench zentinel_pool -- --quick`.
Benchmark ids look like GROUP/encode/ours/PAYLOAD (codec) or GROUP/ours (pool); the middle
estimate of each is used. A row whose reference has no counterpart shows ours alone.
"""
import re
import sys

UNITS = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}


def estimates(text):
    """id -> middle estimate in ns."""
    out = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"^(\S+)\s+time:\s+\[(.*)\]", line)
        if m:
            name = m.group(1)
            mids = m.group(2).split()
        else:
            m2 = re.match(r"^\s+time:\s+\[(.*)\]", line)
            if not m2 or name is None:
                m3 = re.match(r"^(\S+/\S+)\s*$", line)
                if m3:
                    name = m3.group(1)
                continue
            mids = m2.group(1).split()
        # [low unit mid unit high unit]
        value, unit = float(mids[2]), mids[3]
        out[name] = value * UNITS[unit]
        name = None  # a later "time:" line is criterion's change against its last run
    return out


def fmt(ns):
    return f"{ns:,.0f}" if ns >= 100 else f"{ns:.1f}"


def main():
    est = estimates(open(sys.argv[1], encoding="utf-8").read())
    codec = {}
    pool = {}
    for key, ns in est.items():
        parts = key.split("/")
        if len(parts) >= 4 and parts[1] in ("encode", "decode"):
            group, op, side, payload = parts[0], parts[1], parts[2], "/".join(parts[3:])
            codec.setdefault((group, payload), {})[(op, side)] = ns
        elif len(parts) >= 2:
            group, side, rest = parts[0], parts[1], "/".join(parts[2:])
            pool.setdefault((group, rest), {})[side] = ns
    print("| payload | encode ours / reference (ns) | ratio | decode ours / reference (ns) | ratio |")
    print("|---|---|---|---|---|")
    for (group, payload), v in codec.items():
        cells = []
        for op in ("encode", "decode"):
            o, r = v.get((op, "ours")), v.get((op, "reference"))
            if o is None or r is None:
                cells += ["-", "-"]
                continue
            ratio = o / r
            mark = f"**{ratio:.2f}x**" if ratio <= 0.5 else f"{ratio:.2f}x"
            cells += [f"{fmt(o)} / {fmt(r)}", mark]
        print(f"| {group} {payload} | " + " | ".join(cells) + " |")
    print()
    print("| pool hot path | ours (ns) | reference (ns) | ratio |")
    print("|---|---|---|---|")
    for (group, rest), v in pool.items():
        o, r = v.get("ours"), v.get("reference")
        label = f"{group} {rest}".strip()
        if o is None:
            continue
        if r is None:
            print(f"| {label} | {fmt(o)} | (private in the reference) | - |")
        else:
            print(f"| {label} | {fmt(o)} | {fmt(r)} | {o / r:.2f}x |")


if __name__ == "__main__":
    main()
