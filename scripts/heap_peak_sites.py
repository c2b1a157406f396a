#!/usr/bin/env python3
"""Where a process's heap stood at its peak, by call site, from a heaptrack recording.

usage: scripts/heap_peak_sites.py FILE.zst [TOP]

Runs `heaptrack_print --flamegraph-cost-type peak` and adds up each allocation's share of the
peak under the innermost three frames that belong to agentwire or the transport crates
(quinn, h2, rustls, tungstenite, tokio's channels and tasks, bytes), so that a table reads
"frame decoder buffers: 80 MiB" rather than "alloc::raw_vec: 200 MiB".
Record one with the bench: AGENTWIRE_BENCH_HUB_WRAPPER="heaptrack -o OUT" agentwire bench ...
"""
import collections
import re
import subprocess
import sys
import tempfile

OURS = re.compile(r"(agentwire|quinn|h2::|hyper|tokio_rustls|rustls|tungstenite|tokio::sync|"
                  r"tokio::runtime::task|bytes::)")
NOT_OURS = re.compile(r"(^alloc::|core::ptr|^_RN)")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    with tempfile.NamedTemporaryFile(suffix=".txt") as fg:
        summary = subprocess.run(
            ["heaptrack_print", "-f", sys.argv[1], "-F", fg.name,
             "--flamegraph-cost-type", "peak"],
            check=True, capture_output=True, text=True).stdout
        sites = collections.Counter()
        total = 0
        for line in open(fg.name, encoding="utf-8", errors="replace"):
            stack, _, cost = line.rstrip().rpartition(" ")
            cost = int(cost)
            total += cost
            key = []
            for frame in reversed(stack.split(";")):
                frame = frame.split("::h")[0]
                if OURS.search(frame) and not NOT_OURS.search(frame):
                    key.append(re.sub(r"\$LT\$.*?\$GT\$", "<>", frame)[-90:])
                    if len(key) == 3:
                        break
            sites[" < ".join(key) or "(other)"] += cost
    for line in summary.splitlines():
        if line.startswith(("peak heap", "peak RSS", "total runtime", "calls to allocation")):
            print(line)
    print(f"\n| MiB at the peak | innermost frames (agentwire and transport crates) |")
    print("|--:|---|")
    for site, cost in sites.most_common(top):
        print(f"| {cost / 2**20:.1f} | `{site}` |")
    print(f"| {total / 2**20:.1f} | all |")


if __name__ == "__main__":
    main()
