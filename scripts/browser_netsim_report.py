#!/usr/bin/env python3
"""report.md for scripts/browser-netsim.sh: per round and transport, then medians with their
spread and WebTransport's ratios to WebSocket.

usage: scripts/browser_netsim_report.py browser-latency.json SPEC COMMIT
"""
import json
import statistics
import sys


def main():
    path, spec, commit = sys.argv[1:4]
    data = json.load(open(path))
    rounds = data["rounds"]
    out = [
        f"# Chromium over WebTransport and WebSocket, {spec}",
        "",
        f"{data['browser']}, headless, in netsim's client namespace (bridge stage); the hub and a "
        f"Rust echo agent in the server namespace. Per round and transport: {data['requests']} "
        f"requests of {data['size']} B, {data['inflight']} in flight, after {data['warmup']} "
        f"warm-up requests; rounds interleaved (odd rounds WebTransport first). Commit {commit}.",
        "",
        "| round | transport | msg/s | p50 ms | p90 ms | p99 ms | max ms | errors |",
        "|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rounds:
        out.append(
            f"| {r['round']} | {r['transport']} | {r['msg_per_s']:.1f} | {r['p50_ms']:.1f} | "
            f"{r['p90_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} | {r['errors']} |"
        )
    by = {t: [r for r in rounds if r["transport"] == t] for t in ("webtransport", "websocket")}
    out += ["", "| transport | median msg/s (range) | median p90 ms (range) | median p99 ms (range) | errors |", "|---|--:|--:|--:|--:|"]
    for t, rs in by.items():
        if not rs:
            continue
        def m(k):
            v = [r[k] for r in rs]
            return f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
        out.append(f"| {t} | {m('msg_per_s')} | {m('p90_ms')} | {m('p99_ms')} | {sum(r['errors'] for r in rs)} |")
    pairs = [(a, b) for a in by["webtransport"] for b in by["websocket"] if a["round"] == b["round"]]
    if pairs:
        def ratios(k):
            v = sorted(a[k] / b[k] for a, b in pairs)
            return f"{statistics.median(v):.2f}x (per round {', '.join(f'{x:.2f}' for x in v)})"
        out += [
            "",
            f"WebTransport ÷ WebSocket, same round: p90 {ratios('p90_ms')}; p99 {ratios('p99_ms')}; "
            f"msg/s {ratios('msg_per_s')}.",
        ]
    print("\n".join(out))


if __name__ == "__main__":
    main()
