"""A coordinator in Python that hands tasks to workers written in TypeScript and Rust.

usage: python coordinator.py HUB_URL CA_PEM TASKS

It asks each worker who it is (request/reply), puts TASKS tasks in the durable work queue
`jobs` (the workers compete for them), and collects one result per task from the workers'
messages. Run by run.sh, which starts the hub and the workers first."""

import asyncio
import json
import sys

import agentwire


async def main(hub: str, ca: str, tasks: int) -> None:
    async with agentwire.connect(hub, id="coordinator", ca=ca) as me:
        for worker in ("worker-ts", "worker-rust"):
            reply = await me.request(worker, b"who are you?", timeout=5.0)
            print(f"{worker} says: {reply.text}")
        for n in range(1, tasks + 1):
            await me.enqueue("jobs", json.dumps({"n": n}), producer_id=f"job-{n}")
        print(f"enqueued {tasks} tasks on queue jobs")
        done = {}
        async for msg in me:
            if msg.kind == "event" and msg.headers.get("result") == "square":
                result = msg.json()
                done[result["n"]] = (result["square"], msg.sender)
                if len(done) == tasks:
                    break
        by_worker = {}
        for n, (square, worker) in sorted(done.items()):
            assert square == n * n, (n, square)
            by_worker[worker] = by_worker.get(worker, 0) + 1
        print(f"{len(done)} results, all correct; done by: "
              + ", ".join(f"{w} {c}" for w, c in sorted(by_worker.items())))
        for worker in ("worker-ts", "worker-rust"):
            await me.send(worker, b"stop")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
