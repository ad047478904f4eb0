"""Fault injection figures: render throughput, and the backend's cost per API call over the plain client.

References measured in the same run: rendering is compared with a bare `copy.deepcopy` of the same
manifests (the floor for building a dict of that size); the backend's apply + sweep with the plain
kubernetes client's create + list + delete of the same objects on the same loopback server.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import kubernetes.client

from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.faults.render import render_experiment
from kfchaos.faults.retry import RetryPolicy
from tests.faults.experiments import experiment_with
from tests.support.kubeapi import KubeApiServer, kubernetes_client

FAULTS = [
    {"name": f"delay-{i}", "type": "network-delay", "params": {"latency": f"{i + 1}ms", "jitter": "1ms"}}
    for i in range(20)
]
OBJECTS = 100


def _timed(fn: Any, repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat


def run() -> None:
    experiment = experiment_with(*FAULTS)
    rendered = render_experiment(experiment, "bench")
    render_s = _timed(lambda: render_experiment(experiment, "bench"), 50)
    copy_s = _timed(lambda: copy.deepcopy(rendered), 50)
    print(
        f"render: {len(FAULTS) / render_s:,.0f} faults/s ({render_s * 1e3:.2f} ms for {len(FAULTS)}); "
        f"deepcopy reference {copy_s * 1e3:.2f} ms; ratio {render_s / copy_s:.1f}x"
    )

    manifests = render_experiment(experiment_with(*[{**FAULTS[0], "name": f"d-{i}"} for i in range(OBJECTS)]), "bench")
    with KubeApiServer() as server:
        # Alternate the two, best of three each, so warm-up and noise from other processes affect both alike.
        backend_runs, plain_runs = [], []
        for _ in range(3):
            backend_runs.append(_backend_round(server.url, manifests))
            plain_runs.append(_plain_round(server.url, manifests))
    backend_s, calls = min(backend_runs)
    plain_s, plain_calls = min(plain_runs)
    print(
        f"backend apply+sweep of {OBJECTS} objects: {backend_s:.3f} s, {calls} API calls "
        f"({backend_s / calls * 1e3:.2f} ms/call, audit events included)"
    )
    print(
        f"plain client create+list+delete of the same: {plain_s:.3f} s, {plain_calls} calls "
        f"({plain_s / plain_calls * 1e3:.2f} ms/call)"
    )
    print(
        f"ratio backend/plain: total {backend_s / plain_s:.2f}x, "
        f"per call {(backend_s / calls) / (plain_s / plain_calls):.2f}x"
    )
    run_flood()


def _backend_round(url: str, manifests: list[dict[str, Any]]) -> tuple[float, int]:
    backend = ChaosMeshBackend(kubernetes_client(url), retry=RetryPolicy(), poll_interval=0.01)
    started = time.perf_counter()
    for manifest in manifests:
        backend.apply(manifest)
    backend.sweep("bench", ["llm-serving"], timeout=30)
    return time.perf_counter() - started, len(backend.events)


def _plain_round(url: str, manifests: list[dict[str, Any]]) -> tuple[float, int]:
    custom = kubernetes.client.CustomObjectsApi(kubernetes_client(url))
    args = ("chaos-mesh.org", "v1alpha1", "llm-serving", "networkchaos")
    started = time.perf_counter()
    for manifest in manifests:
        custom.create_namespaced_custom_object(*args, manifest)
    listed = custom.list_namespaced_custom_object(*args, label_selector="kfchaos.io/run-id=bench")
    for item in listed["items"]:
        custom.delete_namespaced_custom_object(*args, item["metadata"]["name"])
    return time.perf_counter() - started, 2 * len(manifests) + 1


FLOOD = 1_000_000  # containerRecords in the flooded status: 191 MB of JSON


def run_flood() -> None:
    """A status with a million records (tests/hostile/test_chaosmesh_answers.py): what reading it costs the backend,
    in a process of its own (tests/hostile/flood_reader.py: VmHWM after the call minus VmRSS before it); and the
    cost of one poll of a fault at the records bound (MAX_RECORDS pods read, one GET each)."""
    from kfchaos.faults.chaosrecords import MAX_RECORDS
    from tests.hostile.flood_reader import backend

    with KubeApiServer(inject_delay=0.05) as server:
        server.add_pod("llm-serving", "vllm-0", {"app.kubernetes.io/name": "vllm"}, containers=["vllm"])
        chaos = backend(server.url)
        handle = chaos.apply(chaos.experiment.spec.faults[0])  # type: ignore[union-attr]
        chaos.wait_injected(handle)
        server.flood_records(handle.namespace, handle.name, FLOOD)
        plain = _flood_child(server.url, "plain")  # once: it takes seconds and more than a GB
        print(
            f"reference, the plain kubernetes client's get of the same object: peak "
            f"{(plain['hwm_kb'] - plain['rss_before_kb']) / 1024:.0f} MiB above the start, {plain['seconds']:.1f} s"
        )
        for mode in ("wait", "active", "sweep"):
            runs = [_flood_child(server.url, mode) for _ in range(3)]
            peak = sorted(r["hwm_kb"] - r["rss_before_kb"] for r in runs)[1]
            took = sorted(r["seconds"] for r in runs)[1]
            print(f"flood of {FLOOD:,} records, {mode}: peak {peak / 1024:.1f} MiB above the start, {took:.3f} s "
                  f"(median of 3); {runs[0]['error']}")  # fmt: skip
        for index in range(MAX_RECORDS):
            server.add_pod("llm-serving", f"flood-{index:07d}", {"app": "flood"})
        server.flood_records(handle.namespace, handle.name, MAX_RECORDS)
        started = time.perf_counter()
        active = chaos.is_active(handle)
        print(
            f"one poll of a fault with {MAX_RECORDS} records (the bound): {time.perf_counter() - started:.3f} s, "
            f"active {active}"
        )


def _flood_child(url: str, mode: str) -> dict[str, Any]:
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "tests.hostile.flood_reader", url, mode],
                          capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result
