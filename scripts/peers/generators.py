#!/usr/bin/env python3
"""Summarise scripts/peers/scorecard.sh's load-generator runs.

Usage: generators.py DIR   (DIR holds TARGET-PROTO-TOOL-N.out and .time files)
Prints a Markdown table (medians over repeats) and writes DIR/generators.json with every run.
CPU per request = (user + sys CPU seconds of the client process) / successful requests.
"""
import json
import os
import re
import statistics
import sys


def parse(tool, text):
    """(successful requests, failed requests, req/s) from a tool's output, or None."""
    if tool == "agentwire-load":
        try:
            j = json.loads(text.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None
        return j["succeeded"], j["requests"] - j["succeeded"], j["rps"]
    rps = re.search(r"finished in [0-9.]+m?s, ([0-9.]+) req/s", text)
    if tool == "h2load":
        m = re.search(r"requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored", text)
        if not (m and rps):
            return None
        return int(m.group(2)), int(m.group(3)) + int(m.group(4)), float(rps.group(1))
    if tool == "tquic_client":
        m = re.search(r"requests: sent (\d+), finish (\d+), success (\d+)", text)
        if not (m and rps):
            return None
        # sent - finish were still in flight when the duration ended: not failures.
        return int(m.group(3)), int(m.group(2)) - int(m.group(3)), float(rps.group(1))
    return None


def main(d):
    runs = []
    for name in sorted(os.listdir(d)):
        if not name.endswith(".out"):
            continue
        stem = name[:-4]
        m = re.fullmatch(r"(.+?)-(h3|h2)-(agentwire-load|h2load|tquic_client)-(\d+)", stem)
        if not m:
            continue
        target, proto, tool, rep = m.groups()
        text = open(os.path.join(d, name), errors="replace").read()
        parsed = parse(tool, text)
        try:
            user, sys_, real = (float(x) for x in open(os.path.join(d, stem + ".time")).read().split()[:3])
        except (OSError, ValueError):
            user = sys_ = real = None
        run = {"target": target, "proto": proto, "tool": tool, "repeat": int(rep), "file": name}
        if parsed is None:
            run["error"] = "output not understood"
        else:
            ok, failed, rps = parsed
            cpu = None if user is None else user + sys_
            run.update(succeeded=ok, failed=failed, rps=rps, cpu_s=cpu, wall_s=real,
                       cpu_us_per_request=(cpu * 1e6 / ok) if (cpu is not None and ok) else None)
        runs.append(run)
    json.dump({"schema": "agentwire-peers-generators/1", "runs": runs},
              open(os.path.join(d, "generators.json"), "w"), indent=1)
    print("| target | proto | load generator | req/s (median) | client CPU µs/request (median) | "
          "client CPU s (median) | failed (sum) | runs |")
    print("|---|---|---|--:|--:|--:|--:|--:|")
    keys = sorted({(r["target"], r["proto"], r["tool"]) for r in runs})
    for key in keys:
        rs = [r for r in runs if (r["target"], r["proto"], r["tool"]) == key]
        good = [r for r in rs if "error" not in r]
        med = lambda k: statistics.median([r[k] for r in good if r.get(k) is not None]) if good else float("nan")
        bad = len(rs) - len(good)
        print(f"| {key[0]} | {key[1]} | {key[2]} | {med('rps'):.0f} | {med('cpu_us_per_request'):.1f} | "
              f"{med('cpu_s'):.2f} | {sum(r.get('failed', 0) for r in good)} | {len(good)}"
              f"{f' ({bad} not understood)' if bad else ''} |")


if __name__ == "__main__":
    main(sys.argv[1])
