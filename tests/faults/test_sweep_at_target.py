"""A takeover's sweep (ChaosMeshBackend.sweep_at_target), against the loopback API server: of the dead holder's
objects it deletes those that can reach the target the lease guards (the rule of kfchaos.faults.foreign), and leaves
and names those aimed elsewhere, since a Lease planted with kfchaos's whole record can name a run alive at another
target (docs/reliability.md, round 4, class 1). The same on the real kube-apiserver:
tests/cluster/test_lease_hostile_real.py."""

from __future__ import annotations

from typing import Any

from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.faults.render import render_experiment
from tests.faults.conftest import FAST_RETRY, TARGET_LABELS
from tests.faults.experiments import experiment_with
from tests.faults.test_gpu import GPU_FAULT
from tests.support.kubeapi import KubeApiServer, kubernetes_client

DEAD = "run-x"
KILL = {"name": "kill", "type": "pod-kill"}
OTHER = {"app.kubernetes.io/name": "other-model"}


def taker(server: KubeApiServer) -> ChaosMeshBackend:
    """The taking run's backend, bound to its experiment: target vllm in llm-serving."""
    return ChaosMeshBackend(kubernetes_client(server.url), retry=FAST_RETRY, poll_interval=0.02, request_timeout=5,
                            experiment=experiment_with(KILL), run_id="run-taker")  # fmt: skip


def dead_run(*faults: dict[str, Any]) -> list[dict[str, Any]]:
    """Run X's objects, rendered as kfchaos renders them for that run."""
    return render_experiment(experiment_with(*faults), DEAD)


def names(server: KubeApiServer, plural: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in server.objects(plural, "llm-serving")
                  if (o["metadata"].get("labels") or {}).get("kfchaos.io/run-id") == DEAD)  # fmt: skip


def test_only_the_objects_that_reach_the_target_are_swept(server: KubeApiServer) -> None:
    server.add_pod("llm-serving", "other-0", OTHER)
    at_target, at_other = dead_run(KILL, {"name": "kill-b", "type": "pod-kill", "selector": {"labels": OTHER}})
    (other_namespace,) = dead_run({"name": "kill-batch", "type": "pod-kill"})
    other_namespace["metadata"]["name"] += "-batch"
    other_namespace["spec"]["selector"]["namespaces"] = ["llm-batch"]  # lives here, selects pods there
    (other_side,) = dead_run({"name": "cut", "type": "network-delay", "mode": "all", "selector": {"labels": OTHER},
                              "params": {"latency": "10ms", "target": {"namespace": "llm-serving",
                                                                       "labels": TARGET_LABELS}}})  # fmt: skip
    backend = taker(server)
    for manifest in (at_target, at_other, other_namespace, other_side):
        backend.apply(manifest)
    swept = backend.sweep_at_target(DEAD, timeout=5)
    assert swept.deleted == 2  # its own selector at the target, and a NetworkChaos whose other side is
    assert swept.kept == sorted(f"podchaos llm-serving/{m['metadata']['name']}" for m in (at_other, other_namespace))
    assert names(server, "podchaos") == sorted(m["metadata"]["name"] for m in (at_other, other_namespace))
    assert names(server, "networkchaos") == []


def test_with_no_target_pod_running_an_object_aimed_at_the_target_is_still_swept() -> None:
    """A pod-kill of the dead run may have left no target pod running: its selector still names the target."""
    with KubeApiServer(inject_delay=0.05) as server:
        server.add_pod("llm-serving", "other-0", OTHER)
        at_target, at_other = dead_run(KILL, {"name": "kill-b", "type": "pod-kill", "selector": {"labels": OTHER}})
        backend = taker(server)
        backend.apply(at_target)
        backend.apply(at_other)
        swept = backend.sweep_at_target(DEAD, timeout=5)
        assert (swept.deleted, swept.kept) == (1, [f"podchaos llm-serving/{at_other['metadata']['name']}"])


def test_a_gpu_allocator_pod_is_judged_by_the_pods_it_lands_beside(server: KubeApiServer) -> None:
    """An allocator pod has no Chaos Mesh selector: its pod affinity (kfchaos.faults.gpu) says whose GPU it takes."""
    beside_target, beside_other = dead_run(GPU_FAULT, {**GPU_FAULT, "name": "gpu-b", "selector": {"labels": OTHER}})
    for pod in (beside_target, beside_other):
        server.add_object("pods", pod)
    swept = taker(server).sweep_at_target(DEAD, timeout=5)
    assert (swept.deleted, swept.kept) == (1, [f"pods llm-serving/{beside_other['metadata']['name']}"])
    assert names(server, "pods") == [beside_other["metadata"]["name"]]


def test_a_plain_sweep_still_takes_every_object_of_the_run(server: KubeApiServer) -> None:
    """`kfchaos cleanup --run-id` and a run's own exit handler: every object of the run, wherever it aims."""
    backend = taker(server)
    for manifest in dead_run(KILL, {"name": "kill-b", "type": "pod-kill", "selector": {"labels": OTHER}}):
        backend.apply(manifest)
    assert backend.sweep(DEAD, timeout=5) == 2
    assert names(server, "podchaos") == []
