"""The local fault backend against the real demo stack: apply, verify, remove, sweep, pod-kill."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from kfchaos.demo.faults.local_backend import LocalFaultBackend
from kfchaos.demo.stack.demostack import DemoStack, ServerSettings
from kfchaos.errors import KfchaosError
from kfchaos.validate import load_experiment, parse_experiment

DEMO = Path(__file__).resolve().parents[2] / "src" / "kfchaos" / "demo" / "experiments" / "demo-llm-chaos.yaml"


@pytest.fixture(scope="module")
def stack() -> Iterator[DemoStack]:
    with DemoStack(ServerSettings(restart_delay_s=0.3), with_prometheus=False) as running:
        yield running


def _backend(stack: DemoStack, run_id: str, text: str | None = None) -> LocalFaultBackend:
    experiment = parse_experiment(text, "x.yaml") if text else load_experiment(DEMO)
    return LocalFaultBackend(experiment, run_id, stack.control_url, stack.state_file)


def _latency(stack: DemoStack) -> float:
    started = time.monotonic()
    requests.get(f"{stack.target_url}/health", timeout=10)
    return time.monotonic() - started


def test_network_delay_is_applied_verified_and_removed(stack: DemoStack) -> None:
    backend = _backend(stack, "run-a")
    (delay,) = [f for f in backend.experiment.spec.faults if f.type == "network-delay"]
    backend.preflight([delay])
    handle = backend.apply(delay)
    assert backend.apply(delay).record["created_at"] == handle.record["created_at"], "apply is idempotent"
    injected = backend.wait_injected(handle)
    assert injected["injected"] and injected["injected_at"] == handle.record["created_at"]  # the proxy's own time
    assert _latency(stack) >= 0.19
    backend.remove(handle)
    backend.wait_recovered(handle, timeout=5)
    assert _latency(stack) < 0.15
    assert [e["verb"] for e in backend.events][:2] == ["GET", "PUT"]


def test_a_later_stage_finds_the_fault_and_sees_it_stop_when_it_expires(stack: DemoStack) -> None:
    # The proxy drops a fault at created_at + duration_s, as Chaos Mesh stops one at creation + duration.
    text = DEMO.read_text().replace("      type: network-delay\n", "      type: network-delay\n      duration: 1s\n", 1)
    backend = _backend(stack, "run-exp", text)
    (delay,) = [f for f in backend.experiment.spec.faults if f.type == "network-delay"]
    backend.apply(delay)
    later = _backend(stack, "run-exp", text).handle_of(delay)  # another task, same run: found by its name
    assert backend.is_active(later)
    deadline = time.monotonic() + 30
    while backend.is_active(later):
        assert time.monotonic() < deadline, "the proxy never expired the fault"
        time.sleep(0.05)
    assert not backend.is_active(later) and backend.sweep() == 0


def test_sweep_removes_every_fault_of_the_run_and_only_those(stack: DemoStack) -> None:
    mine, other = _backend(stack, "run-b"), _backend(stack, "run-c")
    (delay,) = [f for f in mine.experiment.spec.faults if f.type == "network-delay"]
    mine.apply(delay)
    kept = other.apply(delay)
    assert mine.sweep() == 1
    assert other.wait_injected(kept)["injected"]
    assert other.sweep() == 1
    assert requests.get(f"{stack.control_url}/faults", timeout=5).json()["items"] == []


def test_pod_kill_kills_the_server_and_it_comes_back(stack: DemoStack) -> None:
    text = DEMO.read_text().replace("type: network-delay\n      mode: all\n      params:\n        latency: 200ms",
                                    "type: pod-kill\n      mode: one")  # fmt: skip
    backend = _backend(stack, "run-d", text)
    kill = backend.experiment.spec.faults[0]
    assert kill.type == "pod-kill"
    before = json.loads(stack.state_file.read_text())["restarts"]
    handle = backend.apply(kill)
    backend.wait_recovered(handle, timeout=20)
    assert json.loads(stack.state_file.read_text())["restarts"] == before + 1


def test_faults_that_need_a_cluster_are_refused_at_preflight(stack: DemoStack) -> None:
    text = DEMO.read_text().replace("type: network-delay\n      mode: all\n      params:\n        latency: 200ms",
                                    "type: stress-cpu\n      mode: all")  # fmt: skip
    backend = _backend(stack, "run-e", text)
    with pytest.raises(KfchaosError, match="needs a cluster"):
        backend.preflight(list(backend.experiment.spec.faults))


def test_an_unreachable_proxy_is_a_clear_error(tmp_path: Path) -> None:
    backend = LocalFaultBackend(load_experiment(DEMO), "run-f", "http://127.0.0.1:9", tmp_path / "none.json")
    with pytest.raises(KfchaosError, match="unreachable"):
        backend.sweep()
