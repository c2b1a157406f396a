#!/usr/bin/env python3
"""Tables for scripts/sdk-bench.sh: per window, the median over rounds of each client's msg/s,
latency and CPU per request, and each binding's msg/s as a ratio to the Rust client's measured
in the same round (median of the per-round ratios). Writes OUT/README.md and prints it."""

import json
import statistics
import sys
from collections import defaultdict


def main(out):
    rows = [json.loads(l) for l in open(f"{out}/raw.jsonl") if l.strip()]
    env = json.load(open(f"{out}/env.json"))
    by = defaultdict(list)  # (window, client) -> results
    rounds = defaultdict(dict)  # (window, round) -> client -> msg/s
    for r in rows:
        res = r["result"]
        by[(res["window"], res["client"])].append(res)
        rounds[(res["window"], r["round"])][res["client"]] = res["msg_per_s"]
    lines = [
        f"# Python and Node clients beside the Rust client ({env['shape']['agents']} agents x "
        f"{env['shape']['size']} B, {env['shape']['transport']})",
        "",
        f"`{env['command']}` at {env['git_sha'][:12]}"
        + (" (uncommitted changes)" if env.get("git_dirty") else "")
        + f"; {env['cpus']} CPUs ({env['cpu_model']}), kernel {env['kernel']}; "
        f"{env['rustc']}, {env['python']}, Node {env['node']}. Medians of "
        f"{env['shape']['rounds']} interleaved rounds of {env['shape']['duration_s']} s per "
        "client; raw results in `raw.jsonl`.",
        "",
    ]
    windows = sorted({w for w, _ in by}, reverse=True)
    for w in windows:
        lines += [
            f"## Window {w} (requests in flight per agent)",
            "",
            "| client | msg/s | ÷ Rust (same round) | p50 ms | p99 ms | CPU µs per request | "
            "the binding's own CPU µs per request | errors |",
            "|---|--:|--:|--:|--:|--:|--:|--:|",
        ]
        rust_cpu = statistics.median(x["cpu_us_per_msg"] for x in by.get((w, "rust"), [])) \
            if by.get((w, "rust")) else None
        for client in ("rust", "python", "node"):
            res = by.get((w, client), [])
            if not res:
                continue
            med = lambda k: statistics.median(x[k] for x in res)
            ratios = [
                rd[client] / rd["rust"]
                for (rw, _), rd in rounds.items()
                if rw == w and client in rd and rd.get("rust")
            ]
            ratio = f"{statistics.median(ratios):.2f}x" if client != "rust" else "1.00x"
            lo_hi = f" ({min(ratios):.2f}-{max(ratios):.2f})" if client != "rust" else ""
            lines.append(
                f"| {client} | {med('msg_per_s'):,.0f} | {ratio}{lo_hi} | "
                f"{med('p50_us') / 1000:.2f} | {med('p99_us') / 1000:.2f} | "
                f"{med('cpu_us_per_msg'):.1f} | "
                + (f"{med('cpu_us_per_msg') - rust_cpu:.1f}" if rust_cpu is not None and client != "rust" else "-")
                + f" | {sum(x['errors'] for x in res)} |"
            )
        lines.append("")
    lines += [
        "CPU per request is the client process's own (all its threads), over the measured "
        "seconds. The binding's own CPU is that minus the Rust client's: what crossing into "
        "Python or JavaScript costs per request, on top of the same Rust core doing the same "
        "QUIC work. The hub and the echo agents share the same 2 cores, so a client that uses "
        "more CPU also leaves less to them.",
        "",
    ]
    text = "\n".join(lines)
    open(f"{out}/README.md", "w").write(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1])
