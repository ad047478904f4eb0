"""Reading traffic files as streams: plain or gzip, line by line, with every malformed line accounted for.

Nothing is loaded whole: readers yield one line at a time, and a `SourceReport` counts what was read,
what was skipped and why (with line numbers), so a replay never drops input silently.
"""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kfchaos.bounds import MAX_LINE_BYTES

GZIP_MAGIC = b"\x1f\x8b"
MAX_SAMPLES = 20  # malformed lines quoted in a report; the count covers all of them

# When a replay must stop reading (time.monotonic()): the stage's end. A reader that finds no request for a long
# stretch -- a gzip bomb of blank lines, ten million malformed ones -- would otherwise hold the sender (it runs in
# the event loop's thread) past the stage's duration. Readers look at it once a line; context-local, so two
# stages in one process (shards in threads) each have their own.
_READ_UNTIL: ContextVar[float | None] = ContextVar("kfchaos_read_until", default=None)
DEADLINE_NOTE = "the stage's duration ended while reading the source; the rest was not read"


@contextmanager
def read_until(deadline: float) -> Iterator[None]:
    """Readers in this context stop (the report says so) once time.monotonic() passes `deadline`."""
    token = _READ_UNTIL.set(deadline)
    try:
        yield
    finally:
        _READ_UNTIL.reset(token)


def out_of_time(report: SourceReport, line: int) -> bool:
    """Whether the replay's reading deadline has passed; the first time it has, the report notes it."""
    deadline = _READ_UNTIL.get()
    if deadline is None or time.monotonic() <= deadline:
        return False
    report.out_of_time = True
    return True


@dataclass
class Malformed:
    line: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "reason": self.reason}


@dataclass
class SourceReport:
    """What a reader saw. `malformed` holds the first MAX_SAMPLES problems; `malformed_count` all of them."""

    path: str
    format: str
    lines: int = 0
    records: int = 0
    malformed_count: int = 0
    malformed: list[Malformed] = field(default_factory=list)
    out_of_order: int = 0
    truncated: bool = False
    out_of_time: bool = False  # reading stopped at the stage's end (read_until)

    def skip(self, line: int, reason: str) -> None:
        self.malformed_count += 1
        if len(self.malformed) < MAX_SAMPLES:
            self.malformed.append(Malformed(line, reason[:200]))

    def describe(self) -> list[str]:
        """Human-readable lines, `FILE:LINE: reason`, for the command line."""
        out = [f"{self.path}:{m.line}: skipped: {m.reason}" for m in self.malformed]
        hidden = self.malformed_count - len(self.malformed)
        if hidden > 0:
            out.append(f"{self.path}: ... and {hidden} more malformed lines")
        if self.out_of_order:
            out.append(f"{self.path}: {self.out_of_order} records out of time order were sent at their turn")
        if self.out_of_time:
            out.append(f"{self.path}:{self.lines}: {DEADLINE_NOTE}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "lines": self.lines,
            "records": self.records,
            "malformed_count": self.malformed_count,
            "malformed": [m.to_dict() for m in self.malformed],
            "out_of_order": self.out_of_order,
            "truncated": self.truncated,
            "out_of_time": self.out_of_time,
        }


@contextmanager
def open_binary(path: str | Path) -> Iterator[IO[bytes]]:
    """The file's bytes, decompressed when it starts with the gzip magic (whatever its name says)."""
    with open(path, "rb") as raw:
        if raw.peek(2)[:2] == GZIP_MAGIC:
            with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                yield unzipped  # type: ignore[misc]
        else:
            yield raw


def iter_lines(
    path: str | Path, report: SourceReport, keep_ends: bool = False, limit: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its newline unless keep_ends), streamed. A line longer than `limit` bytes
    is skipped as malformed (read past in pieces, never held whole). A truncated gzip stream ends the file
    as malformed."""
    number = 0
    with open_binary(path) as stream:
        try:
            while line := stream.readline(limit + 1):
                number += 1
                report.lines = number
                if out_of_time(report, number):
                    return
                if len(line) > limit and not line.endswith(b"\n"):
                    while (rest := stream.readline(limit + 1)) and not rest.endswith(b"\n"):
                        if out_of_time(report, number):
                            return
                    report.skip(number, f"line longer than {limit} bytes")
                    continue
                yield number, line if keep_ends else line.rstrip(b"\r\n")
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            report.truncated = True
            report.skip(number + 1, f"file ends early or is corrupt ({type(exc).__name__}); rest of the file ignored")
