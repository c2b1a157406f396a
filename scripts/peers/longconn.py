#!/usr/bin/env python3
"""Summarise scorecard.sh's interleaved long-connection runs (5 KB, 1 connection x 1 stream).

Usage: longconn.py DIR   (DIR holds NAME-PROTO-ROUND.json from `agentwire load --json` and
cpu.txt with lines "NAME PROTO ROUND TICKS_BEFORE TICKS_AFTER" of the server's CPU ticks)
Prints a Markdown table of medians over the rounds, fastest first, and writes DIR/longconn.json.
"""
import json
import os
import statistics
import sys

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def main(d):
    cpu = {}
    for line in open(os.path.join(d, "cpu.txt")):
        name, proto, rnd, c0, c1 = line.split()
        cpu[(name, proto, int(rnd))] = (float(c1) - float(c0)) / TICKS_PER_S
    runs = []
    for (name, proto, rnd), server_cpu in sorted(cpu.items()):
        path = os.path.join(d, f"{name}-{proto}-{rnd}.json")
        try:
            j = json.loads(open(path).read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            runs.append({"server": name, "proto": proto, "round": rnd, "error": "no report"})
            continue
        ok = j["succeeded"]
        runs.append({"server": name, "proto": proto, "round": rnd, "rps": j["rps"],
                     "succeeded": ok, "errors": j["errors"], "server_cpu_s": server_cpu,
                     "server_us_per_request": server_cpu * 1e6 / ok if ok else None,
                     "client_cpu_s": j.get("cpu_seconds")})
    json.dump({"schema": "agentwire-peers-longconn/1", "runs": runs},
              open(os.path.join(d, "longconn.json"), "w"), indent=1)
    rows = []
    for key in sorted({(r["server"], r["proto"]) for r in runs}):
        good = [r for r in runs if (r["server"], r["proto"]) == key and "error" not in r]
        if not good:
            rows.append((key, None, None, 0, len([r for r in runs if (r["server"], r["proto"]) == key])))
            continue
        us = [r["server_us_per_request"] for r in good if r["server_us_per_request"] is not None]
        rows.append((key, statistics.median(r["rps"] for r in good),
                     statistics.median(us) if us else None,
                     sum(r["errors"] for r in good), len(good)))
    rows.sort(key=lambda x: -(x[1] or 0))
    ours = {k[1]: rps for k, rps, _, _, _ in rows if k[0] == "agentwire" and rps}
    print("| server | proto | req/s (median) | server CPU µs/request (median) | agentwire (same proto) ÷ this, req/s | errors | rounds |")
    print("|---|---|--:|--:|--:|--:|--:|")
    for (name, proto), rps, us, errors, n in rows:
        ratio = f"{ours[proto] / rps:.2f}" if rps and proto in ours else "-"
        rps_s = f"{rps:,.0f}" if rps else "-"
        us_s = f"{us:.1f}" if us else "-"
        print(f"| {name} | {proto} | {rps_s} | {us_s} | {ratio} | {errors} | {n} |")


if __name__ == "__main__":
    main(sys.argv[1])
