#!/usr/bin/env python3
"""Tables of ours against the reference from a criterion run of the agent-protocol benches.

usage: scripts/peers/zentinel_criterion.py RAW.txt [RAW2.txt ...] > table.md

Each RAW.txt is the output of one run of
`cd crates/zap/interop && cargo bench --bench zentinel_codec --bench zentinel_pool -- --quick`.
Benchmark ids look like GROUP/encode/ours/PAYLOAD (codec) or GROUP/ours (pool); the middle
estimate of each is used. With several runs, times are medians over the runs and a ratio is
the median of the runs' ratios (each run has both sides in one binary), with its range. A
row whose reference has no counterpart shows ours alone.
"""
import re
import statistics
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


def ratio_cell(pairs, bold_at=None):
    """`ours / reference (ns)` and the ratio cell of (ours, reference) pairs, one per run."""
    o = statistics.median(p[0] for p in pairs)
    r = statistics.median(p[1] for p in pairs)
    ratios = [p[0] / p[1] for p in pairs]
    ratio = statistics.median(ratios)
    text = f"{ratio:.2f}x"
    if len(ratios) > 1:
        text += f" ({min(ratios):.2f}-{max(ratios):.2f})"
    if bold_at is not None and ratio <= bold_at:
        text = f"**{text}**"
    return f"{fmt(o)} / {fmt(r)}", text


def main():
    runs = [estimates(open(path, encoding="utf-8").read()) for path in sys.argv[1:]]
    codec = {}
    pool = {}
    for run, est in enumerate(runs):
        for key, ns in est.items():
            parts = key.split("/")
            if len(parts) >= 4 and parts[1] in ("encode", "decode"):
                group, op, side, payload = parts[0], parts[1], parts[2], "/".join(parts[3:])
                codec.setdefault((group, payload), {}).setdefault((op, side), {})[run] = ns
            elif len(parts) >= 2:
                group, side, rest = parts[0], parts[1], "/".join(parts[2:])
                pool.setdefault((group, rest), {}).setdefault(side, {})[run] = ns

    def pairs(ours, ref):
        return [(ours[i], ref[i]) for i in ours if i in ref]

    print("| payload | encode ours / reference (ns) | ratio | decode ours / reference (ns) | ratio |")
    print("|---|---|---|---|---|")
    for (group, payload), v in codec.items():
        cells = []
        for op in ("encode", "decode"):
            both = pairs(v.get((op, "ours"), {}), v.get((op, "reference"), {}))
            if not both:
                cells += ["-", "-"]
                continue
            cells += list(ratio_cell(both, bold_at=0.5))
        print(f"| {group} {payload} | " + " | ".join(cells) + " |")
    print()
    print("| pool hot path | ours (ns) | reference (ns) | ratio |")
    print("|---|---|---|---|")
    for (group, rest), v in pool.items():
        ours, ref = v.get("ours", {}), v.get("reference", {})
        label = f"{group} {rest}".strip()
        if not ours:
            continue
        if not ref:
            print(f"| {label} | {fmt(statistics.median(ours.values()))} | (private in the reference) | - |")
        else:
            times, ratio = ratio_cell(pairs(ours, ref))
            o, r = times.split(" / ")
            print(f"| {label} | {o} | {r} | {ratio} |")


if __name__ == "__main__":
    main()
