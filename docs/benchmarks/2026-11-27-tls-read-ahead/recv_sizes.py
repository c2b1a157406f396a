#!/usr/bin/env python3
"""Histogram of recvfrom sizes in an `strace -f -e trace=recvfrom -o FILE` log: python3 recv_sizes.py FILE"""
import collections, re, sys
calls = []
for line in open(sys.argv[1]):
    m = re.search(r"recvfrom\(\d+, .*?, (\d+), .*\) = (-?\d+)", line)
    if m:
        calls.append((int(m.group(1)), int(m.group(2))))
print("calls", len(calls))
print("asked (bytes, calls)", collections.Counter(a for a, _ in calls).most_common(6))
got = [g for _, g in calls if g > 0]
print("got (KiB, calls)", sorted(collections.Counter(min(g // 1024, 64) for g in got).items()))
print("bytes", sum(got), "mean per call", sum(got) // max(len(got), 1))
