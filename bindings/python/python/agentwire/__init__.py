"""agentwire for Python: agents over QUIC (and HTTP/2, WebSocket, Unix sockets) with
request/reply, topics, priorities and durable work queues, on agentwire's Rust core.

Every network call is a coroutine; the work runs on agentwire's own threads, so the event
loop only waits::

    import asyncio, agentwire

    async def main():
        async with agentwire.connect("quic://127.0.0.1:4433", id="boss",
                                     ca="certs/ca.pem") as agent:
            reply = await agent.request("worker-1", b"hello", timeout=5.0)
            print(reply.body, reply.sender)

    asyncio.run(main())

Failures raise the classes of :mod:`agentwire.errors`, which carry the protocol's error code.
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Iterable,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Union,
)

from . import _agentwire
from .errors import (
    AgentwireError,
    ClosedError,
    ConfigError,
    ConnectError,
    RejectedError,
    RemoteError,
    TimeoutError,
    TooLargeError,
)

__version__: str = _agentwire.__version__

__all__ = [
    "connect",
    "Agent",
    "Message",
    "Receipt",
    "Hub",
    "Body",
    "AgentwireError",
    "ConfigError",
    "ConnectError",
    "RejectedError",
    "RemoteError",
    "TimeoutError",
    "ClosedError",
    "TooLargeError",
]

#: A message body: bytes as they are, ``str`` as UTF-8.
Body = Union[bytes, bytearray, memoryview, str]
PathLike = Union[str, "os.PathLike[str]"]

PRIORITIES = ("critical", "high", "medium", "low")


def _bytes(body: Body) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    raise ConfigError(f"a body is bytes or str, not {type(body).__name__}")


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _path(name: str, value: Optional[PathLike]) -> Optional[str]:
    if value is None:
        return None
    try:
        return os.fspath(value)
    except TypeError:
        raise ConfigError(f"{name} must be a path, not {type(value).__name__}") from None


def _seconds(name: str, value: Optional[float]) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number of seconds, not {type(value).__name__}")
    return float(value)


def _priority(priority: str) -> str:
    if priority not in PRIORITIES:
        raise ConfigError(f"priority must be one of {', '.join(PRIORITIES)}, not {priority!r}")
    return priority


def _headers(headers: Optional[Dict[str, str]]) -> Optional[Dict[str, str]]:
    if headers is None:
        return None
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise ConfigError("headers must be a dict of str to str")
    return headers


class _Dispatcher:
    """One event loop's calls in flight. The native side appends finished calls to a queue and
    makes ``fd`` readable when the queue was empty; the loop then settles every finished call
    in one go. No runtime thread ever takes the interpreter lock for a result."""

    __slots__ = ("_loop", "_native", "_pending", "_next", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._native = _agentwire.Completions()
        # ticket -> (future, what to do with a result nobody waits for any more)
        self._pending: Dict[int, Any] = {}
        self._next = 0
        loop.add_reader(self._native.fd, self._settle)

    def call(self, start: Callable[[Any, int], None],
             orphan: Optional[Callable[[Any], None]] = None) -> "asyncio.Future[Any]":
        self._next += 1
        ticket = self._next
        start(self._native, ticket)
        future = self._loop.create_future()
        self._pending[ticket] = (future, orphan)
        if orphan is not None:
            native = self._native

            def cancelled(f: "asyncio.Future[Any]", ticket: int = ticket) -> None:
                if f.cancelled():
                    native.cancel(ticket)

            future.add_done_callback(cancelled)
        return future

    def _settle(self) -> None:
        pending = self._pending
        for ticket, ok, value in self._native.take():
            entry = pending.pop(ticket, None)
            if entry is None:
                continue
            future, orphan = entry
            if future.done():
                if ok and value is not None and orphan is not None:
                    orphan(value)
            elif ok:
                future.set_result(value)
            else:
                future.set_exception(value)


_dispatchers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Dispatcher]" = (
    weakref.WeakKeyDictionary()
)


def _dispatcher() -> _Dispatcher:
    loop = asyncio.get_running_loop()
    d = _dispatchers.get(loop)
    if d is None:
        d = _dispatchers[loop] = _Dispatcher(loop)
    return d


class Message:
    """A received message: a request to answer, an event, a queue task, or an answer."""

    __slots__ = ("_native",)

    def __init__(self, native: "_agentwire.NativeMessage") -> None:
        self._native = native

    @property
    def id(self) -> int:
        """The sender's id for it (for a queue task: the task id to ack)."""
        return self._native.id

    @property
    def sender(self) -> str:
        """The agent that sent it (``$hub`` for the hub's own messages)."""
        return self._native.sender

    @property
    def to(self) -> str:
        """Where it was sent: ``agent:ID``, ``topic:NAME``, ``queue:NAME`` or ``*``."""
        return self._native.to

    @property
    def kind(self) -> str:
        """``request``, ``response``, ``event``, ``task``, ``error``..."""
        return self._native.kind

    @property
    def priority(self) -> str:
        """``critical``, ``high``, ``medium`` or ``low``."""
        return self._native.priority

    @property
    def correlation(self) -> Optional[int]:
        """For an answer: the id of the request it answers."""
        return self._native.correlation

    @property
    def headers(self) -> Dict[str, str]:
        """Its headers."""
        return self._native.headers

    @property
    def body(self) -> bytes:
        """Its bytes."""
        return self._native.body

    @property
    def text(self) -> str:
        """Its body as UTF-8 text."""
        return self._native.body.decode("utf-8")

    def json(self) -> Any:
        """Its body parsed as JSON."""
        return json.loads(self._native.body)

    @property
    def queue(self) -> Optional[str]:
        """For a queue task: its queue."""
        return self._native.queue

    @property
    def attempt(self) -> Optional[int]:
        """For a queue task: 1 for the first delivery, more for redeliveries."""
        return self._native.attempt

    @property
    def is_request(self) -> bool:
        """Whether it expects :meth:`reply`."""
        return self._native.kind == "request"

    async def reply(self, body: Body) -> None:
        """Answers this request with ``body`` (at the request's priority)."""
        body = _bytes(body)
        await _dispatcher().call(lambda c, t: self._native.reply(c, t, body))

    def __repr__(self) -> str:
        return (
            f"Message(kind={self.kind!r}, sender={self.sender!r}, to={self.to!r}, "
            f"id={self.id}, body={len(self.body)} bytes)"
        )


class Receipt(NamedTuple):
    """The hub's word that it stored a task: its id, and whether it was a duplicate."""

    task: int
    duplicate: bool


class Agent:
    """A connected agent. Get one with :func:`connect`; use it from any number of tasks."""

    def __init__(self, native: "_agentwire.NativeAgent") -> None:
        self._native = native

    @property
    def id(self) -> str:
        """This agent's id."""
        return self._native.id

    @property
    def transport(self) -> str:
        """The transport in use: ``quic``, ``http2``, ``websocket`` or ``unix``."""
        return self._native.transport

    async def send(
        self,
        to: str,
        body: Body,
        *,
        priority: str = "medium",
        kind: str = "event",
        headers: Optional[Dict[str, str]] = None,
    ) -> int:
        """Sends ``body`` to ``to`` (an agent id, ``topic:NAME``, ``queue:NAME`` or ``*``) and
        returns its id once it is queued for the network."""
        args = (_text("to", to), _bytes(body), _text("kind", kind), _priority(priority),
                _headers(headers))
        return await _dispatcher().call(lambda c, t: self._native.send(c, t, *args))

    async def request(
        self,
        to: str,
        body: Body,
        *,
        timeout: float = 5.0,
        priority: str = "medium",
        headers: Optional[Dict[str, str]] = None,
    ) -> Message:
        """Sends a request to agent ``to`` and returns its answer; raises
        :class:`TimeoutError` after ``timeout`` seconds and :class:`RemoteError` (with the
        code) if the hub or the peer answers with an error."""
        args = (_text("to", to), _bytes(body), _seconds("timeout", timeout),
                _priority(priority), _headers(headers))
        native = await _dispatcher().call(lambda c, t: self._native.request(c, t, *args))
        return Message(native)

    async def recv(self) -> Optional[Message]:
        """The next received message, or ``None`` once the connection has ended."""
        agent = self._native
        native = await _dispatcher().call(agent.recv, agent.unrecv)
        return None if native is None else Message(native)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        message = await self.recv()
        if message is None:
            raise StopAsyncIteration
        return message

    async def subscribe(self, topic: str) -> None:
        """Receives what is published to ``topic`` from now on (``$presence``: joins and
        leaves)."""
        topic = _text("topic", topic)
        await _dispatcher().call(lambda c, t: self._native.subscribe(c, t, topic))

    async def unsubscribe(self, topic: str) -> None:
        """Stops receiving ``topic``."""
        topic = _text("topic", topic)
        await _dispatcher().call(lambda c, t: self._native.unsubscribe(c, t, topic))

    async def publish(self, topic: str, body: Body) -> int:
        """Sends ``body`` as an event to every subscriber of ``topic``; returns its id."""
        args = (_text("topic", topic), _bytes(body))
        return await _dispatcher().call(lambda c, t: self._native.publish(c, t, *args))

    async def publish_many(self, topic: str, bodies: Iterable[Body]) -> List[int]:
        """Publishes every body as an event to ``topic``, queued in one step so that the
        transport writes them together (several to a QUIC stream); returns their ids in
        order. Nothing is sent when one body is over the hub's frame limit."""
        topic = _text("topic", topic)
        if isinstance(bodies, (str, bytes, bytearray, memoryview)):
            raise ConfigError("bodies is a list of bodies, not one body")
        bodies = [_bytes(b) for b in bodies]
        return await _dispatcher().call(
            lambda c, t: self._native.publish_many(c, t, topic, bodies))

    async def enqueue(
        self,
        queue: str,
        body: Body,
        *,
        producer_id: Optional[str] = None,
        timeout: float = 10.0,
    ) -> Receipt:
        """Stores a task in the work queue ``queue`` and returns once the hub has stored it.
        A ``producer_id`` seen before (within the queue's duplicate window) is stored once."""
        args = (_text("queue", queue), _bytes(body), _seconds("timeout", timeout),
                None if producer_id is None else _text("producer_id", producer_id))
        task, duplicate = await _dispatcher().call(
            lambda c, t: self._native.enqueue(c, t, *args))
        return Receipt(task, duplicate)

    async def consume(self, queue: str, *, credit: int = 1) -> None:
        """Takes tasks from ``queue``, ``credit`` at a time; they arrive as messages of kind
        ``task`` (``message.queue`` set). Ack each with :meth:`ack`."""
        if isinstance(credit, bool) or not isinstance(credit, int) or not 0 < credit < 2**32:
            raise ConfigError(f"credit must be a positive int, not {credit!r}")
        queue = _text("queue", queue)
        await _dispatcher().call(lambda c, t: self._native.consume(c, t, queue, credit))

    async def stop_consuming(self, queue: str) -> None:
        """Takes no more tasks from ``queue`` (those held stay held until acked)."""
        queue = _text("queue", queue)
        await _dispatcher().call(lambda c, t: self._native.stop_consuming(c, t, queue))

    async def ack(self, task: Union[int, Message]) -> None:
        """Marks a task done: it is never delivered again."""
        task_id = task.id if isinstance(task, Message) else task
        await _dispatcher().call(lambda c, t: self._native.ack(c, t, task_id))

    async def nack(self, task: Union[int, Message], *, delay: Optional[float] = None) -> None:
        """Gives a task back, to be delivered again after ``delay`` seconds (the queue's
        backoff when ``None``)."""
        task_id = task.id if isinstance(task, Message) else task
        seconds = _seconds("delay", delay)
        await _dispatcher().call(lambda c, t: self._native.nack(c, t, task_id, seconds))

    async def queue_stats(self, queue: str, *, timeout: float = 5.0) -> Dict[str, Any]:
        """A queue's counts: ``ready``, ``in_flight``, ``dead``, ``consumers``..."""
        args = (_text("queue", queue), _seconds("timeout", timeout))
        text = await _dispatcher().call(lambda c, t: self._native.queue_stats(c, t, *args))
        return json.loads(text)

    def stats(self) -> Dict[str, Any]:
        """Counters: messages sent and received, and the connection's (RTT, bytes, lost
        packets for QUIC...)."""
        return json.loads(self._native.stats_json())

    @property
    def closed_reason(self) -> Optional[str]:
        """Why the connection ended, or ``None`` while it is open."""
        return self._native.closed_reason()

    async def close(self) -> None:
        """Says goodbye to the hub and closes the connection."""
        await _dispatcher().call(self._native.close)

    async def __aenter__(self) -> "Agent":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Agent(id={self.id!r}, transport={self.transport!r})"


class _Connecting(Awaitable[Agent]):
    """What :func:`connect` returns: await it for an :class:`Agent`, or use it in
    ``async with`` to close the agent at the end."""

    def __init__(self, hubs: List[str], id: str, options: Dict[str, Any]) -> None:
        self._args = (hubs, id)
        self._options = options
        self._agent: Optional[Agent] = None

    async def _connect(self) -> Agent:
        hubs, id = self._args
        options = self._options
        native = await _dispatcher().call(lambda c, t: c.connect(t, hubs, id, **options))
        self._agent = Agent(native)
        return self._agent

    def __await__(self) -> Generator[Any, None, Agent]:
        return self._connect().__await__()

    async def __aenter__(self) -> Agent:
        return await self._connect()

    async def __aexit__(self, *exc: Any) -> None:
        if self._agent is not None:
            await self._agent.close()


def connect(
    hub: Union[str, Sequence[str]],
    *,
    id: str,
    ca: Optional[PathLike] = None,
    ca_pem: Optional[str] = None,
    pin: Optional[str] = None,
    insecure: bool = False,
    token: Optional[str] = None,
    cert: Optional[PathLike] = None,
    key: Optional[PathLike] = None,
    role: Optional[str] = None,
    server_name: Optional[str] = None,
    connect_timeout: float = 10.0,
    fallback_timeout: float = 2.0,
    codecs: Optional[List[str]] = None,
) -> _Connecting:
    """Connects an agent called ``id`` to a hub.

    ``hub`` is an address (``quic://HOST:PORT``, ``h2://``, ``wss://``, ``ws://``,
    ``unix:///PATH``, ``auto://HOST:PORT``) or a list of them, tried in order
    (``fallback_timeout`` seconds each). Trust the hub with ``ca`` (its CA's PEM file),
    ``ca_pem`` (the same as text), ``pin`` (``sha256:HEX``) or, for tests only,
    ``insecure=True``. ``token`` is the hub's or the agent's credential; ``cert``/``key`` the
    agent's certificate for hubs that require one (mutual TLS).
    """
    hubs = [hub] if isinstance(hub, str) else list(hub)
    for h in hubs:
        _text("hub", h)
    return _Connecting(
        hubs,
        _text("id", id),
        dict(
            ca=_path("ca", ca),
            ca_pem=ca_pem,
            pin=pin,
            insecure=bool(insecure),
            token=token,
            cert=_path("cert", cert),
            key=_path("key", key),
            role=role,
            server_name=server_name,
            connect_timeout=_seconds("connect_timeout", connect_timeout),
            fallback_timeout=_seconds("fallback_timeout", fallback_timeout),
            codecs=list(codecs or []),
        ),
    )


class Hub:
    """A hub running inside this process (tests, demos, or an application with its own hub).

    ::

        hub = await agentwire.Hub.start()            # QUIC on a free loopback port
        agent = await agentwire.connect(hub.url, id="a", pin=hub.pin)
    """

    def __init__(self, native: "_agentwire.NativeHub") -> None:
        self._native = native

    @classmethod
    async def start(
        cls,
        listen: Union[str, Sequence[str]] = ("quic://127.0.0.1:0",),
        *,
        cert_dir: Optional[PathLike] = None,
        token: Optional[str] = None,
        store: Optional[PathLike] = None,
    ) -> "Hub":
        """Listens on every address in ``listen`` (port 0 picks one). Without ``cert_dir``
        (``hub.pem``/``hub.key``) it makes its own CA and certificate; agents then trust it
        with ``pin=hub.pin`` or ``ca_pem=hub.ca_pem``. ``store``: keep work queues in that
        directory."""
        addresses = [listen] if isinstance(listen, str) else list(listen)
        args = ([_text("listen", a) for a in addresses], _path("cert_dir", cert_dir), token,
                _path("store", store))
        native = await _dispatcher().call(lambda c, t: c.start_hub(t, *args))
        return cls(native)

    @property
    def urls(self) -> List[str]:
        """The addresses agents use, with the ports chosen."""
        return self._native.urls

    @property
    def url(self) -> str:
        """The first address."""
        return self._native.urls[0]

    @property
    def pin(self) -> str:
        """The hub's public-key pin (``sha256:HEX``), for ``connect(pin=...)``."""
        return self._native.pin

    @property
    def ca_pem(self) -> Optional[str]:
        """The CA it made for itself (PEM), for ``connect(ca_pem=...)``."""
        return self._native.ca_pem

    def agent_count(self) -> int:
        """Agents connected now."""
        return self._native.agent_count()

    def close(self) -> None:
        """Stops the hub: closes every agent's connection."""
        self._native.close()

    async def __aenter__(self) -> "Hub":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
