"""GPU memory pressure: the allocator pod's manifest, the backend path for it, and the allocator's logic
(share, chunking, shortfall, signal handling) on a simulated device, since tests run without a GPU."""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from kfchaos.errors import SpecError
from kfchaos.faults.backend import InjectionTimeout
from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.faults.gpu import READY_FILE
from kfchaos.faults.gpu_allocator import (
    EXIT_SHORT,
    MIB,
    Allocator,
    OutOfDeviceMemory,
    SimulatedDevice,
    bytes_to_take,
    chunk_sizes,
    requested_bytes,
)
from kfchaos.faults.render import render_experiment
from tests.conftest import ROOT
from tests.faults.experiments import experiment_with
from tests.support.kubeapi import KubeApiServer

GPU_FAULT: dict[str, Any] = {
    "name": "gpu-squeeze",
    "type": "gpu-memory-pressure",
    "stages": [60],
    "params": {"share": "30%"},
}
GIB = 1 << 30


def _pod(**params: Any) -> dict[str, Any]:
    fault = {**GPU_FAULT, "params": {**GPU_FAULT["params"], **params}}
    return render_experiment(experiment_with(fault), "run-gpu")[0]


def test_pod_manifest_valid_against_kubernetes_schema() -> None:
    pod = _pod(image="registry.example/cuda-python:12")
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    spec = pod["spec"]
    # one 10m stage + the 30 s target timeout its last requests may take + 30 s for it to be ready (INJECT_ALLOWANCE)
    assert spec["activeDeadlineSeconds"] == 660
    assert spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert container["command"][container["command"].index("--share") + 1] == "0.3"
    assert container["readinessProbe"]["exec"]["command"] == ["test", "-f", READY_FILE]
    term = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["labelSelector"] == {"matchLabels": {"app.kubernetes.io/name": "vllm"}}
    assert pod["metadata"]["labels"]["kfchaos.io/run-id"] == "run-gpu"


def test_pod_validator_can_fail() -> None:
    pod = _pod()
    pod["spec"]["activeDeadlinSeconds"] = 5
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)


def test_duration_capped_for_pod() -> None:
    fault = {**GPU_FAULT, "stages": None}
    data = render_experiment(
        experiment_with(fault, safety={"max_pod_percent": "100%", "max_fault_duration": "15m"}), "r"
    )[0]
    assert data["spec"]["activeDeadlineSeconds"] == 900


def test_exec_method_is_refused_at_validation_not_at_apply() -> None:
    with pytest.raises(SpecError, match="method exec is not implemented"):
        _pod(method="exec")


def test_the_pod_image_follows_kfchaos_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFCHAOS_IMAGE", "registry.internal/kfchaos:dev")
    assert _pod()["spec"]["containers"][0]["image"] == "registry.internal/kfchaos:dev"


def test_no_free_gpu_on_the_pinned_node_fails_at_once(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    """nodeName skips the scheduler; the kubelet rejects the pod (Failed, OutOfnvidia.com/gpu) and the wait
    ends at once instead of running out its timeout."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-0"},
            "status": {"allocatable": {"nvidia.com/gpu": "1"}}}  # fmt: skip
    server.add_object("nodes", node)
    (target,) = [p for p in server.objects("pods", "llm-serving") if p["metadata"]["name"] == "vllm-0"]
    server.remove_pod("llm-serving", "vllm-0")
    target["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}  # vLLM holds the GPU
    body = server.add_pod("llm-serving", "vllm-0", target["metadata"]["labels"], node="gpu-node-0")
    body["spec"]["containers"] = target["spec"]["containers"]
    handle = backend.apply(_pod())
    started = time.monotonic()
    with pytest.raises(InjectionTimeout, match=r"Failed, OutOfnvidia.com/gpu: Pod was rejected: Node didn't have"):
        backend.wait_injected(handle, timeout=120)
    assert time.monotonic() - started < 60  # not the 120 s timeout
    backend.sweep("run-gpu", ["llm-serving"], timeout=5)


def test_holding_less_than_asked_is_never_ready(tmp_path: Path) -> None:
    """vLLM preallocates ~90 % of the GPU: asked 30 %, the allocator can take ~10 %; it says so, writes no
    ready file (the pod is never ready, so never injected) and exits 4."""
    ready = tmp_path / "held"
    done = subprocess.run(
        [sys.executable, "-m", "kfchaos.faults.gpu_allocator", "--share", "0.3", "--duration", "60",
         "--ready-file", str(ready), "--simulate", str(8 * GIB), "--simulate-used", str(int(7.2 * GIB)),
         "--chunk-mib", "64"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == EXIT_SHORT, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    short = events[0]
    assert short["event"] == "short" and short["held"] < short["target"] == int(0.3 * 8 * GIB)
    assert "not injected" in done.stderr and not ready.exists()


def test_backend_pins_pod_to_target_node_and_sweeps_it(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    pod = _pod()
    report = backend.preflight([pod])
    assert report.matching_pods == {pod["metadata"]["name"]: 3}
    handle = backend.apply(pod)
    injected = backend.wait_injected(handle, timeout=5)
    assert injected.targets == ["node/gpu-node-0"]  # the first running target pod's node
    (stored,) = [p for p in server.objects("pods") if p["metadata"]["name"] == pod["metadata"]["name"]]
    assert stored["spec"]["nodeName"] == "gpu-node-0"
    assert backend.sweep("run-gpu", ["llm-serving"], timeout=5) == 1
    assert [p["metadata"]["name"] for p in server.objects("pods", "llm-serving")] == ["vllm-0", "vllm-1", "vllm-2"]


# ---------------------------------------------------------------- allocator logic


def test_requested_and_takeable_bytes() -> None:
    assert requested_bytes(0.3, total=80 * GIB) == int(0.3 * 80 * GIB)
    assert requested_bytes(1.0, total=GIB) == GIB
    # Less free than asked for: take what is free, minus the reserve.
    assert bytes_to_take(72 * GIB, free=10 * GIB, reserve=GIB) == 9 * GIB
    assert bytes_to_take(GIB, free=0, reserve=GIB) == 0
    assert bytes_to_take(GIB, free=80 * GIB, reserve=GIB) == GIB
    for bad in (0, -0.1, 1.5):
        with pytest.raises(ValueError):
            requested_bytes(bad, total=GIB)


def test_chunk_sizes() -> None:
    assert chunk_sizes(0, 256) == []
    assert chunk_sizes(1000, 256) == [256, 256, 256, 232]
    assert sum(chunk_sizes(10 * GIB + 1)) == 10 * GIB + 1


def test_hold_takes_share_then_frees() -> None:
    device = SimulatedDevice(total=8 * GIB)
    seen: list[tuple[int, int, int]] = []

    def on_held(held: int, target: int, total: int) -> None:
        seen.append((held, target, total))
        assert sum(device.allocations.values()) == held  # really held while "held" is reported

    result = Allocator(device, chunk=256 * MIB, reserve=0).hold(0.25, duration=0.0, on_held=on_held)
    assert seen == [(2 * GIB, 2 * GIB, 8 * GIB)]
    assert (result.held, result.chunks, result.freed, result.stopped_by) == (2 * GIB, 8, True, "duration")
    assert device.allocations == {}


def test_hold_with_others_using_memory_reports_shortfall() -> None:
    device = SimulatedDevice(total=8 * GIB, used=7 * GIB)
    result = Allocator(device, chunk=256 * MIB, reserve=256 * MIB).hold(0.5, duration=0.0)
    assert result.held == 768 * MIB and result.shortfall == 4 * GIB - 768 * MIB
    assert device.allocations == {}


class _Flaky(SimulatedDevice):
    """Another process grabs memory after the third chunk."""

    def allocate(self, size: int) -> int:
        if len(self.allocations) == 3:
            raise OutOfDeviceMemory("taken")
        return super().allocate(size)


def test_hold_keeps_what_it_got_when_allocation_fails() -> None:
    device = _Flaky(total=8 * GIB)
    result = Allocator(device, chunk=GIB, reserve=0).hold(0.5, duration=0.0)
    assert (result.held, result.chunks) == (3 * GIB, 3)
    assert device.allocations == {}


def test_stop_ends_the_hold_early() -> None:
    device = SimulatedDevice(total=GIB)
    allocator = Allocator(device, chunk=64 * MIB, reserve=0)
    started = time.monotonic()
    result = allocator.hold(0.5, duration=60, on_held=lambda *_: allocator.stop("SIGTERM"))
    assert time.monotonic() - started < 30
    assert result.stopped_by == "SIGTERM" and device.allocations == {}


def test_sigterm_frees_in_a_real_process(tmp_path: Path) -> None:
    ready = tmp_path / "held"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kfchaos.faults.gpu_allocator",
            "--share",
            "0.5",
            "--duration",
            "120",
            "--ready-file",
            str(ready),
            "--simulate",
            str(4 * GIB),
            "--chunk-mib",
            "512",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        held = json.loads(process.stdout.readline())
        assert held["event"] == "held" and held["held"] == 2 * GIB  # 50 % of 4 GiB
        assert json.loads(ready.read_text())["held"] == held["held"]
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    freed = json.loads(out.strip().splitlines()[-1])
    assert freed["event"] == "freed" and freed["freed"] and freed["stopped_by"] == "SIGTERM"
    assert not ready.exists()


def test_without_a_gpu_the_allocator_says_what_it_needs() -> None:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this machine has a CUDA driver; the no-GPU path cannot be shown here")
    done = subprocess.run(
        [sys.executable, "-m", "kfchaos.faults.gpu_allocator", "--share", "0.1", "--duration", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3
    assert "libcuda.so.1" in done.stderr and "nvidia.com/gpu" in done.stderr
