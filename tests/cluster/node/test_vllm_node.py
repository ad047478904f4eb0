"""The seed's incident on the real node with the real engine (issue 43): vLLM 0.32 (CPU) serving the tiny model as a
pod (tests/cluster/node/vllmpod.py), with the demo's unsafe settings (kfchaos.demo.runner.scenarios ENGINE_SCENARIOS:
a long-context burst prefilled in one step) under the container limit of `kfchaos demo --engine vllm`.

First the pod as a platform team would see it: Ready on /health behind its Service, vLLM's /metrics scraped by the
cluster's Prometheus through the pod's annotations, kube-state-metrics' and cAdvisor's series of the container. Then
the experiment, with `kfchaos run --local` (the compiled pipeline, its steps as local processes) against the Service
and the cluster's Prometheus: the burst takes the worker over the limit, the kernel kills `VLLM::Worker` (on this
cgroup v1 node only the worker: the kubelet sets memory.oom.group on cgroup v2 only), vLLM answers 500 and its API
server exits by itself, the kubelet reports the container's end and restarts it, and the verdict FAILs naming the
kill. Nothing here models the kill.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from kfchaos.demo.runner.scenarios import ENGINE_MEMORY_LIMIT, ENGINE_SCENARIOS
from kfchaos.demo.stack.enginedeploy import warm_up
from kfchaos.demo.stack.vllmengine import MODEL_NAME
from tests.cluster.node.conftest import (
    NodeCluster,
    Target,
    deploy_target,
    eventually,
    experiment_text,
    kfchaos,
    scratch_root,
)
from tests.cluster.node.vllmpod import engine_objects
from tests.cluster.test_oom_real import query
from tests.engine.conftest import require_engine

# node_long: `make e2e-local` runs it, `make test` not yet. The engine's first start in its pod sometimes fails
# (exit 1: ValueError from vllm/v1/worker/cpu_worker.py determine_available_memory, seen twice, once in a CI run) and
# the kubelet's restart then serves; the case counts only restarts after the warm-up, but has not yet run in CI so.
pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.node_long]

NAMESPACE = "vllm-real"
MEMORY = f"{ENGINE_MEMORY_LIMIT >> 20}Mi"
POD_SELECTOR = "app.kubernetes.io/name=vllm"


@pytest.fixture(scope="module")
def engine_target(node_cluster: NodeCluster) -> Iterator[Target]:
    install = require_engine()
    core = k8s.CoreV1Api(node_cluster.cluster.api_client())
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE)))
    try:
        objects = engine_objects(
            node_cluster.image, install, ENGINE_SCENARIOS["unsafe"].settings, namespace=NAMESPACE, memory=MEMORY
        )
        yield deploy_target(node_cluster, namespace=NAMESPACE, objects=objects, rollout_timeout=600)
    finally:
        core.delete_namespace(NAMESPACE)


def _containers(core: k8s.CoreV1Api) -> list[dict[str, Any]]:
    found = []
    for pod in core.list_namespaced_pod(NAMESPACE, label_selector=POD_SELECTOR).items:
        for status in pod.status.container_statuses or []:
            last = status.last_state.terminated if status.last_state else None
            found.append(
                {
                    "pod": pod.metadata.name,
                    "restarts": status.restart_count,
                    "reason": last.reason if last else None,
                    "exit": last.exit_code if last else None,
                }
            )
    return found


def test_the_engine_serves_as_a_pod_and_the_cluster_sees_it(node_cluster: NodeCluster, engine_target: Target) -> None:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    body = json.dumps({"model": MODEL_NAME, "prompt": "hello", "max_tokens": 4}).encode()
    request = urllib.request.Request(
        f"{engine_target.url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with direct.open(request, timeout=60) as answer:
        assert answer.status == 200 and json.loads(answer.read())["model"] == MODEL_NAME
    prometheus = node_cluster.cluster.prometheus_url
    selector = f'namespace="{NAMESPACE}"'
    # vLLM's own series, through the pod's scrape annotations; kube-state-metrics' and cAdvisor's of the container.
    eventually(
        "vLLM's /metrics in Prometheus",
        lambda: query(prometheus, f"vllm:num_requests_running{{{selector}}}"),
        timeout=120,
        every=2,
    )
    (limit,) = eventually(
        "the container's memory limit from kube-state-metrics",
        lambda: query(prometheus, f'kube_pod_container_resource_limits{{{selector},resource="memory"}}'),
        timeout=120,
        every=2,
    )
    assert float(limit["value"][1]) == ENGINE_MEMORY_LIMIT
    # cAdvisor's series of the pod's cgroup: this node's cAdvisor reports no container-level series (docs/cluster.md,
    # "The real vLLM engine as a pod").
    eventually(
        "cAdvisor's working set of the engine's pod",
        lambda: query(prometheus, f'container_memory_working_set_bytes{{{selector},pod=~"demo-llm-.+"}}'),
        timeout=120,
        every=2,
    )


def experiment() -> str:
    """The long-context burst of `kfchaos demo --engine vllm` (src/kfchaos/demo/experiments/vllm/engine-chaos.yaml)
    against the pod's Service, with its abort rules; no baseline (drift is not what this case judges)."""
    traffic = {
        "synthetic": {
            "rate": 12,
            "arrival": "poisson",
            "prompt_tokens": {"distribution": "lognormal", "mean": 200, "stddev": 80, "max": 1000},
            "output_tokens": {"distribution": "fixed", "mean": 4},
        },
        "stages": [100],
        "stage_duration": "40s",
        "warmup": "2s",
        "seed": 7,
    }
    burst = {"requests": 96, "context_tokens": 4000, "max_tokens": 4, "start": "5s"}
    faults = [{"name": "kv-cache-swell", "type": "long-context-burst", "params": burst}]
    slo = {"p99_max": "10s", "error_rate_max": "1%", "oom_kill_rate_max": "0.001%", "min_samples": 300}
    text = experiment_text("vllm-node-oom", NAMESPACE, faults, traffic, slo, timeout="30s")
    return text.replace("model: demo/llama-3-8b-sim", f"model: {MODEL_NAME}")


def test_unsafe_settings_get_the_engine_oom_killed_and_the_verdict_fails_naming_the_kill(
    node_cluster: NodeCluster, engine_target: Target, tmp_path: Path
) -> None:
    core = k8s.CoreV1Api(node_cluster.cluster.api_client())
    warm_up(engine_target.url, MODEL_NAME)  # a fresh engine's first batches of each size are slow on CPU
    (before,) = _containers(core)
    print(f"the engine's container before the run: {before}")  # a restart here is not the burst's
    root = scratch_root(tmp_path, {"vllm-node-oom.yaml": experiment()})
    done = kfchaos(
        node_cluster,
        "run", str(root / "experiments" / "vllm-node-oom.yaml"), "--local", "--root", str(root),
        "--target", engine_target.url, "--output", str(tmp_path / "pipeline-root"), "--runs", str(tmp_path / "runs"),
        extra_env={"KFCHAOS_PROMETHEUS_URL": node_cluster.cluster.prometheus_url},
        timeout=1200,
    )  # fmt: skip
    # The kubelet's report of the container's end. On cgroup v1 the kernel killed the worker, not the container's
    # first process: containerd marks the container OOMKilled on the TaskOOM event, and the API server then exits by
    # itself (0), so the reason is OOMKilled with whatever exit followed (docs/verdict.md, "An OOM kill").
    ended = eventually(
        "the kubelet to report the engine's container ended and restarted",
        lambda: [c for c in _containers(core) if c["restarts"] > before["restarts"]],
        timeout=300,
        every=2,
    )
    print(f"the engine's container: {ended}")
    assert done.returncode == 1, done.stdout[-4000:]
    verdict = json.loads(next((tmp_path / "runs").glob("*/verdict.json")).read_text())
    assert verdict["status"] == "FAIL"
    reasons = " ".join(verdict.get("reasons") or [])
    assert "oom" in reasons.lower(), reasons
