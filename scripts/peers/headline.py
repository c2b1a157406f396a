#!/usr/bin/env python3
"""Headline table of a scripts/peers/scorecard.sh run: one row per server and protocol.

Usage: headline.py OUTDIR   (reads OUTDIR/*/scorecard.json; prints Markdown)
Columns come straight from the scorecards' metrics; nothing is computed but a lookup.
"""
import glob
import json
import os
import sys

COLUMNS = [  # (header, scenario, metric)
    ("long 5 KB req/s", "long-5k.bin", "req/s"),
    ("long 5 KB server µs/req", "long-5k.bin", "server CPU us/req"),
    ("10 KB ×100 streams req/s", "rps-10k-p100", "req/s"),
    ("10 KB ×100 server µs/req", "rps-10k-p100", "server CPU us/req"),
    ("round 1 (630 B) req/s", "round1-630b", "req/s"),
    ("round 2 (10 MB) MB/s", "round2-10m", "MB/s"),
    ("short 1 KB req/s", "short-1k.bin", "req/s"),
    ("handshake p50 ms", "handshakes", "connect p50 ms"),
]
ORDER = ["h3", "h2", "http1.1"]


def fmt(v):
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"


def main(out):
    cards = []
    for path in sorted(glob.glob(os.path.join(out, "*", "scorecard.json"))):
        card = json.load(open(path))
        cards.append(card)
    cards.sort(key=lambda c: (c["target"].get("label") != "agentwire serve", c["target"]["url"]))
    print("| server | proto | " + " | ".join(h for h, _, _ in COLUMNS) + " | errors |")
    print("|---|---|" + "--:|" * (len(COLUMNS) + 1))
    for card in cards:
        label = card["target"].get("label") or card["target"]["url"]
        for proto in ORDER:
            runs = [r for r in card["runs"] if r["proto"] == proto]
            if not runs:
                continue
            cells = []
            for _, scenario, metric in COLUMNS:
                run = next((r for r in runs if r["scenario"] == scenario), None)
                m = None
                if run and not run.get("failure"):
                    m = next((x["value"] for x in run["metrics"] if x["name"] == metric), None)
                cells.append(fmt(m))
            errors = sum(r["errors"] + (1 if r.get("failure") else 0) + (1 if r.get("cut_short") else 0) for r in runs)
            print(f"| {label} | {proto} | " + " | ".join(cells) + f" | {errors} |")


if __name__ == "__main__":
    main(sys.argv[1])
