"""Faults whose Apply goes through chaos-daemon, where none runs (issue 21 §3.3), against the loopback fake: the
fake records each failed Apply as Chaos Mesh's records controller does (a Failed Apply event per attempt,
"cannot find daemonIP on node X"; controllers/common/records/controller.go), kfchaos reports "failed to inject"
with that message after `apply_failure_limit` attempts instead of at its timeout, and a stage under the fault
is INCONCLUSIVE through the same path the pipeline takes (stage step -> fault windows -> verdict).
tests/cluster/test_daemon_faults.py runs the same against the real controller."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from kfchaos.faults.activity import run_fault_windows, stage_activities
from kfchaos.faults.backend import InjectionFailed
from kfchaos.faults.chaosmesh import HOST_ENV, INJECT_TIMEOUT_ENV, RECOVER_TIMEOUT_ENV
from kfchaos.faults.chaosrecords import apply_failures
from kfchaos.spec import Experiment
from kfchaos.steps.seams import BACKEND_ENV
from kfchaos.steps.stagefaults import under_faults
from kfchaos.verdict import Status, Verdict, evaluate
from tests.faults.conftest import make_backend, manifests
from tests.support.kubeapi import KubeApiServer
from tests.verdict.builders import experiment, records
from tests.verdict.fixtures import baseline

# One fault of each kind that needs chaos-daemon (all but pod-kill and pod-failure).
DAEMON_FAULTS: list[dict[str, Any]] = [
    {"name": "delay", "type": "network-delay", "params": {"latency": "100ms"}},
    {"name": "stress", "type": "stress-cpu"},
    {"name": "io", "type": "io-latency", "params": {"volume_path": "/models", "delay": "100ms"}},
    {"name": "http", "type": "http-delay", "params": {"port": 8000, "delay": "1s"}},
    {"name": "clock", "type": "time-offset", "params": {"offset": "-5m"}},
    {"name": "ckill", "type": "container-kill", "containers": ["vllm"]},
]
IDS = [f["type"] for f in DAEMON_FAULTS]
START = 1_000_000.0


@pytest.fixture
def no_daemon() -> Iterator[KubeApiServer]:
    with KubeApiServer(inject_delay=0.05, chaos_daemon=False) as api:
        for index in range(2):
            labels = {"app.kubernetes.io/name": "vllm", "app": "vllm"}
            for namespace in ("llm-serving", "serving"):
                api.add_pod(namespace, f"vllm-{index}", labels, node=f"gpu-node-{index}", containers=["vllm"])
        yield api


@pytest.mark.parametrize("fault", DAEMON_FAULTS, ids=IDS)
def test_a_fault_without_chaos_daemon_fails_with_the_controllers_message(
    no_daemon: KubeApiServer, fault: dict[str, Any]
) -> None:
    backend = make_backend(no_daemon.url)
    (manifest,) = manifests("run-d", {**fault, "mode": "all"})
    handle = backend.apply(manifest)
    with pytest.raises(InjectionFailed) as caught:
        backend.wait_injected(handle, timeout=600)  # far beyond the test: only the failed attempts end it
    message = str(caught.value)
    assert "failed to inject: cannot find daemonIP on node gpu-node-" in message, message
    assert "3 failed Apply attempts in a row" in message and "not injected after" not in message
    # What it read: a record with at least three Failed Apply events, the newest ones.
    (obj,) = no_daemon.chaos_objects()
    failures = apply_failures(obj)
    assert failures and all(f.attempts >= 3 and "cannot find daemonIP" in f.message for f in failures)


def test_a_failure_retried_successfully_does_not_count() -> None:
    """Only the newest run of Failed Apply events counts: an earlier failure followed by a success is over."""
    failed = {"type": "Failed", "operation": "Apply", "message": "conflict", "timestamp": "2026-01-01T00:00:00Z"}
    ok = {"type": "Succeeded", "operation": "Apply", "timestamp": "2026-01-01T00:00:01Z"}
    obj = {
        "kind": "NetworkChaos",
        "status": {
            "experiment": {
                "containerRecords": [
                    {"id": "ns/a", "phase": "Not Injected", "events": [failed, failed, failed, ok, failed]},
                    {"id": "ns/b", "phase": "Injected", "events": [failed, failed, failed]},
                ]
            }
        },
    }
    (failure,) = apply_failures(obj)
    assert (failure.target, failure.attempts, failure.message) == ("ns/a", 1, "conflict")


def test_the_limit_is_the_backends(no_daemon: KubeApiServer) -> None:
    backend = make_backend(no_daemon.url)
    backend.apply_failure_limit = 5
    (manifest,) = manifests("run-l", {**DAEMON_FAULTS[0], "mode": "all"})
    with pytest.raises(InjectionFailed, match="5 failed Apply attempts in a row"):
        backend.wait_injected(backend.apply(manifest), timeout=600)


def judge(spec: Experiment, stage: int, detail: dict[str, Any], table: pa.Table | None = None) -> Verdict:
    """The verdict of `stage` from what its stage step saw, as the pipeline's verdict step reads it back from
    the run state (run_fault_windows -> stage_activities -> evaluate's fault_coverage)."""
    windows = run_fault_windows([{"step": "stage", "stage": stage, "detail": detail}])
    table = table if table is not None else records(stage, np.full(3000, 0.05), start=START)
    return evaluate(table, spec, baseline=baseline(0.25), fault_coverage=stage_activities(windows))


@pytest.mark.parametrize("fault", DAEMON_FAULTS, ids=IDS)
def test_a_stage_under_a_fault_that_failed_to_inject_is_inconclusive(
    no_daemon: KubeApiServer, monkeypatch: pytest.MonkeyPatch, fault: dict[str, Any]
) -> None:
    monkeypatch.setenv(BACKEND_ENV, "chaosmesh")
    monkeypatch.setenv(HOST_ENV, no_daemon.url)
    monkeypatch.setenv(INJECT_TIMEOUT_ENV, "10m")  # only the failed attempts can end the wait
    # A never-injected NetworkChaos, IOChaos or HTTPChaos stays Terminating (Chaos Mesh applies it again on Stop):
    # the stage's removal waits this long before it says so.
    monkeypatch.setenv(RECOVER_TIMEOUT_ENV, "1s")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    text = json.dumps([{**fault, "mode": "one"}])  # JSON is YAML; `all` is over the experiment's 50 % limit
    spec = experiment(stages=[10], faults=text)
    _, detail = under_faults(spec, "run-stage", 10, lambda: {"valid": True})
    (created,) = detail["chaos_objects"]
    assert "failed to inject: cannot find daemonIP on node" in created["injection"]["error"]
    assert detail["fault_windows"][0]["verified"] == []
    stuck = [r for r in detail["reasons"] if "not confirmed removed" in r]
    assert bool(stuck) == (created["kind"] in ("NetworkChaos", "IOChaos", "HTTPChaos")), detail["reasons"]
    verdict = judge(spec, 10, detail)
    check = verdict.stage(10).check("fault_active")
    assert check.status is Status.INCONCLUSIVE and check.gating, check.reason
    assert verdict.stage(10).status is Status.INCONCLUSIVE and verdict.status is Status.INCONCLUSIVE
