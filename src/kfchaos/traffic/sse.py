"""Incremental parsing of OpenAI-compatible streaming responses (Server-Sent Events) into token timings.

Fed body bytes as they arrive (already de-chunked by the HTTP parser), with the arrival time. Events are
split on blank lines, `:` comment lines are ignored, `data: [DONE]` ends the stream. A chunk counts as a
token chunk when it carries non-empty `choices[0].text` (completions) or `choices[0].delta.content` /
`reasoning_content` (chat); the final `usage` object gives the token counts. Timings are kept as the
first and last token-chunk times and the gaps between token chunks (for ITL statistics).
"""

from __future__ import annotations

import json
from typing import Any


class SseError(Exception):
    """The stream is not valid SSE carrying JSON chunks."""


class SseTimer:
    __slots__ = ("buffer", "chunks", "completion_tokens", "done", "first", "gaps", "last", "prompt_tokens")

    def __init__(self) -> None:
        self.buffer = b""
        self.first: float | None = None  # time of the first token chunk
        self.last: float | None = None  # time of the last token chunk
        self.gaps: list[float] = []  # between successive token chunks
        self.chunks = 0  # token chunks
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.done = False

    def feed(self, data: bytes, now: float) -> None:
        buffer = self.buffer + data if self.buffer else data
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        events = buffer.split(b"\n\n")
        self.buffer = events.pop()  # the incomplete tail, if any
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._data(line[5:].strip(), now)
                elif line and not line.startswith(b":") and b":" not in line:
                    raise SseError(f"not an SSE field line: {line[:60]!r}")

    def _data(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            chunk: Any = json.loads(payload)
        except ValueError:
            raise SseError(f"data is not JSON: {payload[:60]!r}") from None
        if not isinstance(chunk, dict):
            raise SseError("data is not a JSON object")
        if "error" in chunk and not chunk.get("choices"):
            raise SseError(f"server sent an error event: {str(chunk['error'])[:100]}")
        choices = chunk.get("choices")
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            text = delta.get("content") or delta.get("reasoning_content") if delta else choice.get("text")
            if text:
                if self.last is None:
                    self.first = now
                else:
                    self.gaps.append(now - self.last)
                self.last = now
                self.chunks += 1
        usage = chunk.get("usage")
        if usage:
            self.completion_tokens = usage.get("completion_tokens")
            self.prompt_tokens = usage.get("prompt_tokens")

    def finish(self, now: float) -> None:
        """At the end of the body: a last event without its blank line still counts."""
        if self.buffer.strip():
            tail, self.buffer = self.buffer, b""
            self.feed(tail + b"\n\n", now)

    @property
    def output_tokens(self) -> int | None:
        return self.completion_tokens if self.completion_tokens is not None else (self.chunks or None)
