"""A real HTTP/1.1 server on 127.0.0.1 for the replay tests, run in its own thread and event loop.

It records every request it receives (arrival time on the epoch clock, method, path, headers, body)
and answers by path:
  /slow/<ms>                 200 after a delay
  /fail                      500
  /missing                   404
  /drop                      closes the connection without answering
  /login                     302 to a login page (Location and an HTML body), as a gateway's authentication does
  /empty                     200 with an empty body
  /v1/completions, /v1/chat/completions   an SSE stream: TOKENS chunks GAP_MS apart, usage, [DONE]
  anything else              200 with a short body

Streams can misbehave (every `misbehave_every`-th one, or all): `finish_reason` on the last token chunk,
`error_event` (an error event after the tokens, as vLLM's `create_streaming_error_response` writes it, then
[DONE]), `tool_calls` (the answer is a tool call only), `first_token_delay_ms` (between the chat role chunk and the
first token), `answer_model` (the `model` every chunk names; default: the model the request asked for).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from tests.support.threadserver import ThreadedServer


@dataclass
class Seen:
    at: float
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LoopbackServer(ThreadedServer):
    tokens: int = 5
    gap_ms: float = 5.0
    truncate: bool = False  # end streams without usage and [DONE]
    drop_reused: bool = False  # close a connection, unanswered, when a second request arrives on it
    usage: dict[str, Any] | None = None  # replaces the final usage object (a misbehaving server)
    misbehave_every: int = 0  # with `usage`: only every n-th stream gets it (0: all), the others are normal
    delta_key: str = "content"  # the chat delta field tokens go in: content, reasoning, reasoning_content
    finish_reason: str | None = None  # on the last token chunk of a misbehaving stream
    error_event: dict[str, Any] | None = None  # sent after the tokens of a misbehaving stream
    tool_calls: bool = False  # every answer a tool call (delta.tool_calls), finish_reason "tool_calls"
    first_token_delay_ms: float = 0.0
    answer_model: str | None = None  # the model a misbehaving stream names (default: the one asked for)
    streams: int = 0
    seen: list[Seen] = field(default_factory=list)

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
        if path == "/login":
            page = b"<html><body>Sign in</body></html>"
            head = f"HTTP/1.1 302 Found\r\nLocation: /sso/login\r\nContent-Length: {len(page)}\r\n\r\n"
            writer.write(head.encode() + page)
            await writer.drain()
            return True
        status = {"/fail": "500 Internal Server Error", "/missing": "404 Not Found"}.get(path, "200 OK")
        payload = b"" if path == "/empty" else b'{"ok":true}'
        writer.write(f"HTTP/1.1 {status}\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
        await writer.drain()
        return True

    async def _stream(self, path: str, request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        chat = path.endswith("chat/completions")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def event(data: str) -> bytes:
            raw = f"data: {data}\n\n".encode()
            return f"{len(raw):x}\r\n".encode() + raw + b"\r\n"

        self.streams += 1
        number = self.streams  # streams interleave: decide by this one's own number
        odd = not self.misbehave_every or number % self.misbehave_every == 0
        model = self.answer_model if odd and self.answer_model else request.get("model")
        if chat:  # role-only first chunk, as vLLM sends: no token yet
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
            writer.write(event(json.dumps({"model": model, "choices": [role]})))
            await writer.drain()
            await asyncio.sleep(self.first_token_delay_ms / 1000)
        for i in range(self.tokens):
            await asyncio.sleep(self.gap_ms / 1000)
            if self.tool_calls:
                call = {"index": 0, "function": {"arguments": f'{{"t": {i}}}'}}
                if i == 0:
                    call |= {"id": "call-1", "type": "function", "function": {"name": "lookup", "arguments": ""}}
                choice: dict[str, Any] = {"index": 0, "delta": {"tool_calls": [call]}}
            elif chat:
                choice = {"index": 0, "delta": {self.delta_key: f"t{i} "}}
            else:
                choice = {"index": 0, "text": f"t{i} "}
            last = i == self.tokens - 1
            if last and self.tool_calls:
                choice["finish_reason"] = "tool_calls"
            elif last and odd and self.finish_reason:
                choice["finish_reason"] = self.finish_reason
            elif last:
                choice["finish_reason"] = "stop"
            writer.write(event(json.dumps({"model": model, "choices": [choice], "usage": None})))
            await writer.drain()
        if odd and self.error_event is not None:
            writer.write(event(json.dumps(self.error_event)))
        if self.truncate:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return
        usage: dict[str, Any] = {"prompt_tokens": 7, "completion_tokens": self.tokens, "total_tokens": 7 + self.tokens}
        if self.usage is not None and odd:
            usage = self.usage
        writer.write(event(json.dumps({"choices": [], "usage": usage})))
        writer.write(event("[DONE]") + b"0\r\n\r\n")
        await writer.drain()
