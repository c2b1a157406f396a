#!/usr/bin/env python3
"""Headline table: an `agentwire bench --report-matrix` result beside the claimed figures.

Usage:
    python3 scripts/bench_headline.py RESULT.json [docs/benchmarks/claimed/claimed-figures.json]

Reads the bench JSON (schema agentwire-bench/3) and the claimed figures, and prints Markdown
tables with our measured medians next to the report's claimed numbers, each column labelled.
It only rearranges numbers: every "ours" figure is read from RESULT.json (p95 is computed from
the raw latency histograms in it, since the bench's summaries stop at p90/p99), every
"claimed" figure from the claims file. Nothing is estimated or filled in.
"""

import json
import statistics
import sys

TRANSPORTS = [("quic", "quic"), ("h2", "http2"), ("wss", "websocket")]


def pct_from_hist(pairs, q):
    """The value at quantile q of a histogram given as [(value_us, count)] ascending."""
    total = sum(c for _, c in pairs)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for value, count in pairs:
        seen += count
        if seen >= rank:
            return value
    return pairs[-1][0]


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    result = json.load(open(sys.argv[1]))
    claims_path = sys.argv[2] if len(sys.argv) > 2 else "docs/benchmarks/claimed/claimed-figures.json"
    claims = json.load(open(claims_path))["agent_transport_report"]
    if result.get("schema") != "agentwire-bench/3":
        sys.exit(f"unexpected schema {result.get('schema')!r}")

    cells = {}
    for c in result["cells"]:
        cfg = c["config"]
        key = (cfg["transport"], cfg["agents"], cfg["size"], cfg["network"]["rtt_ms"], cfg["network"]["loss_percent"])
        cells[key] = c

    def cell(t, agents, size, rtt):
        return cells.get((t, agents, size, rtt, 0.0))

    out = []
    out.append("Throughput, messages/s (round trips through the hub; ours: median of the runs)\n")
    out.append("| scenario | quic ours | quic claimed | h2 ours | h2 claimed | wss ours | wss claimed |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for label, agents, size, key in [("10 agents × 1 KB, 0 ms", 10, 1024, "10_agents_1KB"),
                                     ("100 agents × 10 KB, 0 ms", 100, 10240, "100_agents_10KB"),
                                     ("1000 agents × 100 KB, 0 ms", 1000, 102400, "1000_agents_100KB")]:
        row = [label]
        for t, name in TRANSPORTS:
            c = cell(t, agents, size, 0)
            row.append(fmt(c["responses_per_sec"]) if c and c["runs"] else "–")
            row.append(fmt(claims["throughput_msg_per_s"][key][name]))
        out.append("| " + " | ".join(row) + " |")

    out.append("\nRound-trip latency at 50 ms RTT, 10 agents × 1 KB, ms (ours: closed loop, median of the runs' percentiles)\n")
    out.append("| transport | p50 ours | p50 claimed | p95 ours | p95 claimed | p99 ours | p99 claimed |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for t, name in TRANSPORTS:
        c = cell(t, 10, 1024, 50)
        claim = claims["rtt_ms_at_50ms_latency"][name]
        if c and c["runs"]:
            p95 = med([pct_from_hist(r["histogram"], 0.95) for r in c["runs"]])
            ours = (c["p50_us"] / 1000, p95 / 1000 if p95 else None, c["p99_us"] / 1000)
        else:
            ours = (None, None, None)
        out.append(f"| {t} | {fmt(ours[0], 1)} | {fmt(claim['p50'], 1)} | {fmt(ours[1], 1)} | {fmt(claim['p95'], 1)} | {fmt(ours[2], 1)} | {fmt(claim['p99'], 1)} |")

    out.append("\nConnection establishment, all agents connected, ms\n")
    out.append("| scenario | quic ours | quic claimed | h2 ours | h2 claimed | wss ours | wss claimed |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for label, agents, size, rtt, key in [("10 agents, 0 ms", 10, 1024, 0, "10_agents_0ms"),
                                          ("100 agents, 50 ms", 100, 10240, 50, "100_agents_50ms"),
                                          ("1000 agents, 100 ms", 1000, 102400, 100, "1000_agents_100ms")]:
        row = [label]
        for t, name in TRANSPORTS:
            c = cell(t, agents, size, rtt)
            row.append(fmt(c["connect_ms"], 1) if c and c["runs"] else "–")
            row.append(fmt(claims["connection_establishment_ms"][key][name], 1))
        out.append("| " + " | ".join(row) + " |")

    out.append("\nHub peak memory, MiB (ours: the hub process's peak RSS in the 0 ms cell; claimed: 'peak memory', MB)\n")
    out.append("| agents | quic ours | quic claimed | h2 ours | h2 claimed | wss ours | wss claimed |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for agents, size, key in [(10, 1024, "10_agents"), (100, 10240, "100_agents"), (1000, 102400, "1000_agents")]:
        row = [str(agents)]
        for t, name in TRANSPORTS:
            c = cell(t, agents, size, 0)
            rss = c.get("hub_peak_rss_bytes") if c else None
            row.append(fmt(rss / 2**20, 1) if rss else "–")
            row.append(fmt(claims["peak_memory_mb"][key][name], 1))
        out.append("| " + " | ".join(row) + " |")

    env = result["environment"]
    out.append(f"\nOurs: {env.get('cpu_model')}, {env.get('cores')} cores, kernel {env.get('kernel')}, "
               f"{env.get('build_profile')} build of {(env.get('git_sha') or '?')[:12]}; "
               f"command: `{' '.join(result['command_line'])}`.")
    out.append(f"Claimed: {claims['source']}.")
    print("\n".join(out))


if __name__ == "__main__":
    main()
