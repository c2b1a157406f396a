#!/usr/bin/env python3
"""Markdown table from run.sh output dirs: python3 scripts/peers/table.py DIR [DIR...]"""
import glob, json, os, sys
print("| run | server | proto | requests/s | requests | errors | p50 µs | p99 µs | client CPU s | verification |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
for d in sys.argv[1:]:
    for f in sorted(glob.glob(os.path.join(d, "load-*.json"))):
        name, proto = os.path.basename(f)[5:-5].rsplit("-", 1)
        j = json.load(open(f)); l = j["latency"]["request"]
        err = j["errors"]
        if j["errors_by_kind"]: err = f'{err} {j["errors_by_kind"]}'
        non2xx = {k: v for k, v in j["status"].items() if not k.startswith("2")}
        if non2xx: err = f"{err}; non-2xx {non2xx}"
        print(f'| {os.path.basename(d.rstrip("/"))} | {name} | {proto} | {j["rps"]:.0f} | {j["requests"]} | {err} | '
              f'{l["p50_us"]} | {l["p99_us"]} | {j["cpu_seconds"]} | {j["settings"]["verification"]} |')
