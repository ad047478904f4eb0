"""Live progress of a stage: one overwritten line on a terminal, plain log lines every 10 s otherwise."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO


@dataclass
class Snapshot:
    stage: int
    elapsed: float
    duration: float | None
    scheduled: int  # requests whose intended time has come
    sent: int
    done: int
    errors: int
    dropped: int
    in_flight: int
    p99_recent: float | None  # latency p99 over the last interval (s)


class Progress:
    def __init__(self, stream: TextIO | None = None, interval: float | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = interval if interval is not None else (0.5 if self.tty else 10.0)

    def show(self, snap: Snapshot) -> None:
        total = f"{snap.elapsed:.0f}/{snap.duration:.0f}s" if snap.duration else f"{snap.elapsed:.0f}s"
        p99 = f"{snap.p99_recent * 1000:.1f}ms" if snap.p99_recent is not None else "-"
        text = (
            f"stage-{snap.stage} {total} sent {snap.sent}/{snap.scheduled} done {snap.done} "
            f"errors {snap.errors} dropped {snap.dropped} in-flight {snap.in_flight} p99 {p99}"
        )
        if self.tty:
            self.stream.write("\r\x1b[2K" + text)
        else:
            self.stream.write("replay: " + text + "\n")
        self.stream.flush()

    def end(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
