"""Every call of the Python API once, against a hub started in this process; the README's
Python section shows this script's output.

usage: python bindings/python/examples/tour.py"""

import asyncio
import tempfile

import agentwire


async def main() -> None:
    store = tempfile.mkdtemp()
    async with await agentwire.Hub.start(["quic://127.0.0.1:0"], store=store) as hub:
        print("hub:", hub.url, "pin", hub.pin[:19] + "...")

        # connect: await it, or use it in `async with` (closes the agent at the end)
        worker = await agentwire.connect(hub.url, id="worker", pin=hub.pin)
        print("connected:", worker, "agents at the hub:", hub.agent_count())

        async def serve() -> None:  # `async for`: every message until the connection ends
            async for msg in worker:
                if msg.is_request:
                    await msg.reply(msg.body.upper())
                elif msg.queue is not None:
                    print(f"worker got task {msg.id} from {msg.queue}: {msg.text!r}, "
                          f"attempt {msg.attempt}")
                    await worker.ack(msg)
                else:
                    print(f"worker got {msg.kind} from {msg.sender} to {msg.to}: {msg.text!r}")

        serving = asyncio.ensure_future(serve())
        async with agentwire.connect(hub.url, id="boss", ca_pem=hub.ca_pem) as boss:
            reply = await boss.request("worker", b"hello", timeout=5.0,
                                       headers={"trace": "t-1"})
            print("request ->", reply.body, "from", reply.sender, "kind", reply.kind)

            print("send -> message id", await boss.send("worker", "fyi", priority="high"))

            await worker.subscribe("news")
            await asyncio.sleep(0.1)
            print("publish -> message id", await boss.publish("news", "it rained"))
            await asyncio.sleep(0.1)
            await worker.unsubscribe("news")

            receipt = await boss.enqueue("jobs", "resize img-7", producer_id="job-7")
            print("enqueue ->", receipt)
            print("enqueue again ->", await boss.enqueue("jobs", "resize img-7",
                                                          producer_id="job-7"))
            await worker.consume("jobs", credit=2)
            await asyncio.sleep(0.2)
            await worker.stop_consuming("jobs")
            print("queue_stats ->", await boss.queue_stats("jobs"))

            try:
                await boss.request("nobody", b"?", timeout=2.0)
            except agentwire.RemoteError as e:
                print(f"RemoteError: code {e.code} ({e.code_name}): {e}")
            stats = boss.stats()
            print("stats -> sent", stats["messages_sent"], "received",
                  stats["messages_received"], "rtt_us", stats["connection"]["rtt_us"])
        await worker.close()
        await serving
        print("closed:", worker.closed_reason)


asyncio.run(main())
