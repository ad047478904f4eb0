"""Failure drills: whatever goes wrong in a step, after the sweep (the exit handler) no chaos object remains.

Listed, with what each covers, in docs/faults.md ("Reliability").
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from kfchaos.cli import main
from kfchaos.faults.backend import BackendError
from kfchaos.faults.chaosmesh import ChaosMeshBackend
from tests.conftest import ROOT
from tests.faults.conftest import make_backend, manifests
from tests.support.kubeapi import KubeApiServer

STEP_TIMEOUT = 60


def _start_step(url: str, mode: str, run_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.faults.drill_step", url, mode, run_id],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _sweep_leaves_nothing(server: KubeApiServer, run_id: str) -> int:
    deleted = make_backend(server.url).sweep(run_id, ["llm-serving"], timeout=10)
    assert server.chaos_objects() == []
    assert [p for p in server.objects("pods") if p["metadata"]["labels"].get("kfchaos.io/run-id") == run_id] == []
    return deleted


def test_drill_crash_after_apply(server: KubeApiServer) -> None:
    step = _start_step(server.url, "crash", "run-crash")
    out, err = step.communicate(timeout=STEP_TIMEOUT)
    assert step.returncode == 17, err
    assert out.startswith("applied")
    assert len(server.chaos_objects()) == 2  # the step left its faults behind
    assert _sweep_leaves_nothing(server, "run-crash") == 2


def test_drill_sigterm_during_wait(server: KubeApiServer) -> None:
    server.inject_delay = 600  # never injected while the step waits
    step = _start_step(server.url, "wait", "run-term")
    try:
        assert step.stdout is not None
        assert step.stdout.readline().startswith("applied")
        step.send_signal(signal.SIGTERM)
        step.wait(timeout=STEP_TIMEOUT)
    finally:
        step.kill()
        step.communicate(timeout=STEP_TIMEOUT)
    assert step.returncode == -signal.SIGTERM
    assert len(server.chaos_objects()) == 2
    assert _sweep_leaves_nothing(server, "run-term") == 2


def test_drill_transient_api_errors_during_remove(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    handles = [backend.apply(m) for m in manifests("run-rm")]
    server.fail(500, method="DELETE", times=1)
    server.fail(503, method="DELETE", times=1)
    for handle in handles:
        backend.remove(handle)
        backend.wait_recovered(handle, timeout=5)
    assert [e.code for e in backend.events if e.verb == "delete"] == [500, 503, 200, 200]
    assert _sweep_leaves_nothing(server, "run-rm") == 0


def test_drill_persistent_api_errors_during_remove(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    handles = [backend.apply(m) for m in manifests("run-down")]
    server.fail(500, method="DELETE", times=-1)
    with pytest.raises(BackendError, match="500"):
        backend.remove(handles[0])
    assert len(server.chaos_objects()) == 2
    server.clear_failures()  # the API server recovers; the exit handler runs
    assert _sweep_leaves_nothing(server, "run-down") == 2


def test_drill_retried_apply_after_lost_reply(server: KubeApiServer) -> None:
    server.fail(500, method="POST", after_commit=True)  # the first create is stored; its reply is lost
    first = _start_step(server.url, "apply", "run-retry")
    out1, err1 = first.communicate(timeout=STEP_TIMEOUT)
    assert first.returncode == 0, err1
    again = _start_step(server.url, "apply", "run-retry")  # KFP retries the whole step
    out2, err2 = again.communicate(timeout=STEP_TIMEOUT)
    assert again.returncode == 0, err2
    assert out1 == out2  # the same objects (uids), not new ones
    assert len(server.chaos_objects()) == 2
    assert _sweep_leaves_nothing(server, "run-retry") == 2


def test_drill_sweep_through_finalizers_and_throttling(server: KubeApiServer) -> None:
    backend = make_backend(server.url)
    for manifest in manifests("run-slow"):
        backend.apply(manifest)
    server.finalizer_delay = 0.3
    server.fail(429, method="GET", times=3, retry_after=0)
    server.fail(429, method="DELETE", times=1, retry_after=0)
    assert main(["cleanup", "--run-id", "run-slow", "--namespace", "llm-serving", "--host", server.url]) == 0
    assert server.chaos_objects() == []
