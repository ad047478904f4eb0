"""A step told to stop: SIGTERM from the kubelet (its pod evicted or deleted, the run cancelled), or from
`kfchaos run --local` when that is stopped.

A step that injects faults or sends traffic runs `guarded` (kfchaos.termination.Guard): on the signal every fault
the step holds is removed at once, in its own thread (kfchaos.steps.stagefaults registers the removal), while a
replay in progress stops and writes its records, marked as cut by the signal; then the step waits for the
removal (bounded), removes once more what a create in flight may have left, says what it did, and dies by the
signal. It does not end normally: its task failed, so the run goes no further and its exit handler sweeps whatever
else the run left (faults between two stages' tasks are held by none).

In a pod the signal reaches the step together with its parents: Argo's emissary forwards it to the whole process
group of the command it runs (argoproj/argo-workflows cmd/argoexec/commands/emissary.go forwards every signal
with workflow/executor/osspecific's `Kill`, `syscall.Kill(-pgid, s)` (signal_linux.go is signal_darwin.go); the
group is made by command_unix.go's `Setpgid`), which holds KFP's launcher and, under it, this step
(kubeflow/pipelines backend/src/v2/component/launcher_v2.go runs it with a plain `exec.Command`).
The launcher sets no handler, so Go ends it at once; the emissary notices within a second (its `Wait` polls
`wait4` once a second) and the container ends, which kills what is left. So the removal starts first, before the
records are written, and nothing waits for a reply before the next fault's delete is sent.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from kfchaos import termination

P = ParamSpec("P")
R = TypeVar("R")


def guarded(step: Callable[P, R]) -> Callable[P, R]:
    """Run `step` under a termination guard (see the module docstring). Refuses to begin in a run already stopped
    (kfchaos.termination.INTERRUPTED_ENV): such a step would inject or send after the stop."""

    @functools.wraps(step)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        stopped_by = os.environ.get(termination.INTERRUPTED_ENV, "")
        if stopped_by:
            print(f"kfchaos: {step.__name__}: the run was stopped by {stopped_by} before this step began; it "
                  "injects and sends nothing", file=sys.stderr)  # fmt: skip
            termination.die(getattr(signal.Signals, stopped_by, signal.SIGTERM))
        if termination.current() is not None or threading.current_thread() is not threading.main_thread():
            return step(*args, **kwargs)  # guarded already (a step calling a step), or no signal can reach here
        with termination.Guard() as guard:
            try:
                return step(*args, **kwargs)
            except termination.Interrupted as stopped:
                _finish(step.__name__, guard, stopped)
                raise  # not reached: _finish ends the process

    return run


def _finish(name: str, guard: termination.Guard, stopped: termination.Interrupted) -> None:
    finished = guard.wait_cleanups()
    guard.run_cleanups_again()  # a create whose reply the signal cut may have landed after the first removal
    waited = termination.CLEANUP_WAIT_S
    state = "its faults removed" if finished else f"its faults' removal still running after {waited:g}s"
    print(f"kfchaos: {name}: {stopped}: {state}; the exit handler sweeps the run's others", file=sys.stderr)
    termination.die(stopped.signum)


def replay_stopping(run: Callable[[bool], R]) -> R:
    """Run a replay, `run(signals)`: under a step's guard with `signals` on, so that SIGTERM ends the stage with its
    records written and marked as cut (kfchaos.traffic.engine.run_stage), and then stops the step."""
    guard = termination.current()
    if guard is None:
        return run(False)
    with guard.deferred():
        result = run(True)
    guard.check()
    return result
