"""A hostile OpenAI-compatible model server on 127.0.0.1 (issue 46, class 4): real sockets, asyncio streams, its own
thread and event loop. Every request is answered with the attack its body's `model` names (ATTACKS); any other
model gets a well-formed stream. Nothing big is ever held: floods are written piece by piece, each write awaited
(`drain`), and every answer stops when the client goes away or the server is closed."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tests.support.threadserver import ThreadedServer

MB = 1 << 20
BIG_EVENT_BYTES = 100 * MB  # one SSE event this long
BOMB_BYTES = 256 * MB  # what a compressed bomb decodes to (about 1 MB on the wire)
ONE_BYTE_CHUNKS = 1_000_000
BILLION = 1_000_000_000
LONG_MODEL_BYTES = MB

Writer = asyncio.StreamWriter
ASKED: contextvars.ContextVar[str] = contextvars.ContextVar("asked", default="fine")  # the model a request names


def event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def token(text: str, model: str = "", finish: str | None = None) -> bytes:
    model = model or ASKED.get()
    return event({"object": "text_completion", "model": model, "choices": [{"index": 0, "text": text,
                                                                           "finish_reason": finish}]})  # fmt: skip


def usage(completion: int, prompt: int = 4) -> bytes:
    return event({"object": "text_completion", "model": ASKED.get(), "choices": [],
                  "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})  # fmt: skip


DONE = b"data: [DONE]\n\n"
SSE_HEAD = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def well_formed(tokens: int = 3, model: str = "fine") -> bytes:
    body = b"".join(token(f" t{i}", model) for i in range(tokens - 1))
    return body + token(" end", model, "stop") + usage(tokens) + DONE


def _bomb(wbits: int) -> bytes:
    """A well-formed stream repeated until it decodes to BOMB_BYTES, compressed (gzip: wbits 31, deflate: 15)."""
    packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
    block = well_formed(3)[: -len(DONE)] * ((MB // len(well_formed(3))) + 1)
    parts = [packer.compress(block) for _ in range(BOMB_BYTES // len(block))]
    return b"".join(parts) + packer.compress(DONE) + packer.flush()


@dataclass
class HostileModelServer(ThreadedServer):
    """`with HostileModelServer() as server:` then target `server.url`; `served` counts the answers begun per model."""

    served: dict[str, int] = field(default_factory=dict)
    _bombs: dict[str, bytes] = field(default_factory=dict)

    def bomb(self, coding: str) -> bytes:
        if coding not in self._bombs:
            # br: the replayer refuses a coding before decoding a byte, so the body need not be Brotli (no codec here).
            self._bombs[coding] = _bomb(31 if coding == "gzip" else 15) if coding != "br" else self.bomb("deflate")
        return self._bombs[coding]

    async def _client(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                length = 0
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                try:
                    model = str(json.loads(body).get("model"))
                except (ValueError, AttributeError):
                    model = ""
                self.served[model] = self.served.get(model, 0) + 1
                ASKED.set(model)
                attack = ATTACKS.get(model)
                if attack is None:
                    data = well_formed(3, model)
                    writer.write(f"{SSE_HEAD}Content-Length: {len(data)}\r\n\r\n".encode() + data)
                    await writer.drain()
                    continue
                await attack(self, writer)
                return  # every attack ends its connection
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


async def _close_delimited(writer: Writer, head_extra: str = "") -> None:
    writer.write(f"{SSE_HEAD}{head_extra}Connection: close\r\n\r\n".encode())
    await writer.drain()


async def big_event(server: HostileModelServer, writer: Writer) -> None:
    """One `data:` line of 100 MB: a JSON string that never ends within the bound."""
    await _close_delimited(writer)
    writer.write(b'data: {"choices":[{"text":"')
    piece = b"a" * MB
    for _ in range(BIG_EVENT_BYTES // MB):
        writer.write(piece)
        await writer.drain()
    writer.write(b'"}]}\n\n' + DONE)
    await writer.drain()


async def endless(server: HostileModelServer, writer: Writer) -> None:
    """Token after token, a millisecond apart, never finishing."""
    await _close_delimited(writer)
    i = 0
    while True:
        writer.write(token(f" t{i}"))
        await writer.drain()
        await asyncio.sleep(0.001)
        i += 1


async def endless_flood(server: HostileModelServer, writer: Writer) -> None:
    """Token after token as fast as the socket takes them, never finishing: the answer's byte bound ends it."""
    await _close_delimited(writer)
    batch = b"".join(token(f" t{i}") for i in range(1000))
    while True:
        writer.write(batch)
        await writer.drain()


async def invalid_utf8(server: HostileModelServer, writer: Writer) -> None:
    broken = token(" caf-X").replace(b"caf-X", b"caf\xff\xfe\xc3")
    data = token(" t0") + broken + token(" end", finish="stop") + usage(3) + DONE
    writer.write(f"{SSE_HEAD}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    await writer.drain()


def _bomb_attack(coding: str) -> Callable[[HostileModelServer, Writer], Awaitable[None]]:
    async def attack(server: HostileModelServer, writer: Writer) -> None:
        data = server.bomb(coding)
        writer.write(f"{SSE_HEAD}Content-Encoding: {coding}\r\nContent-Length: {len(data)}\r\n\r\n".encode())
        for at in range(0, len(data), 64 << 10):
            writer.write(data[at : at + (64 << 10)])
            await writer.drain()

    return attack


async def _chunked(writer: Writer, data: bytes, *, end: bool = True) -> None:
    """`data` as one HTTP chunk per byte, written a few thousand chunks at a time."""
    writer.write(f"{SSE_HEAD}Transfer-Encoding: chunked\r\n\r\n".encode())
    for at in range(0, len(data), 4096):
        writer.write(b"".join(b"1\r\n%c\r\n" % byte for byte in data[at : at + 4096]))
        await writer.drain()
    if end:
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def one_byte_stream(server: HostileModelServer, writer: Writer) -> None:
    """A well-formed stream of about a million bytes, each byte its own HTTP chunk: slow framing, a valid answer."""
    count = ONE_BYTE_CHUNKS // len(token(" t00000"))
    tokens = b"".join(token(f" t{i}") for i in range(count))
    await _chunked(writer, tokens + token(" end", finish="stop") + usage(count + 1) + DONE)


async def one_byte_event(server: HostileModelServer, writer: Writer) -> None:
    """A million one-byte chunks that make one event that never ends (the worst case for a parser that re-reads its
    buffer on every chunk)."""
    await _chunked(writer, b'data: {"choices":[{"text":"' + b"a" * (ONE_BYTE_CHUNKS - 27))


async def billion_usage(server: HostileModelServer, writer: Writer) -> None:
    """Three tokens streamed, a billion claimed (under the records' int32 bound: a claim they can hold)."""
    data = token(" t0") + token(" t1") + token(" end", finish="stop") + usage(BILLION) + DONE
    writer.write(f"{SSE_HEAD}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    await writer.drain()


async def billion_prompt(server: HostileModelServer, writer: Writer) -> None:
    data = token(" t0") + token(" end", finish="stop") + usage(2, prompt=BILLION) + DONE
    writer.write(f"{SSE_HEAD}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    await writer.drain()


async def long_model(server: HostileModelServer, writer: Writer) -> None:
    name = "m" * LONG_MODEL_BYTES
    data = token(" t0", name) + token(" end", name, "stop") + usage(2) + DONE
    writer.write(f"{SSE_HEAD}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    await writer.drain()


async def odd_finish(server: HostileModelServer, writer: Writer) -> None:
    data = token(" t0") + token(" end", finish="banana") + usage(2) + DONE
    writer.write(f"{SSE_HEAD}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    await writer.drain()


async def no_done_close(server: HostileModelServer, writer: Writer) -> None:
    """Tokens, a finish and usage, then the connection closes: no `data: [DONE]`."""
    await _close_delimited(writer)
    writer.write(token(" t0") + token(" end", finish="stop") + usage(2))
    await writer.drain()


async def no_done_hang(server: HostileModelServer, writer: Writer) -> None:
    """Tokens, a finish and usage, then nothing, the connection held open: no `[DONE]`, no end of the body."""
    writer.write(f"{SSE_HEAD}Transfer-Encoding: chunked\r\n\r\n".encode())
    data = token(" t0") + token(" end", finish="stop") + usage(2)
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
    await writer.drain()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(3600)


ATTACKS: dict[str, Callable[[HostileModelServer, Writer], Awaitable[None]]] = {
    "big-event": big_event,
    "endless": endless,
    "endless-flood": endless_flood,
    "invalid-utf8": invalid_utf8,
    "gzip-bomb": _bomb_attack("gzip"),
    "deflate-bomb": _bomb_attack("deflate"),
    "br-bomb": _bomb_attack("br"),
    "one-byte-stream": one_byte_stream,
    "one-byte-event": one_byte_event,
    "billion-usage": billion_usage,
    "billion-prompt": billion_prompt,
    "long-model": long_model,
    "odd-finish": odd_finish,
    "no-done-close": no_done_close,
    "no-done-hang": no_done_hang,
}
