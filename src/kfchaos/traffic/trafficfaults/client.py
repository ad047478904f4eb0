"""The client side of a client-abort-storm fault: streams the client closes mid-generation, and slow readers.

Only fault requests come here (`TrafficRequest.client` is set, kfchaos.traffic.trafficfaults); for every other
request the engine pays one `is None` test.

- Abort: the connection is closed after `abort_after_tokens` token chunks have arrived (counted by the SSE
  parser as they come) or `abort_after_s` seconds after the request was started. The record's error is
  `client_abort`: designed by the fault, not a failure of the target. The server sees the TCP connection close,
  as when a gateway times out or a user closes the tab; vLLM's OpenAI server then aborts the request
  (vllm/entrypoints/utils.py `with_cancellation`/`listen_for_disconnect`, and vllm/v1/engine/async_llm.py
  `generate()`, whose `except (asyncio.CancelledError, GeneratorExit)` calls `self.abort(...)`).
- Slow reader: a fresh connection (never a pooled one, and never returned to the pool) whose socket has a
  small receive buffer (SO_RCVBUF set before connecting, so the advertised TCP window stays small) and which
  stops reading after each chunk for len(chunk) / read_rate seconds. The server's writes back up: uvicorn's
  `send()` awaits `flow.drain()` while the transport is paused (uvicorn/protocols/http/httptools_impl.py),
  aiohttp's `StreamResponse.write` drains likewise. The request timeout bounds how long it lasts.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable

from kfchaos.traffic.http1 import Connection, Exchange, Pool
from kfchaos.traffic.request import ClientBehaviour
from kfchaos.traffic.sse import SseTimer

CLIENT_ABORT = "client_abort"  # the records' error kind (kfchaos.records.ERROR_KINDS)
SLOW_RCVBUF = 4096  # bytes; Linux doubles it and keeps a minimum, so the window is a few KiB


class AbortingTimer(SseTimer):
    """An SSE timer that calls `on_limit` once, when `limit` token chunks have arrived."""

    __slots__ = ("limit", "on_limit")

    def __init__(self, limit: int, on_limit: Callable[[], None]) -> None:
        super().__init__()
        self.limit = limit
        self.on_limit: Callable[[], None] | None = on_limit

    def feed(self, data: bytes, now: float) -> None:
        super().feed(data, now)
        if self.chunks >= self.limit and self.on_limit is not None:
            on_limit, self.on_limit = self.on_limit, None
            on_limit()

    def finish(self, now: float) -> None:
        # The response is complete: it ended before the client's abort, which then must not record it twice.
        self.on_limit = None
        super().finish(now)


def _abort(pool: Pool, exchange: Exchange) -> None:
    if not exchange.complete:
        pool.expire(exchange, CLIENT_ABORT)  # closes the connection (transport.abort: the server sees it go)


def submit(pool: Pool, exchange: Exchange, client: ClientBehaviour) -> None:
    """Start a fault request with its client behaviour (instead of `pool.submit`)."""
    if client.abort_after_tokens is not None and exchange.sse is not None:
        exchange.sse = AbortingTimer(client.abort_after_tokens, lambda: _abort(pool, exchange))
    if client.abort_after_s is not None:
        pool.loop.call_later(client.abort_after_s, _abort, pool, exchange)
    if client.read_rate is not None:
        exchange.sent = pool.clock()
        task = pool.loop.create_task(_connect_slow(pool, exchange, client.read_rate))
        pool._tasks.add(task)
        task.add_done_callback(pool._tasks.discard)
        return
    pool.submit(exchange)


class SlowReader(Connection):
    """A connection that reads at most `rate` bytes/s: after each chunk it stops reading for len/rate seconds."""

    def __init__(self, pool: Pool, rate: float) -> None:
        super().__init__(pool)
        self.rate = rate
        self.keep_alive = False
        self._resume: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.pause_reading()
            self._resume = self.pool.loop.call_later(len(data) / self.rate, self._read_again)

    def _read_again(self) -> None:
        self._resume = None
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self.keep_alive = False  # never handed back to the pool: a normal request must not inherit the small buffer

    def connection_lost(self, exc: Exception | None) -> None:
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        super().connection_lost(exc)


async def _connect_slow(pool: Pool, exchange: Exchange, rate: float) -> None:
    target = pool.target
    loop = pool.loop
    began = pool.clock()
    sock: socket.socket | None = None
    try:
        infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_RCVBUF)
        sock.setblocking(False)
        await loop.sock_connect(sock, address)
        _, connection = await loop.create_connection(
            lambda: SlowReader(pool, rate),
            sock=sock,
            ssl=pool.ssl,
            server_hostname=target.host if pool.ssl is not None else None,
        )
    except (OSError, ssl.SSLError, IndexError):
        if sock is not None:
            sock.close()
        if exchange.complete:
            return
        exchange.error = "connect"
        exchange.ended = pool.clock()
        exchange.connect += exchange.ended - began
        exchange.bytes_sent = 0
        exchange.complete = True
        pool.done(exchange)
        return
    exchange.connect += pool.clock() - began
    pool.open += 1
    if exchange.complete:  # timed out, aborted or cancelled while connecting
        connection.close()
        return
    connection.send(exchange)
