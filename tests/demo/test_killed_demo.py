"""Issue 35 §5: nothing outlives a killed local run. A real `kfchaos demo` is SIGKILLed in the middle of its stage,
while kfp.local runs the replay task; ten seconds later no process it started is alive: not its stack (tied to it
already), and not the pipeline's tasks (`kfchaos run --local` in its own process group, kfp.local's executor and
its shell, the replay). Before, the demo's child run and its tasks lived on: nobody was left to stop them."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.demo.test_concurrent_runs import DEMO
from tests.demo.test_rejudge import PASSING
from tests.demo.test_scenarios import _write
from tests.demo.test_stack import _alive
from tests.kfp_glue.conftest import copy_sources

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="the demo needs Prometheus (`make prometheus`)"),
]
ROOT = Path(__file__).resolve().parents[2]
START_BOUND_S = 300  # the stack, the baseline and the pipeline up to its stage, on a busy machine
GONE_S = 10.0  # the bound: a user's kill leaves nothing running ten seconds later


def _descendants(root: int) -> dict[int, str]:
    """Every live process below `root` (from /proc), with its command line."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            with contextlib.suppress(OSError):
                found[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                todo.append(child)
    return found


def _demo_in_its_stage(tmp_path: Path) -> subprocess.Popen[str]:
    """A real demo, returned once its stage's replay task is sending (its stage lasts a minute)."""
    scenarios = tmp_path / "scenarios"
    _write(scenarios, "tiny-delay", PASSING.replace("stage_duration: 5s", "stage_duration: 60s"))
    repo = copy_sources(tmp_path / "repo")
    command = [sys.executable, "-c", DEMO, str(repo), str(tmp_path / "runs"), str(scenarios)]
    demo = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.SimpleQueue[str] = queue.SimpleQueue()
    threading.Thread(target=lambda: [lines.put(line) for line in demo.stdout or ()], daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + START_BOUND_S
    while not any("gate: steady state" in line and "success" in line for line in seen):  # the stage is next
        assert demo.poll() is None, "".join(seen)[-3000:]
        assert time.monotonic() < deadline, "".join(seen)[-3000:]
        with contextlib.suppress(queue.Empty):
            seen.append(lines.get(timeout=1.0))
    time.sleep(8.0)
    return demo


def _gone(pids: dict[int, str]) -> dict[int, str]:
    """Those of `pids` still alive GONE_S later (none, as soon as all are gone)."""
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    return {pid: cmd for pid, cmd in pids.items() if _alive(pid)}


def _end(demo: subprocess.Popen[str], left: dict[int, str]) -> None:
    for pid in [*left, *(_descendants(demo.pid) if demo.poll() is None else {})]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        demo.kill()


def test_no_process_of_a_sigkilled_demo_is_alive_ten_seconds_later(tmp_path: Path) -> None:
    demo = _demo_in_its_stage(tmp_path)
    left: dict[int, str] = {}
    try:
        before = _descendants(demo.pid)
        assert any("kfp" in cmd and "executor" in cmd for cmd in before.values()), before  # the tasks are there
        assert any("run" in cmd and "--local" in cmd for cmd in before.values()), before
        demo.kill()  # SIGKILL: the demo cannot clean up after itself
        demo.wait(timeout=30)
        left = _gone(before)
        assert not left, f"alive {GONE_S:g}s after the demo was killed: {left}"
    finally:
        _end(demo, left)


def test_no_task_of_a_sigkilled_local_run_is_alive_ten_seconds_later(tmp_path: Path) -> None:
    """The run's own process (`kfchaos run --local` under the demo) SIGKILLed: it cannot end its tasks, the demo,
    which started it, does. Before, its replay task and the task's shell lived on."""
    demo = _demo_in_its_stage(tmp_path)
    left: dict[int, str] = {}
    try:
        before = _descendants(demo.pid)
        (run,) = [pid for pid, cmd in before.items() if "run" in cmd and "--local" in cmd]
        tasks = {pid: cmd for pid, cmd in _descendants(run).items()}
        assert any("kfp" in cmd and "executor" in cmd for cmd in tasks.values()), tasks
        os.kill(run, signal.SIGKILL)
        left = _gone({run: before[run], **tasks})
        assert not left, f"alive {GONE_S:g}s after the run was killed: {left}"
        demo.wait(timeout=START_BOUND_S)  # the demo goes on to its end, the run failed before its verdict
        assert demo.returncode != 0
    finally:
        _end(demo, left)
