"""A minimal HTTP/1.1 client on asyncio Protocols, with a keep-alive connection pool.

Why not aiohttp/httpx: they are built around awaiting each response (one coroutine per request), which
caps a Python load generator near 9k requests/s and, worse, ties the send time to earlier responses.
Here a request is written to an idle connection from a plain callback; responses are parsed by
httptools (llhttp, as in uvicorn) and reported back through the `Exchange` object. One request at a
time per connection (no pipelining); new connections are opened on demand.

Times: `sent` is when the engine starts the request (hands it to the pool), before any connection is
opened for it, so the time to open one (TCP, TLS) is part of its latency and TTFT, as in vLLM's benchmark
client (vllm/benchmarks/lib/endpoint_request_func.py takes `st = time.perf_counter()` before
`session.post`), and never part of the send lag, which measures the scheduler alone. `connect` is the
seconds spent opening connections for this request: 0 on a kept-alive connection.

An answer is bounded: more than MAX_RESPONSE_BYTES, or anything the parsers refuse, ends that request as a
protocol error and closes its connection; the per-request timeout bounds the time.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

from kfchaos.bounds import MAX_RESPONSE_BYTES
from kfchaos.errors import KfchaosError
from kfchaos.traffic.httpsyntax import encode_path
from kfchaos.traffic.sse import SseError, SseTimer

# A DNS name, IPv4 address or (urlsplit strips the brackets) IPv6 address: nothing that could break a line.
_HOST = re.compile(r"[A-Za-z0-9._:%-]{1,253}")


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    tls: bool
    base_path: str  # prefix joined before each request path ("" for a bare host)

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


def parse_target(url: str) -> Target:
    """The target of `--target URL` / spec.target.url. Errors name the flag; the URL is not echoed (it may
    carry a user:password or a query token)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:  # 'http://[::1' (unclosed bracket), a port outside 0-65535 or not a number
        raise KfchaosError(f"--target: not a valid URL ({exc})") from None
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        raise KfchaosError("--target: must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise KfchaosError("--target: credentials in the URL are not sent; use spec.target.auth")
    if not _HOST.fullmatch(host):
        raise KfchaosError("--target: the host has characters a host name or address cannot have")
    if parts.query or parts.fragment:
        raise KfchaosError("--target: give a base URL without query or fragment")
    return Target(host, port, parts.scheme == "https", encode_path(parts.path.rstrip("/")))


class Exchange:
    """One request in flight: what the engine needs to record when it ends."""

    __slots__ = (
        "body_bytes",
        "bytes_received",
        "bytes_sent",
        "complete",
        "connect",
        "connection",
        "data",
        "ended",
        "error",
        "planned",
        "retried",
        "sent",
        "sse",
        "status",
        "trace_id",
    )

    def __init__(self, planned: Any, trace_id: bytes, data: bytes, sse: SseTimer | None) -> None:
        self.planned = planned
        self.trace_id = trace_id
        self.data = data
        self.bytes_sent = len(data)
        self.sse = sse
        self.sent = 0.0
        self.connect = 0.0
        self.status = -1
        self.bytes_received = 0
        self.body_bytes = 0  # of the answer's body (bytes_received counts its head too)
        self.ended = 0.0
        self.error: str | None = None
        self.complete = False
        self.connection: Connection | None = None
        self.retried = False


class Connection(asyncio.Protocol):
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.exchange: Exchange | None = None
        self.keep_alive = True
        self.served = 0  # responses completed on this connection
        self.clock = pool.clock

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:
            self.close()  # bytes nobody asked for: the connection is not trustworthy any more
            return
        exchange.bytes_received += len(data)
        if exchange.bytes_received > MAX_RESPONSE_BYTES:
            self._fail("protocol")
            return
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, SseError):  # HttpParserUpgrade and callback errors derive from it
            self._fail("protocol")
        except Exception:  # whatever an answer does, it ends this request only, not the whole replay
            self._fail("protocol")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        exchange = self.exchange
        if exchange is not None and not exchange.complete:
            if self.served and exchange.bytes_received == 0 and not exchange.retried:
                # A reused keep-alive connection the server had already closed (its idle timeout raced our
                # write): the request never reached it, so it goes again on a fresh connection, once.
                self.exchange = None
                exchange.retried = True
                self.pool.lost(self)
                self.pool.connect_and_send(exchange)
                return
            if exchange.status >= 0 and exc is None and not self.parser.should_keep_alive():
                self._complete()  # a body delimited by the connection closing
            else:
                self._fail("connect" if exchange.status < 0 else "protocol")
        self.pool.lost(self)

    # httptools callbacks
    def on_headers_complete(self) -> None:
        if self.exchange is not None:
            self.exchange.data = b""  # answered: no resend possible any more, so free a possibly large body
            self.exchange.status = self.parser.get_status_code()
            self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        exchange.body_bytes += len(body)
        if exchange.sse is not None and exchange.status < 300:
            exchange.sse.feed(body, self.clock())

    def on_message_complete(self) -> None:
        self._complete()

    # client side
    def send(self, exchange: Exchange) -> None:
        assert self.transport is not None
        self.exchange = exchange
        exchange.connection = self
        self.transport.write(exchange.data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _complete(self) -> None:
        exchange = self.exchange
        if exchange is None or exchange.complete:
            return
        self.exchange = None
        self.served += 1
        now = self.clock()
        if exchange.sse is not None and exchange.status < 300:
            try:
                exchange.sse.finish(now)
            except SseError:
                exchange.error = "protocol"
        exchange.ended = now
        exchange.complete = True
        self.pool.finished(self, exchange)

    def _fail(self, kind: str) -> None:
        exchange = self.exchange
        self.exchange = None
        self.keep_alive = False
        if exchange is not None and not exchange.complete:
            exchange.error = kind
            exchange.ended = self.clock()
            exchange.complete = True
            self.pool.finished(self, exchange)
        self.close()


class Pool:
    """Idle keep-alive connections to one target; `done(exchange)` is called once per request."""

    def __init__(self, target: Target, loop: asyncio.AbstractEventLoop, done: Callable[[Exchange], None]) -> None:
        self.target = target
        self.loop = loop
        self.clock = time.perf_counter  # uvloop's loop.time() has only millisecond resolution
        self.done = done
        self.idle: list[Connection] = []
        self.open = 0
        self.connecting = 0
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if target.tls else None
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, exchange: Exchange) -> None:
        """Send now on an idle connection, or as soon as a new one is connected. The request's time starts now."""
        exchange.sent = self.clock()
        while self.idle:
            connection = self.idle.pop()
            if connection.transport is not None and not connection.transport.is_closing():
                connection.send(exchange)
                return
        self.connect_and_send(exchange)

    def connect_and_send(self, exchange: Exchange) -> None:
        task = self.loop.create_task(self._connect_and_send(exchange))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect_and_send(self, exchange: Exchange) -> None:
        self.connecting += 1
        began = self.clock()
        try:
            _, connection = await self.loop.create_connection(
                lambda: Connection(self), self.target.host, self.target.port, ssl=self.ssl
            )
        except (OSError, ssl.SSLError):
            if exchange.complete:
                return
            exchange.error = "connect"
            exchange.ended = self.clock()
            exchange.connect += exchange.ended - began
            exchange.bytes_sent = 0
            exchange.complete = True
            self.done(exchange)
            return
        finally:
            self.connecting -= 1
        exchange.connect += self.clock() - began
        self.open += 1
        if exchange.complete:  # timed out or cancelled while connecting
            self.idle.append(connection)
            return
        connection.send(exchange)

    async def warm(self, count: int) -> None:
        """Open `count` connections ahead of the stage, so the first requests do not pay for connecting."""
        for _ in range(count):
            try:
                _, connection = await self.loop.create_connection(
                    lambda: Connection(self), self.target.host, self.target.port, ssl=self.ssl
                )
            except OSError:
                return
            self.open += 1
            self.idle.append(connection)

    def finished(self, connection: Connection, exchange: Exchange) -> None:
        if connection.keep_alive and connection.transport is not None and not connection.transport.is_closing():
            self.idle.append(connection)
        else:
            connection.close()
        self.done(exchange)

    def lost(self, connection: Connection) -> None:
        self.open -= 1
        if connection in self.idle:
            self.idle.remove(connection)

    def expire(self, exchange: Exchange, kind: str) -> None:
        """End a request that ran out of time: its connection is closed, since a late response would confuse it."""
        connection = exchange.connection
        if connection is not None and connection.exchange is exchange:
            connection.exchange = None
            connection.keep_alive = False
            connection.close()
        exchange.error = kind
        exchange.ended = self.clock()
        exchange.complete = True
        self.done(exchange)

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()
        for task in self._tasks:
            task.cancel()
