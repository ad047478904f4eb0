"""Processes that die with their parent, so that nothing outlives a killed demo.

Linux's PR_SET_PDEATHSIG (prctl(2)) has the kernel signal a child when its parent dies, however it dies
(SIGKILL included). prctl(2): the signal is sent "upon subsequent termination of the parent thread", the
thread that forked, not the process: so every stack process is forked from one thread that lives as long as
the process (`spawn`), never from a short-lived worker thread (the demo starts its next stack in one). A parent
that died between the fork and the prctl call would never signal: the child checks and ends itself.
Elsewhere (no prctl) the stack record and `kfchaos demo down` are the only guard.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def die_with_parent(parent: int | None = None, signum: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` that has the child sent `signum` (default SIGKILL) when `parent` (default: this process) dies;
    None off Linux. A child given SIGTERM ends itself and what it started (kfchaos.kfp.runs: a local run's tasks)."""
    if _LIBC is None:
        return None
    libc, expected = _LIBC, os.getpid() if parent is None else parent

    def child() -> None:  # runs in the child between fork and exec: no allocation-heavy work here
        libc.prctl(PR_SET_PDEATHSIG, signum)
        if os.getppid() != expected:
            os.kill(os.getpid(), signum)

    return child


class _Spawner:
    """One daemon thread that forks every tied process (see the module docstring: the death signal follows the
    forking thread). It lives until the process exits."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            call, future = self._requests.get()
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to the caller, whatever it is
                future.set_exception(exc)

    def run(self, call: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="kfchaos-spawner", daemon=True)
                self._thread.start()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._requests.put((call, future))
        return future.result()


_SPAWNER = _Spawner()


def spawn(
    command: list[str], *, tied: bool = True, death_signal: int = signal.SIGKILL, **options: Any
) -> subprocess.Popen[Any]:
    """`subprocess.Popen(command, **options)`; when `tied`, the child is sent `death_signal` when this process
    dies."""
    if not tied or _LIBC is None:
        return subprocess.Popen(command, **options)
    preexec = die_with_parent(signum=death_signal)
    return _SPAWNER.run(lambda: subprocess.Popen(command, preexec_fn=preexec, **options))
