#!/usr/bin/env python3
"""Runs a command and reports the peak kernel memory held by TCP and UDP sockets meanwhile.

Usage:
    python3 scripts/sockstat_peak.py [--interval-ms N] -- COMMAND [ARGS...]

Samples /proc/net/sockstat (host-wide: every socket of every process, in pages) every
--interval-ms (default 100) until COMMAND exits, then prints one JSON line with the peaks in
bytes and COMMAND's exit status, and exits with that status. Loopback TCP keeps a message that
is on its way in socket buffers, in the kernel; QUIC keeps it in the processes' own memory.
This puts a number on the first, to read beside the processes' peak RSS.
"""

import json
import os
import subprocess
import sys
import time


def sample():
    """{"TCP": bytes, "UDP": bytes} from the 'mem' fields of /proc/net/sockstat."""
    page = os.sysconf("SC_PAGE_SIZE")
    out = {}
    with open("/proc/net/sockstat") as f:
        for line in f:
            proto, _, rest = line.partition(":")
            fields = rest.split()
            if proto in ("TCP", "UDP") and "mem" in fields:
                out[proto] = int(fields[fields.index("mem") + 1]) * page
    return out


def main():
    args = sys.argv[1:]
    interval = 0.1
    if args[:1] == ["--interval-ms"] and len(args) > 1:
        interval = int(args[1]) / 1000
        args = args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.exit(__doc__)
    peak = {"TCP": 0, "UDP": 0}
    child = subprocess.Popen(args)
    while child.poll() is None:
        for proto, used in sample().items():
            peak[proto] = max(peak[proto], used)
        time.sleep(interval)
    print(json.dumps({"peak_tcp_socket_bytes": peak["TCP"], "peak_udp_socket_bytes": peak["UDP"],
                      "command": args, "status": child.returncode}))
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
