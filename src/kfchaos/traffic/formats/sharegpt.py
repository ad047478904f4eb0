"""A ShareGPT-like prompt set: conversations without times, so arrivals are synthesized.

Accepted shapes: a JSON array of conversations (the ShareGPT dump), or one conversation per line.
A conversation is `{"id": ..., "conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}`;
the first human turn is the prompt, and the reply's length in words (a rough token count) becomes
`max_tokens` (default 128 when there is no reply). The array is decoded one element at a time, so the
file is never held whole; an element over MAX_ELEMENT_BYTES, nested too deep, or not JSON is skipped and
counted, and the file goes on.
"""

from __future__ import annotations

import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from kfchaos.bounds import MAX_ELEMENT_BYTES, MAX_JSON_DEPTH, json_depth_ok
from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.source import SourceReport, open_binary, out_of_time
from kfchaos.traffic.synthetic import arrival_times

DEFAULT_MAX_TOKENS = 128
_READ = 1 << 16


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
        try:
            first = peek(1)[:1] if peek else b""
            while peek and first in (b" ", b"\n", b"\r", b"\t"):
                stream.read(1)
                first = peek(1)[:1]
            if first == b"[":
                # Invalid UTF-8 becomes U+FFFD: a broken byte costs its conversation at most, never the file.
                yield from _array_elements(io.TextIOWrapper(stream, encoding="utf-8", errors="replace"), report)
                return
            yield from _line_elements(stream, report)
        except (EOFError, OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            report.truncated = True
            report.skip(report.lines + 1, f"file ends early or is corrupt ({type(exc).__name__}); rest ignored")


def _decode(text: str | bytes) -> Any:
    """json.loads within the depth bound; ValueError when it is not JSON, too deep, or not UTF-8."""
    if not json_depth_ok(text):
        raise ValueError("JSON nested too deep")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def _line_elements(stream: IO[bytes], report: SourceReport) -> Iterator[tuple[int, Any]]:
    line = 0
    while raw := stream.readline(MAX_ELEMENT_BYTES + 1):
        line += 1
        report.lines = line
        if out_of_time(report, line):
            return
        if len(raw) > MAX_ELEMENT_BYTES and not raw.endswith(b"\n"):
            while (rest := stream.readline(MAX_ELEMENT_BYTES + 1)) and not rest.endswith(b"\n"):
                if out_of_time(report, line):
                    return
            report.skip(line, f"conversation longer than {MAX_ELEMENT_BYTES} bytes")
            continue
        if raw.strip():
            try:  # invalid UTF-8 becomes U+FFFD, as in the array form
                yield line, _decode(raw.decode("utf-8", "replace"))
            except ValueError as exc:
                report.skip(line, str(exc))


_OUTSIDE = re.compile(r'["\[\]{}]')  # what changes the nesting outside a string
_IN_STRING = re.compile(r'["\\]')  # what ends a string or escapes the next character
_SCALAR_END = re.compile(r"[,\]\s]")


class _Scan:
    """Where one JSON value ends, found across chunks without decoding it (so a huge one can be skipped)."""

    __slots__ = ("deepest", "depth", "escape", "in_string")

    def __init__(self) -> None:
        self.depth = 0
        self.deepest = 0
        self.in_string = False
        self.escape = False

    def end(self, text: str, i: int) -> int | None:
        """The index just past the value's end in `text` from `i`, or None if it continues past the text."""
        n = len(text)
        while i < n:
            if self.escape:
                self.escape = False
                i += 1
                continue
            if self.in_string:
                found = _IN_STRING.search(text, i)
                if found is None:
                    return None
                i = found.end()
                if found.group() == "\\":
                    self.escape = True
                else:
                    self.in_string = False
                    if self.depth == 0:
                        return i
                continue
            found = _OUTSIDE.search(text, i)
            if found is None:
                return None
            i = found.end()
            char = found.group()
            if char == '"':
                self.in_string = True
            elif char in "[{":
                self.depth += 1
                self.deepest = max(self.deepest, self.depth)
            else:
                self.depth -= 1
                if self.depth <= 0:
                    return i
        return None


def _array_elements(stream: IO[str], report: SourceReport) -> Iterator[tuple[int, Any]]:
    """Each element of a top-level JSON array. An element is delimited by scanning (strings and nesting),
    then decoded once; one longer than MAX_ELEMENT_BYTES characters or nested deeper than MAX_JSON_DEPTH is
    skipped and counted, the rest of the file is still read. Memory: one element plus one read block."""
    buffer = stream.read(_READ)
    pos = buffer.index("[") + 1
    line = 1 + buffer.count("\n", 0, pos)  # the line at `pos`
    while True:
        if out_of_time(report, line):
            return
        while True:  # separators
            while pos < len(buffer) and buffer[pos] in " \t\r\n,":
                if buffer[pos] == "\n":
                    line += 1
                pos += 1
            if pos < len(buffer):
                break
            buffer, pos = stream.read(_READ), 0
            if not buffer:
                report.truncated = True
                report.skip(line, "the JSON array is not closed; file ends early")
                report.lines = line
                return
        if buffer[pos] == "]":
            report.lines = line
            return
        start_line = line
        scan = _Scan()
        parts: list[str] = []
        size = 0
        kept = True
        if buffer[pos] in '{["':
            end = scan.end(buffer, pos)
        else:
            found = _SCALAR_END.search(buffer, pos)
            end = found.start() if found else None
        while end is None:  # the element goes on past this block
            piece = buffer[pos:]
            line += piece.count("\n")
            size += len(piece)
            if kept and size > MAX_ELEMENT_BYTES:
                kept, parts = False, []
            elif kept:
                parts.append(piece)
            buffer, pos = stream.read(_READ), 0
            if out_of_time(report, line):
                return
            if not buffer:
                report.truncated = True
                report.skip(start_line, "invalid JSON array element (file ends inside it); rest of the file ignored")
                report.lines = line
                return
            end = scan.end(buffer, 0) if scan.depth or scan.in_string or scan.escape else None
            if end is None and not (scan.depth or scan.in_string or scan.escape):
                found = _SCALAR_END.search(buffer, 0)
                end = found.start() if found else None
        piece = buffer[pos:end]
        line += piece.count("\n")
        size += len(piece)
        buffer, pos = buffer[end:], 0
        if not kept or size > MAX_ELEMENT_BYTES:
            report.skip(start_line, f"conversation longer than {MAX_ELEMENT_BYTES} characters")
            continue
        if scan.deepest > MAX_JSON_DEPTH:
            report.skip(start_line, "JSON nested too deep")
            continue
        try:
            yield start_line, _decode("".join(parts) + piece)
        except ValueError as exc:
            report.skip(start_line, str(exc))
