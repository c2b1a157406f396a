"""The Python client of scripts/sdk-bench.sh: the same closed loop as the Rust client
(crates/bench/examples/request_client.rs), through the agentwire Python API.

usage: request_client.py HUB_URL CA_PEM AGENTS WINDOW SIZE SECONDS WARMUP_SECONDS TARGETS

Prints one JSON line: requests, errors, msg/s, latency percentiles (µs), and this process's
CPU seconds (and µs of CPU per request) over the measured part."""

import asyncio
import json
import sys
import time

import agentwire


def percentile(sorted_values, p):
    if not sorted_values:
        return 0
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


async def main(argv):
    if len(argv) != 9:
        raise SystemExit(__doc__)
    hub, ca = argv[1], argv[2]
    agents, window, size, seconds, warmup, targets = (int(v) for v in argv[3:9])
    clients = [await agentwire.connect(hub, id=f"python-client-{a}", ca=ca,
                                       connect_timeout=30.0)
               for a in range(agents)]
    body = b"x" * size
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from, stop = start + warmup, start + warmup + seconds
    latencies = []
    counts = {"errors": 0}

    async def run(agent, target):
        while loop.time() < stop:
            t0 = loop.time()
            try:
                await agent.request(target, body, timeout=10.0)
                ok = True
            except agentwire.AgentwireError:
                ok = False
            t1 = loop.time()
            if t0 >= measure_from and t1 <= stop:
                if ok:
                    latencies.append(int((t1 - t0) * 1e6))
                else:
                    counts["errors"] += 1

    loops = [asyncio.ensure_future(run(c, f"echo-{(a * window + w) % targets}"))
             for a, c in enumerate(clients) for w in range(window)]
    await asyncio.sleep(max(0.0, measure_from - loop.time()))
    cpu0 = time.process_time()
    await asyncio.sleep(max(0.0, stop - loop.time()))
    cpu = time.process_time() - cpu0
    await asyncio.gather(*loops)
    latencies.sort()
    requests = len(latencies)
    print(json.dumps({
        "client": "python", "agents": agents, "window": window, "size": size,
        "seconds": seconds, "requests": requests, "errors": counts["errors"],
        "msg_per_s": requests / seconds,
        "p50_us": percentile(latencies, 50), "p90_us": percentile(latencies, 90),
        "p99_us": percentile(latencies, 99),
        "cpu_s": cpu, "cpu_us_per_msg": cpu * 1e6 / requests if requests else 0.0,
    }), flush=True)
    for c in clients:
        await c.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
