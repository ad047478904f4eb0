"""`kfchaos run --local` for people: kfp.local's executor dumps and warnings go to a log file; the terminal
shows task progress, a verdict table and the run folder (report.html first).

The pipeline runs in a child `kfchaos run --local` (marked by CHILD_ENV, so it does the plain run), the way
`kfchaos demo` runs it: kfp.local writes its logs to the process's own stdout and stderr, which only a
parent process can keep off the terminal.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

import yaml

from kfchaos import safefile, termination
from kfchaos.demo.stack import lifetime
from kfchaos.errors import KfchaosError
from kfchaos.kfp.runs import TASK_NAMES_PREFIX, LocalOutcome
from kfchaos.steps.targetlease import CONSOLE_MARK

CHILD_ENV = "KFCHAOS_LOCAL_RUN_CHILD"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TASK_LINE = re.compile(r"Task '(?P<task>[^']+)' finished with status (?P<status>\w+)")


def task_names_line(line: str) -> dict[str, str] | None:
    """The child's map of task keys to KFP display names (kfchaos.kfp.runs.TASK_NAMES_PREFIX), when `line` is it."""
    import json

    if not line.startswith(TASK_NAMES_PREFIX):
        return None
    try:
        names = json.loads(line[len(TASK_NAMES_PREFIX) :])
    except ValueError:
        return None
    return {str(k): str(v) for k, v in names.items()} if isinstance(names, dict) else None


def progress_line(line: str) -> tuple[str, str] | None:
    """(task, status) when `line` is kfp.local's "Task ... finished with status ..." line."""
    match = _TASK_LINE.search(_ANSI.sub("", line))
    return (match["task"], match["status"].lower()) if match else None


def follow_output(lines: Iterable[str], log_file: IO[str], on_task: Callable[[str, str], None] | None) -> None:
    """Copy the child's output to the log; each finished task to `on_task` under the name KFP's UI gives it, and
    what the target's lease says (whom the run waits for) to `on_task` as a note."""
    names: dict[str, str] = {}
    for line in lines:
        log_file.write(line)
        names = task_names_line(line) or names
        if CONSOLE_MARK in line and on_task:
            on_task("target", line.split(CONSOLE_MARK, 1)[1].strip())
        task = progress_line(line)
        if task and on_task:
            on_task(names.get(task[0], task[0]), task[1])


def run_child(
    experiment: Path,
    *,
    root: Path,
    target: str,
    pipeline_root: Path,
    log_path: Path,
    env: dict[str, str] | None = None,
    on_task: Callable[[str, str], None] | None = None,
    extra: list[str] | None = None,
) -> LocalOutcome:
    """Run the pipeline in a child process; its output goes to `log_path`, finished tasks to `on_task`.

    The child leads a process group of its own, with the tasks it starts: Ctrl-C at the terminal reaches only this
    process, and SIGTERM or SIGINT here (or an exception, Ctrl-C in `kfchaos demo`) is passed to the whole group as
    SIGTERM, as a kubelet's reaches a pod's processes. The running task removes its faults and keeps its records
    (kfchaos.steps.stopping), the child lets the exit handler sweep the rest (kfchaos.kfp.runs.run_local), and
    this process waits for that (up to STOP_GRACE_S, then kills the group). The outcome is INTERRUPTED then."""
    from kfchaos.kfp.runs import read_local_outcome, run_root

    name = yaml.safe_load(experiment.read_text())["metadata"]["name"]
    own_root = run_root(pipeline_root, name)  # this run's alone: its outputs and its id are found there
    command = [sys.executable, "-m", "kfchaos", "run", str(experiment), "--local", "--target", target,
               "--root", str(root), "--output", str(own_root), *(extra or [])]  # fmt: skip
    started = time.time()
    with safefile.stream(log_path, private=True) as raw, io.TextIOWrapper(raw, encoding="utf-8") as log_file:
        # Tied to this process: if it dies, however it dies (SIGKILL included), the child is sent SIGTERM and ends
        # its whole group, the tasks kfp.local started among them (kfchaos.kfp.runs, `_stopping`).
        process: subprocess.Popen[str] = lifetime.spawn(
            command,
            death_signal=signal.SIGTERM,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {}), CHILD_ENV: "1"},
            start_new_session=True,
        )
        assert process.stdout is not None
        group = _ChildGroup(process)
        try:
            with group.forwarding():
                follow_output(process.stdout, log_file, on_task)
                process.wait()
        except BaseException:
            group.stop(signal.SIGTERM)
            follow_output(process.stdout, log_file, None)  # its last words, until the group is gone
            process.wait()
            raise
        finally:
            group.end_leftovers()
            group.done()
    stopped_by = group.signum
    if stopped_by is None and process.returncode in (termination.EXIT_TERMINATED, termination.EXIT_INTERRUPTED):
        stopped_by = process.returncode - 128  # the child alone was told to stop
    try:
        return read_local_outcome(own_root, name, since=started, stopped_by=stopped_by)
    except KfchaosError:
        raise KfchaosError(f"the pipeline run wrote no outputs; its log is {log_path}{_cause_text(log_path)}") from None


# kfp.local's line when a task fails (kfp/local/pipeline_orchestrator.py: "Pipeline ... finished with status FAILURE.
# Inner task failed: ..."), and the start of a Python traceback, which a failed task's executor prints raw.
_INNER_FAILED = "Inner task failed:"
_TRACEBACK = "Traceback (most recent call last):"
CAUSE_LINES = 8


def failure_cause(log_path: Path, limit: int = CAUSE_LINES) -> list[str]:
    """Why the run failed, from its log: kfp.local's line naming the task that failed, and the last traceback's
    exception, at most `limit` lines; without a traceback, the last lines that say error. Empty when the log says
    neither. kfp.local streams a task's output indented (kfp/local/logging_utils.py, "Streamed logs"): a
    traceback's frames are indented past its first line, its exception is back at that line's indentation."""
    try:
        lines = [_ANSI.sub("", line).rstrip() for line in log_path.read_text(errors="replace").splitlines()]
    except OSError:
        return []
    task = [line.strip() for line in lines if _INNER_FAILED in line][-1:]
    starts = [i for i, line in enumerate(lines) if line.strip() == _TRACEBACK]
    if not starts:
        return [*task, *[line.strip() for line in lines if re.search(r"\berror\b", line, re.I)][-limit:]]
    start = starts[-1]
    indent = len(lines[start]) - len(lines[start].lstrip())
    cause: list[str] = []
    for line in lines[start + 1 :]:
        depth = len(line) - len(line.lstrip())
        if not line.strip() or depth < indent:
            if cause or depth < indent:
                break  # the exception ended, or the task's output did
            continue
        if depth == indent:
            cause.append(line.strip())  # the exception and its message's lines
        elif cause:
            break  # indented again after the exception: not part of it
        if len(cause) == limit:
            break
    return [*task, *cause]


def _cause_text(log_path: Path) -> str:
    cause = failure_cause(log_path)
    return ("\n  " + "\n  ".join(cause)) if cause else ""


# How long a stopped local run may take to remove its faults and run its exit handler before its processes are killed.
STOP_GRACE_S = 120.0
# How long the tasks a killed child left behind get to remove their faults (kfchaos.steps.stopping) before SIGKILL.
LEFTOVER_GRACE_S = 5.0


class _ChildGroup:
    """The child's process group, told to stop once (SIGTERM to every process in it), killed after STOP_GRACE_S."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.signum: int | None = None
        self._timer: threading.Timer | None = None

    def stop(self, signum: int) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        self._signal(signal.SIGTERM)
        self._timer = threading.Timer(STOP_GRACE_S, self._signal, (signal.SIGKILL,))
        self._timer.daemon = True
        self._timer.start()

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)

    @contextlib.contextmanager
    def forwarding(self) -> Iterator[None]:
        """SIGTERM and SIGINT here stop the group (handled in the main thread only, where signals arrive)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def forward(signum: int, frame: FrameType | None) -> None:
            self.stop(signum)

        previous = {signum: signal.signal(signum, forward) for signum in termination.SIGNALS}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def end_leftovers(self) -> None:
        """The child has exited: whatever of its group outlived it (kfp.local's tasks, when the child itself was
        killed and could not end them) gets SIGTERM, and SIGKILL after LEFTOVER_GRACE_S. Nothing when the group is
        empty, as after every run that ended by itself."""
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        signum = signal.SIGTERM
        while True:
            try:
                os.killpg(self.process.pid, signum)
            except (ProcessLookupError, PermissionError):
                return  # the group is empty
            if signum == signal.SIGKILL:
                return
            time.sleep(0.1)
            if time.monotonic() >= deadline:
                signum = signal.SIGKILL

    def done(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def child_run_folder(log_path: Path) -> tuple[str | None, str | None]:
    """(run folder, "report: ..." line): the child writes the run folder (kfchaos.rundir) and names it and its
    report on its last lines."""
    tail = [line.strip() for line in log_path.read_text(errors="replace").splitlines()[-20:]]
    folder = next((line.removeprefix("run folder: ") for line in tail if line.startswith("run folder: ")), None)
    report = next((line for line in tail if line.startswith("report: ")), None)
    return folder, report


def verdict_table(document: dict[str, Any]) -> str:
    """Stage x check, status and reason: what an SRE reads first."""
    rows = [("stage", "check", "status", "reason")]
    for stage in document.get("stages", []):
        for check in stage.get("checks", []):
            rows.append(
                (f"{stage.get('stage')}%", str(check.get("name")), str(check.get("status")), str(check.get("reason")))
            )
    if len(rows) == 1:
        rows += [("-", "-", str(document.get("status")), reason) for reason in document.get("reasons", [])]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(f"  {row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}" for row in rows)


def main(experiment: Path, *, root: Path, target: str, pipeline_root: Path, runs_root: Path) -> int:
    def progress(task: str, status: str) -> None:
        print(f"  {datetime.now().strftime('%H:%M:%S')}  {task:<22} {status}", flush=True)

    # Not beside the run folders in the pipeline root: nothing else may match "<name>-*" there. One folder per run
    # (time and a random part), never one log shared by two runs started in the same second.
    log_path = safefile.unique_folder(pipeline_root / ".logs", experiment.stem) / "pipeline.log"
    print(f"running {experiment} with kfp.local (task logs: {log_path})", flush=True)
    outcome = run_child(
        experiment,
        root=root,
        target=target,
        pipeline_root=pipeline_root,
        log_path=log_path,
        on_task=progress,
        extra=["--runs", str(runs_root)],
    )
    folder, report = child_run_folder(log_path)
    verdict_file = Path(folder) / "verdict.json" if folder else None
    if verdict_file is not None and verdict_file.is_file():
        import json

        print()
        print(verdict_table(json.loads(verdict_file.read_text())))
    print()
    print(outcome.summary())
    if outcome.status == "ERROR":
        print(f"the failed task's last error lines (whole log: {log_path}):{_cause_text(log_path) or ' none found'}")
    for line in (f"run folder: {folder}" if folder else None, report):
        if line:
            print(line)
    return outcome.exit_code
