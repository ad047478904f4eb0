"""Nothing outlives a killed run: a SIGKILLed demo leaves no process, a fault ends with its controller, and two
demos never share a work folder. Every wait here is bounded, and the test ends whatever it started."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kfchaos import safefile
from kfchaos.demo.faults.proxy import FaultProxy, parse_fault
from kfchaos.demo.runner import up
from kfchaos.demo.stack.demostack import RECORD_NAME, DemoStack, ServerSettings

STACK_OWNER = """
import sys, time
from pathlib import Path
from kfchaos.demo.stack.demostack import DemoStack, ServerSettings
stack = DemoStack(ServerSettings(), workdir=Path(sys.argv[1]), with_prometheus=sys.argv[2] == "1").start()
print("ready", flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
            return False
    return True


def _wait_gone(pids: list[int], limit_s: float = 60.0) -> list[int]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_a_sigkilled_demo_leaves_no_process_behind(tmp_path: Path) -> None:
    workdir = tmp_path / ".work" / "demo-1"
    prometheus = "1" if shutil.which("prometheus") else "0"
    owner = subprocess.Popen(
        [sys.executable, "-c", STACK_OWNER, str(workdir), prometheus],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == b"ready"
        pids = json.loads((workdir / RECORD_NAME).read_text())["pids"]
        server = json.loads((workdir / "server-state.json").read_text())["pid"]
        pids.append(server)
        assert len(pids) >= 3 and all(_alive(p) for p in pids)
        assert safefile.in_use(workdir)  # the live stack holds its folder
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=30)
        assert _wait_gone(pids) == [], "stack processes outlived their killed parent"
        assert not safefile.in_use(workdir)
        assert up.down(tmp_path) == 0  # nothing left to stop; the stale record is removed
        assert not (workdir / RECORD_NAME).exists()
    finally:
        for pid in [owner.pid, *pids]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_demo_down_ends_what_a_dead_stacks_record_names(tmp_path: Path) -> None:
    workdir = tmp_path / ".work" / "demo-2"
    workdir.mkdir(parents=True)
    # A process left by a stack whose owner died where nothing killed it (no PR_SET_PDEATHSIG): named in the
    # record, its own process group, "kfchaos.demo" in its command line as every stack process has.
    left = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)", "kfchaos.demo"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert left.stdout is not None and left.stdout.readline().strip() == b"ready"  # its command line is set
        (workdir / RECORD_NAME).write_text(json.dumps({"owner": 1, "tied": True, "pids": [left.pid]}))
        assert up.down(tmp_path, grace_s=10) == 1
        left.wait(timeout=30)
        assert not (workdir / RECORD_NAME).exists()
    finally:
        with contextlib.suppress(OSError):
            left.kill()
        left.wait(timeout=30)


def test_cleanup_ends_what_a_dead_stacks_record_names(tmp_path: Path) -> None:
    from kfchaos.cli import main

    workdir = tmp_path / ".work" / "demo-4"
    workdir.mkdir(parents=True)
    left = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)", "kfchaos.demo"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert left.stdout is not None and left.stdout.readline().strip() == b"ready"
        (workdir / RECORD_NAME).write_text(json.dumps({"owner": 1, "tied": True, "pids": [left.pid]}))
        assert main(["cleanup", "--demo-runs", str(tmp_path)]) == 0
        left.wait(timeout=30)
        assert not (workdir / RECORD_NAME).exists()
    finally:
        with contextlib.suppress(OSError):
            left.kill()
        left.wait(timeout=30)


def test_demo_down_leaves_a_live_stack_alone(tmp_path: Path) -> None:
    workdir = tmp_path / ".work" / "demo-3"
    workdir.mkdir(parents=True)
    (workdir / RECORD_NAME).write_text(json.dumps({"owner": os.getpid(), "tied": True, "pids": [os.getpid()]}))
    with safefile.locked(workdir):
        assert up.down(tmp_path, grace_s=1) == 0
    assert (workdir / RECORD_NAME).exists()


@pytest.mark.parametrize("reap", [True, False])
def test_a_proxy_fault_ends_when_its_controller_dies(reap: bool) -> None:
    controller = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        proxy = FaultProxy("http://127.0.0.1:9")
        body = {"type": "http-abort", "duration_s": 600, "owner_pid": controller.pid}
        proxy.faults["f"] = parse_fault("f", body)
        assert [f.name for f in proxy.active()] == ["f"]
        controller.kill()
        if reap:
            controller.wait(timeout=30)
        deadline = time.monotonic() + 30
        while proxy.active() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proxy.active() == [], "the fault outlived its controller"
    finally:
        controller.kill()
        controller.wait(timeout=30)


def test_two_demos_started_in_the_same_second_never_share_a_work_folder(tmp_path: Path) -> None:
    first = safefile.unique_folder(tmp_path, "steady")
    second = safefile.unique_folder(tmp_path, "steady")
    assert first != second and first.is_dir() and second.is_dir()
    assert first.name.startswith("steady-")


def test_a_work_folder_in_use_is_refused_to_a_second_stack(tmp_path: Path) -> None:
    with safefile.locked(tmp_path):
        stack = DemoStack(ServerSettings(), workdir=tmp_path, with_prometheus=False)
        with pytest.raises(safefile.FolderBusy):
            stack.start()
        assert stack.processes == []
