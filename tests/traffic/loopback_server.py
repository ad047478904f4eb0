"""A real HTTP/1.1 server on 127.0.0.1 for the replay tests, run in its own thread and event loop.

It records every request it receives (arrival time on the epoch clock, method, path, headers, body)
and answers by path:
  /slow/<ms>                 200 after a delay
  /fail                      500
  /missing                   404
  /drop                      closes the connection without answering
  /v1/completions, /v1/chat/completions   an SSE stream: TOKENS chunks GAP_MS apart, usage, [DONE]
  anything else              200 with a short body
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Seen:
    at: float
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LoopbackServer:
    tokens: int = 5
    gap_ms: float = 5.0
    truncate: bool = False  # end streams without usage and [DONE]
    drop_reused: bool = False  # close a connection, unanswered, when a second request arrives on it
    usage: dict[str, Any] | None = None  # replaces the final usage object (a misbehaving server)
    misbehave_every: int = 0  # with `usage`: only every n-th stream gets it (0: all), the others are normal
    delta_key: str = "content"  # the chat delta field tokens go in: content, reasoning, reasoning_content
    streams: int = 0
    seen: list[Seen] = field(default_factory=list)
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LoopbackServer:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            server = loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()

            async def drain() -> None:
                await asyncio.gather(*tasks, return_exceptions=True)

            loop.run_until_complete(drain())
            loop.run_until_complete(server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        assert ready.wait(10), "loopback server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                at = time.time()
                method, path, _ = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.seen.append(Seen(at, method, path, headers, body))
                served += 1
                if self.drop_reused and served > 1:
                    return  # as a server whose keep-alive timeout fired just as the request came in
                if not await self._answer(path, body, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _answer(self, path: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        if path.startswith("/slow/"):
            await asyncio.sleep(float(path.split("/")[2]) / 1000)
        if path == "/drop":
            return False
        if path.startswith("/v1/"):
            await self._stream(path, json.loads(body), writer)
            return True
        status = {"/fail": "500 Internal Server Error", "/missing": "404 Not Found"}.get(path, "200 OK")
        payload = b'{"ok":true}'
        writer.write(f"HTTP/1.1 {status}\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
        await writer.drain()
        return True

    async def _stream(self, path: str, request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        chat = path.endswith("chat/completions")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def event(data: str) -> bytes:
            raw = f"data: {data}\n\n".encode()
            return f"{len(raw):x}\r\n".encode() + raw + b"\r\n"

        if chat:  # role-only first chunk, as vLLM sends: no token yet
            writer.write(event(json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})))
        self.streams += 1
        number = self.streams  # streams interleave: decide by this one's own number
        for i in range(self.tokens):
            await asyncio.sleep(self.gap_ms / 1000)
            choice = {"index": 0, "delta": {self.delta_key: f"t{i} "}} if chat else {"index": 0, "text": f"t{i} "}
            writer.write(event(json.dumps({"choices": [choice], "usage": None})))
            await writer.drain()
        if self.truncate:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return
        usage: dict[str, Any] = {"prompt_tokens": 7, "completion_tokens": self.tokens, "total_tokens": 7 + self.tokens}
        if self.usage is not None and (not self.misbehave_every or number % self.misbehave_every == 0):
            usage = self.usage
        writer.write(event(json.dumps({"choices": [], "usage": usage})))
        writer.write(event("[DONE]") + b"0\r\n\r\n")
        await writer.drain()
