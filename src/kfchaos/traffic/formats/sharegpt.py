"""A ShareGPT-like prompt set: conversations without times, so arrivals are synthesized.

Accepted shapes: a JSON array of conversations (the ShareGPT dump), or one conversation per line.
A conversation is `{"id": ..., "conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}`;
the first human turn is the prompt, and the reply's length in words (a rough token count) becomes
`max_tokens` (default 128 when there is no reply). The array is decoded one element at a time, so the
file is never held whole.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.source import SourceReport, open_binary
from kfchaos.traffic.synthetic import arrival_times

DEFAULT_MAX_TOKENS = 128
_READ = 1 << 16
_MAX_ELEMENT = 64 << 20  # one conversation larger than this is treated as a corrupt file


def read_sharegpt(
    path: str | Path, report: SourceReport, rate: float, seed: int = 0, arrival: str = "poisson"
) -> Iterator[TrafficRequest]:
    rng = np.random.Generator(np.random.PCG64(seed))
    times = arrival_times(rng, arrival, rate)
    for index, (line, element) in enumerate(_elements(path, report)):
        try:
            request = _conversation(element, index, next(times))
        except ValueError as exc:
            report.skip(line, str(exc))
            continue
        report.records += 1
        yield request


def _conversation(data: Any, index: int, timestamp: float) -> TrafficRequest:
    if not isinstance(data, dict):
        raise ValueError("conversation is not a JSON object")
    turns = data.get("conversations")
    if not isinstance(turns, list):
        raise ValueError("missing list field conversations")
    prompt = None
    reply_words = None
    for turn in turns:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ValueError("each turn needs a string value")
        if prompt is None and turn.get("from") in ("human", "user"):
            prompt = turn["value"]
        elif prompt is not None and turn.get("from") in ("gpt", "assistant"):
            reply_words = len(turn["value"].split())
            break
    if not prompt:
        raise ValueError("no human turn with text")
    return TrafficRequest(
        id=str(data.get("id", f"conv-{index}")),
        timestamp=timestamp,
        method="POST",
        prompt=prompt,
        max_tokens=max(1, reply_words) if reply_words else DEFAULT_MAX_TOKENS,
    )


def _elements(path: str | Path, report: SourceReport) -> Iterator[tuple[int, Any]]:
    """(line where it starts, decoded JSON) for each array element or each line."""
    with open_binary(path) as stream:
        peek = getattr(stream, "peek", None)
        first = peek(1)[:1] if peek else b""
        while peek and first in (b" ", b"\n", b"\r", b"\t"):
            stream.read(1)
            first = peek(1)[:1]
        try:
            if first == b"[":
                yield from _array_elements(io.TextIOWrapper(stream, encoding="utf-8", errors="replace"), report)
                return
            yield from _line_elements(stream, report)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            report.truncated = True
            report.skip(report.lines + 1, f"file ends early or is corrupt ({exc}); rest of the file ignored")


def _line_elements(stream: IO[bytes], report: SourceReport) -> Iterator[tuple[int, Any]]:
    for line, raw in enumerate(stream, start=1):
        report.lines = line
        if raw.strip():
            try:
                yield line, json.loads(raw)
            except json.JSONDecodeError as exc:
                report.skip(line, f"invalid JSON: {exc.msg} at column {exc.colno}")


def _array_elements(stream: IO[str], report: SourceReport) -> Iterator[tuple[int, Any]]:
    decoder = json.JSONDecoder()
    buffer = stream.read(_READ)
    pos = buffer.index("[") + 1
    line = 1 + buffer.count("\n", 0, pos)
    eof = False
    while True:
        while pos < len(buffer) and buffer[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(buffer) and not eof:
            chunk = stream.read(_READ)
            line += buffer.count("\n", 0, pos)
            buffer, pos, eof = chunk, 0, not chunk
            continue
        if pos < len(buffer) and buffer[pos] == "]":
            report.lines = line + buffer.count("\n", 0, pos)
            return
        try:
            element, end = decoder.raw_decode(buffer, pos)
        except json.JSONDecodeError as exc:
            if not eof and len(buffer) - pos < _MAX_ELEMENT:
                chunk = stream.read(_READ)
                line += buffer.count("\n", 0, pos)
                buffer, pos, eof = buffer[pos:] + chunk, 0, not chunk
                continue
            at = line + buffer.count("\n", 0, pos)
            report.truncated = eof
            report.skip(at, f"invalid JSON array element ({exc.msg}); rest of the file ignored")
            report.lines = at
            return
        yield line + buffer.count("\n", 0, pos), element
        line += buffer.count("\n", 0, end)
        buffer, pos = buffer[end:], 0
