#!/usr/bin/env python3
"""Tables for scripts/cluster-bench.sh: per window, the median over rounds of msg/s and
latency between agents on one hub and between agents on two hubs joined through NATS, the
cross-hub msg/s as a ratio to the one-hub figure of the same round, and the latency a hop adds.
Writes OUT/README.md and prints it."""

import json
import statistics
import sys
from collections import defaultdict

def cells(hubs):
    other = "hub B" if hubs == 2 else f"{hubs - 1} other hubs"
    return {"local-echo-": "one hub", "remote-echo-": f"to {other} (through NATS)"}


def main(out):
    rows = [json.loads(l) for l in open(f"{out}/raw.jsonl") if l.strip()]
    env = json.load(open(f"{out}/env.json"))
    by = defaultdict(list)
    rounds = defaultdict(dict)
    for r in rows:
        res = r["result"]
        by[(res["window"], res["target_prefix"])].append(res)
        rounds[(res["window"], r["round"])][res["target_prefix"]] = res["msg_per_s"]
    shape = env["shape"]
    hubs = shape.get("hubs", 2)
    CELLS = cells(hubs)
    lines = [
        f"# Request/reply across {hubs} hubs joined through NATS ({shape['agents']} agents x "
        f"{shape['size']} B, {shape['transport']})",
        "",
        f"`{env['command']}` at {env['git_sha'][:12]}"
        + (" (uncommitted changes)" if env.get("git_dirty") else "")
        + f"; {env['cpus']} CPUs ({env['cpu_model']}), kernel {env['kernel']}; {env['rustc']}; "
        f"{env['nats_server']}. Medians of {shape['rounds']} interleaved rounds of "
        f"{shape['duration_s']} s per cell; raw results in `raw.jsonl`.",
        "",
        "The client's agents are on hub A; the echo agents on hub A (one hub) or spread over "
        f"the {hubs - 1} other hub(s) (each request and each answer takes one hop through "
        "NATS). All processes share the machine's 2 cores.",
        "",
    ]
    for w in sorted({w for w, _ in by}):
        lines += [
            f"## Window {w} (requests in flight per agent)",
            "",
            "| path | msg/s | ÷ one hub (same round) | p50 ms | p99 ms | errors |",
            "|---|--:|--:|--:|--:|--:|",
        ]
        med = {}
        for prefix, name in CELLS.items():
            res = by.get((w, prefix), [])
            if not res:
                continue
            m = {k: statistics.median(x[k] for x in res) for k in ("msg_per_s", "p50_us", "p99_us")}
            med[prefix] = m
            ratios = [
                rd["remote-echo-"] / rd["local-echo-"]
                for (rw, _), rd in rounds.items()
                if rw == w and "remote-echo-" in rd and rd.get("local-echo-")
            ]
            ratio = "1.00x" if prefix == "local-echo-" else (
                f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
            lines.append(
                f"| {name} | {m['msg_per_s']:,.0f} | {ratio} | {m['p50_us'] / 1000:.2f} | "
                f"{m['p99_us'] / 1000:.2f} | {sum(x['errors'] for x in res)} |"
            )
        if len(med) == 2:
            extra = (med["remote-echo-"]["p50_us"] - med["local-echo-"]["p50_us"]) / 1000
            lines += ["", f"Median latency added by the hop through NATS: {extra:.2f} ms."]
        lines.append("")
    text = "\n".join(lines)
    open(f"{out}/README.md", "w").write(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1])
