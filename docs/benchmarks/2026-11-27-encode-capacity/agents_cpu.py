#!/usr/bin/env python3
"""Agents' CPU per message (µs) per variant and transport: python3 agents_cpu.py DIR"""
import glob, json, statistics, sys
rows = {}
for f in sorted(glob.glob(f"{sys.argv[1]}/*-r*/bench-*.json")):
    variant = f.split("/")[-2].rsplit("-r", 1)[0]
    for c in json.load(open(f))["cells"]:
        if c.get("agents_cpu_seconds") and c["responses_per_sec"]:
            dur = c["config"].get("duration_ms", 5000) / 1000
            rows.setdefault((variant, c["config"]["transport"]), []).append(
                c["agents_cpu_seconds"] / (c["responses_per_sec"] * dur) * 1e6)
for k, v in sorted(rows.items()):
    print(*k, [round(x, 1) for x in v], "median", round(statistics.median(v), 1))
