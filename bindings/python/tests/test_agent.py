"""The Python API against a real hub on loopback (agentwire.Hub: the Rust hub in this
process, real QUIC, HTTP/2, WebSocket and Unix sockets). Each test runs its own event loop."""

import asyncio
import os
import tempfile

import pytest

import agentwire
from agentwire import errors


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


async def echo(agent: agentwire.Agent) -> None:
    async for msg in agent:
        if msg.is_request:
            await msg.reply(msg.body)


def test_request_reply_over_every_transport():
    async def main():
        with tempfile.TemporaryDirectory() as tmp:
            sock = os.path.join(tmp, "hub.sock")
            listen = ["quic://127.0.0.1:0", "h2://127.0.0.1:0", "wss://127.0.0.1:0",
                      f"unix://{sock}"]
            async with await agentwire.Hub.start(listen) as hub:
                assert len(hub.urls) == 4
                worker = await agentwire.connect(hub.url, id="worker", pin=hub.pin)
                serving = asyncio.ensure_future(echo(worker))
                for url in hub.urls:
                    async with agentwire.connect(url, id="boss", ca_pem=hub.ca_pem) as boss:
                        reply = await boss.request("worker", b"ping", timeout=5.0,
                                                   headers={"trace": "t1"})
                        assert reply.body == b"ping"
                        assert reply.sender == "worker"
                        assert reply.kind == "response"
                        assert reply.text == "ping"
                        assert boss.transport in url.split(":")[0] or boss.transport in (
                            "http2", "websocket")
                await worker.close()
                serving.cancel()

    run(main())


def test_two_thousand_concurrent_requests_complete_without_error():
    async def main():
        async with await agentwire.Hub.start() as hub:
            workers = [await agentwire.connect(hub.url, id=f"w{i}", pin=hub.pin)
                       for i in range(4)]
            serving = [asyncio.ensure_future(echo(w)) for w in workers]
            async with agentwire.connect(hub.url, id="boss", pin=hub.pin) as boss:
                bodies = [f"task-{i}".encode() * 64 for i in range(2000)]
                replies = await asyncio.gather(
                    *(boss.request(f"w{i % 4}", b, timeout=30.0) for i, b in enumerate(bodies))
                )
                assert [r.body for r in replies] == bodies
                assert boss.stats()["messages_sent"] >= 2000
            for s in serving:
                s.cancel()

    run(main())


def test_topics_events_and_priorities():
    async def main():
        async with await agentwire.Hub.start() as hub:
            async with agentwire.connect(hub.url, id="listener", pin=hub.pin) as listener, \
                    agentwire.connect(hub.url, id="speaker", pin=hub.pin) as speaker:
                await listener.subscribe("news")
                await asyncio.sleep(0.1)
                await speaker.publish("news", "hello")
                msg = await listener.recv()
                assert (msg.kind, msg.to, msg.body) == ("event", "topic:news", b"hello")
                await speaker.send("listener", b"direct", priority="critical",
                                   headers={"a": "b"})
                msg = await listener.recv()
                assert (msg.priority, msg.headers, msg.sender) == ("critical", {"a": "b"},
                                                                  "speaker")
                with pytest.raises(errors.ConfigError):
                    await msg.reply(b"not a request")

    run(main())


def test_publish_many_delivers_every_body_or_none():
    async def main():
        async with await agentwire.Hub.start() as hub:
            async with agentwire.connect(hub.url, id="listener", pin=hub.pin) as listener, \
                    agentwire.connect(hub.url, id="speaker", pin=hub.pin) as speaker:
                await listener.subscribe("news")
                await asyncio.sleep(0.1)
                bodies = [f"n{i}" for i in range(50)]
                ids = await speaker.publish_many("news", bodies)
                assert len(ids) == 50 and len(set(ids)) == 50
                got = {}
                while len(got) < 50:
                    msg = await asyncio.wait_for(listener.recv(), timeout=5)
                    got[msg.id] = msg.text
                assert got == dict(zip(ids, bodies))
                # One body over the frame limit: an error, and none of the batch is sent.
                with pytest.raises(errors.TooLargeError):
                    await speaker.publish_many("news", [b"small", b"x" * (17 << 20)])
                with pytest.raises(errors.ConfigError):
                    await speaker.publish_many("news", "one body, not a list")
                assert await speaker.publish_many("news", []) == []
                await speaker.publish("news", "after")
                msg = await asyncio.wait_for(listener.recv(), timeout=5)
                assert msg.text == "after"

    run(main())


def test_durable_queue_enqueue_consume_ack_nack():
    async def main():
        with tempfile.TemporaryDirectory() as store:
            async with await agentwire.Hub.start(store=store) as hub:
                async with agentwire.connect(hub.url, id="boss", pin=hub.pin) as boss, \
                        agentwire.connect(hub.url, id="worker", pin=hub.pin) as worker:
                    first = await boss.enqueue("jobs", b"t1", producer_id="p1")
                    again = await boss.enqueue("jobs", b"t1", producer_id="p1")
                    assert again == agentwire.Receipt(first.task, True)
                    await boss.enqueue("jobs", b"t2")
                    await worker.consume("jobs", credit=2)
                    got = [await worker.recv(), await worker.recv()]
                    assert sorted(m.body for m in got) == [b"t1", b"t2"]
                    assert all(m.queue == "jobs" and m.attempt == 1 for m in got)
                    await worker.ack(got[0])
                    await worker.nack(got[1], delay=0.0)
                    redelivered = await worker.recv()
                    assert (redelivered.body, redelivered.attempt) == (got[1].body, 2)
                    await worker.ack(redelivered.id)
                    await worker.stop_consuming("jobs")
                    # The stop travels like any frame: wait until the hub has taken it.
                    for _ in range(100):
                        if (await boss.queue_stats("jobs"))["consumers"] == 0:
                            break
                        await asyncio.sleep(0.02)
                    await boss.enqueue("jobs", b"t3")
                    with pytest.raises(asyncio.TimeoutError):
                        await asyncio.wait_for(worker.recv(), timeout=0.3)
                    stats = await boss.queue_stats("jobs")
                    for _ in range(50):
                        if stats["in_flight"] == 0:
                            break
                        await asyncio.sleep(0.05)
                        stats = await boss.queue_stats("jobs")
                    assert stats["ready"] == 1 and stats["in_flight"] == 0  # t3 waits

    run(main())


def test_errors_are_typed_and_carry_the_protocol_code():
    async def main():
        async with await agentwire.Hub.start(token="s3cret") as hub:
            with pytest.raises(errors.RejectedError) as rejected:
                await agentwire.connect(hub.url, id="a", pin=hub.pin, token="wrong")
            assert rejected.value.code_name == "unauthorized"
            assert isinstance(rejected.value.code, int)
            async with agentwire.connect(hub.url, id="a", pin=hub.pin, token="s3cret") as a:
                with pytest.raises(errors.RemoteError) as remote:
                    await a.request("nobody", b"x", timeout=5.0)
                assert remote.value.code_name == "unknown-agent"
                async with agentwire.connect(hub.url, id="slow", pin=hub.pin,
                                             token="s3cret") as _slow:
                    with pytest.raises(errors.TimeoutError) as timed_out:
                        await a.request("slow", b"x", timeout=0.2)
                    assert isinstance(timed_out.value, TimeoutError)  # the builtin too
            # The hub's key does not match the pin: a connect error, not a crash.
            with pytest.raises(errors.ConnectError):
                await agentwire.connect(hub.url, id="b", pin="sha256:" + "00" * 32,
                                        token="s3cret")
        # Nothing listening.
        with pytest.raises((errors.ConnectError, errors.TimeoutError)):
            await agentwire.connect("quic://127.0.0.1:9", id="c", insecure=True,
                                    connect_timeout=1.0)

    run(main())


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(id="x"), "say how to verify the hub"),
        (dict(id="", insecure=True), "id"),
        (dict(id="x", pin="sha256:zz"), "pin"),
        (dict(id="x", pin="sha256:" + "00" * 32, insecure=True), "one way"),
        (dict(id="x", ca="/nonexistent/ca.pem"), "/nonexistent/ca.pem"),
        (dict(id="x", insecure=True, connect_timeout=-1), "timeout"),
        (dict(id="x", insecure=True, codecs=["xml"]), "xml"),
        (dict(id=7, insecure=True), "id must be a str"),
    ],
)
def test_bad_arguments_raise_config_errors(kwargs, needle):
    async def main():
        with pytest.raises(errors.ConfigError) as bad:
            await agentwire.connect("quic://127.0.0.1:1", **kwargs)
        assert needle in str(bad.value)

    run(main())


def test_bad_calls_on_a_connected_agent_raise_config_errors():
    async def main():
        async with await agentwire.Hub.start() as hub:
            async with agentwire.connect(hub.url, id="a", pin=hub.pin) as a:
                with pytest.raises(errors.ConfigError):
                    await a.send("b", 12)
                with pytest.raises(errors.ConfigError):
                    await a.send("b", b"x", priority="urgent")
                with pytest.raises(errors.ConfigError):
                    await a.send("b", b"x", kind="gossip")
                with pytest.raises(errors.ConfigError):
                    await a.request("topic:news", b"x")
                with pytest.raises(errors.ConfigError):
                    await a.request("b", b"x", timeout=float("nan"))
                with pytest.raises(errors.ConfigError):
                    await a.consume("jobs", credit=0)
                with pytest.raises(errors.ConfigError):
                    await a.subscribe("")
                # The agent still works after all of that.
                await a.subscribe("ok")

    run(main())


def test_closed_agent_raises_closed_error_and_iteration_ends():
    async def main():
        async with await agentwire.Hub.start() as hub:
            a = await agentwire.connect(hub.url, id="a", pin=hub.pin)
            await a.close()
            with pytest.raises(errors.ClosedError):
                await a.send("b", b"x")
            assert [m async for m in a] == []
            assert a.closed_reason is not None

    run(main())


def test_a_cancelled_recv_loses_no_message():
    async def main():
        async with await agentwire.Hub.start() as hub:
            async with agentwire.connect(hub.url, id="a", pin=hub.pin) as a, \
                    agentwire.connect(hub.url, id="b", pin=hub.pin) as b:
                got = []
                for i in range(20):
                    # A wait that times out, then one cancelled at once: either may be the
                    # one a message was on its way to.
                    try:
                        got.append((await asyncio.wait_for(a.recv(), timeout=0.01)).text)
                    except asyncio.TimeoutError:
                        pass
                    await b.send("a", f"m{i}")
                    waiter = asyncio.ensure_future(a.recv())
                    await asyncio.sleep(0)
                    waiter.cancel()
                    await asyncio.sleep(0)
                    if waiter.done() and not waiter.cancelled():
                        got.append(waiter.result().text)
                while len(got) < 20:
                    got.append((await asyncio.wait_for(a.recv(), timeout=5)).text)
                # Each message went alone, on a QUIC stream of its own, and a message given
                # back by a cancelled recv may come after one received later: nothing orders
                # them. Every one arrives, once.
                assert sorted(got) == sorted(f"m{i}" for i in range(20))

    run(main())
