"""How a kfchaos process ends when it is told to stop (SIGTERM: a pod evicted, a CI job cancelled; SIGINT: Ctrl-C).

The rule, in one place: what the process holds is given back first (faults removed), what it measured is kept
(records written, marked as cut by the signal), and it ends with a code that is never a verdict: 128 + the signal,
the shell's convention (130 for SIGINT, 143 for SIGTERM).

A step of the pipeline runs under a `Guard`. The signal's handler starts every cleanup registered with the guard at
once, each in its own thread (a pod has seconds at most: see docs/reliability.md, "Stopped by SIGTERM"), and then
stops the step: at once by raising `Interrupted`, or, while a replay runs its event loop (`deferred`), when the
replay returns; the replay's own handler chains to the guard's (kfchaos.traffic.engine.run_stage). The step then
waits for the cleanups (bounded) and dies by the same signal (`die`), so that whoever started it sees it
signalled, as if it had had no handler.

A process that runs the pipeline's tasks (`kfchaos run --local`) sets INTERRUPTED_ENV when it is told to stop: the
tasks it still starts inherit it, and a guarded step that finds it stops before it sends or injects anything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Set (to the signal's name) by an interrupted local run for the tasks it still starts.
INTERRUPTED_ENV = "KFCHAOS_RUN_INTERRUPTED"
# How long a stopped step waits for its cleanups before it dies anyway (a pod's whole grace period is 30 s by
# default, and KFP's launcher may leave far less: docs/reliability.md).
CLEANUP_WAIT_S = 20.0
SECOND_PASS_S = 5.0


def exit_code(signum: int) -> int:
    """The exit code of a process stopped by `signum`: 128 + the signal (130 SIGINT, 143 SIGTERM)."""
    return 128 + int(signum)


EXIT_INTERRUPTED = exit_code(signal.SIGINT)
EXIT_TERMINATED = exit_code(signal.SIGTERM)


def name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(BaseException):
    """The process was told to stop by `signum`. A BaseException: `except Exception` on the way (a step that turns
    every error into a result) must not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {name(signum)}")
        self.signum = int(signum)


class Guard:
    """SIGTERM and SIGINT handled for one step: cleanups started at once, then the step stopped (see the module
    docstring). Use as a context manager in the main thread; `current()` finds it."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._cleanups: list[Callable[[], None]] = []
        self._threads: list[threading.Thread] = []
        self._deferred = 0
        self._raised = False
        self._previous: dict[int, Any] = {}

    def on_signal(self, cleanup: Callable[[], None]) -> None:
        """Run `cleanup` in its own thread as soon as a signal comes (at once, when one came already)."""
        self._cleanups.append(cleanup)
        if self.signum is not None:
            self._start(cleanup)

    def _start(self, cleanup: Callable[[], None]) -> None:
        thread = threading.Thread(target=cleanup, name="kfchaos-cleanup", daemon=True)
        self._threads.append(thread)
        thread.start()

    def handle(self, signum: int, frame: FrameType | None = None) -> None:
        """The signal handler (also called by a replay's own handler, which chains to it)."""
        if self.signum is not None:
            return  # a second signal while the first is handled: the cleanups are running already
        self.signum = signum
        for cleanup in list(self._cleanups):
            self._start(cleanup)
        if not self._deferred:
            self._raised = True
            raise Interrupted(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A signal inside the block starts the cleanups but does not raise (an event loop would swallow the
        exception); `check()` after the block raises it."""
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1

    def check(self) -> None:
        """Raise `Interrupted` when a signal came and was not raised yet."""
        if self.signum is not None and not self._raised:
            self._raised = True
            raise Interrupted(self.signum)

    def wait_cleanups(self, timeout: float = CLEANUP_WAIT_S) -> bool:
        """Wait for the cleanups started by the signal; False when one is still running after `timeout`."""
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.start()
        try:
            for thread in self._threads:
                while thread.is_alive() and not deadline.is_set():
                    thread.join(0.05)
        finally:
            timer.cancel()
        return not any(thread.is_alive() for thread in self._threads)

    def run_cleanups_again(self, timeout: float = SECOND_PASS_S) -> bool:
        """Every cleanup once more (each is idempotent), waited for up to `timeout`: what a request in flight when
        the signal came (a create whose reply it cut) may have made after the first pass."""
        self._threads = []
        for cleanup in list(self._cleanups):
            self._start(cleanup)
        return self.wait_cleanups(timeout)

    def __enter__(self) -> Guard:
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self.handle)
        _active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _active.remove(self)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


_active: list[Guard] = []


def current() -> Guard | None:
    """The guard of the step running in this process, None outside one."""
    return _active[-1] if _active else None


def die(signum: int) -> None:
    """End this process by `signum`, as it would have ended without a handler (its parent sees it signalled; a
    shell shows 128 + signum)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    os._exit(exit_code(signum))  # not reached unless the signal is ignored by a parent's choice
