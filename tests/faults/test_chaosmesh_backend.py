"""The Chaos Mesh backend, through the real kubernetes client, against the loopback API server."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from kfchaos.faults.backend import (
    BackendError,
    ChaosMeshNotInstalled,
    InjectionTimeout,
    PermissionDenied,
)
from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.faults.selectors import label_selector
from tests.faults.conftest import make_backend, manifests
from tests.support.kubeapi import KubeApiServer


def test_preflight_reports_crds_pods_and_dry_run(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    report = backend.preflight(manifests())
    assert report.crds == ["networkchaos.chaos-mesh.org", "podchaos.chaos-mesh.org"]
    assert sorted(report.matching_pods.values()) == [3, 3]
    assert len(report.dry_run) == 2
    assert server.chaos_objects() == []  # a dry run stores nothing
    assert any(e.dry_run and e.verb == "create" and e.code == 201 for e in backend.events)


def test_preflight_without_chaos_mesh() -> None:
    with KubeApiServer(installed=["podchaos"]) as server:
        server.add_pod("llm-serving", "vllm-0", {"app.kubernetes.io/name": "vllm"})
        with pytest.raises(ChaosMeshNotInstalled, match=r"Chaos Mesh is not installed in this cluster.*networkchaos"):
            make_backend(server.url).preflight(manifests())


def test_preflight_without_running_target(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    fault = {"name": "kill", "type": "pod-kill", "selector": {"labels": {"app": "nothing"}}}
    with pytest.raises(BackendError, match="matches no running pod"):
        backend.preflight(manifests("r", fault))


def test_preflight_dry_run_rejection_is_reported(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    bad = manifests()[:1]
    bad[0]["spec"]["delay"]["latency"] = "1h30m"  # the CRD allows one unit only
    with pytest.raises(BackendError, match=r"422.*latency"):
        backend.preflight(bad)


def test_apply_then_wait_injected_reports_targets(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    delay, kill = manifests()
    handle = backend.apply(delay)
    report = backend.wait_injected(handle, timeout=5)
    assert sorted(report.targets) == ["llm-serving/vllm-0", "llm-serving/vllm-1", "llm-serving/vllm-2"]
    kill_handle = backend.apply(kill)
    assert kill_handle.one_shot and not handle.one_shot
    assert len(backend.wait_injected(kill_handle, timeout=5).targets) == 1  # mode one
    created = [e for e in backend.events if e.verb == "create" and not e.dry_run]
    assert [e.code for e in created] == [201, 201]
    assert created[0].uid == handle.uid and created[0].resource_version
    assert set(created[0].to_dict()) >= {"time", "verb", "kind", "namespace", "name", "code", "uid"}


def test_apply_is_idempotent(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    delay = manifests()[0]
    first = backend.apply(delay)
    second = make_backend(server.url).apply(delay)  # a retried step: a new process, the same name
    assert first == second
    assert len(server.objects("networkchaos")) == 1


def test_apply_refuses_to_adopt_another_runs_object(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    delay = manifests()[0]
    backend.apply(delay)
    other = {**delay, "metadata": {**delay["metadata"], "labels": {**delay["metadata"]["labels"]}}}
    other["metadata"]["labels"]["kfchaos.io/run-id"] = "someone-else"
    with pytest.raises(BackendError, match="belongs to run"):
        backend.apply(other)


def test_retries_429_and_lost_reply(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    server.fail(429, method="POST", times=2, retry_after=0)
    server.fail(500, method="POST", after_commit=True)  # stored, but the reply is an error
    handle = backend.apply(manifests()[0])
    assert len(server.objects("networkchaos")) == 1
    assert server.objects("networkchaos")[0]["metadata"]["uid"] == handle.uid
    codes = [e.code for e in backend.events if e.verb == "create"]
    assert codes == [429, 429, 500, 409]


def test_gives_up_after_retries(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    server.fail(503, method="GET", times=-1)
    with pytest.raises(BackendError, match=r"503.*after 4 attempt"):
        backend.preflight(manifests())


def test_403_explained_as_rbac_rule(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    server.forbid("create", "networkchaos")
    with pytest.raises(PermissionDenied) as info:
        backend.apply(manifests()[0])
    message = str(info.value)
    assert 'resources: ["networkchaos"], verbs: ["create"]' in message
    assert "llm-serving" in message and "chaos-mesh.org" in message


def test_wait_injected_times_out(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    server.inject_delay = 30
    handle = backend.apply(manifests()[0])
    server.add_event("llm-serving", "Failed", "no pod could be injected", {"kind": "NetworkChaos", "name": handle.name})
    with pytest.raises(InjectionTimeout, match=r"not injected after 0\.2s.*Failed: no pod could be injected"):
        backend.wait_injected(handle, timeout=0.2)


def test_remove_waits_for_finalizer(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    server.finalizer_delay = 1.0  # long enough to see the object pending even on a loaded machine
    handle = backend.apply(manifests()[0])
    backend.wait_injected(handle, timeout=5)
    backend.remove(handle)
    (pending,) = server.objects("networkchaos")
    assert pending["metadata"]["deletionTimestamp"]
    assert pending["status"]["experiment"]["desiredPhase"] == "Stop"
    backend.wait_recovered(handle, timeout=5)
    # Recovered is AllRecovered + desiredPhase Stop, seen before the finalizer let the object go, or gone.
    backend.remove(handle)  # removing again is harmless
    backend.sweep("run-1", ["llm-serving"], timeout=5)
    assert server.chaos_objects() == []


def test_fault_expires_by_its_duration(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    fault = {"name": "short", "type": "pod-failure", "duration": "1s"}
    handle = backend.apply(manifests("r", fault)[0])
    backend.wait_recovered(handle, timeout=10)  # not deleted: recovered by spec.duration alone
    (obj,) = server.objects("podchaos")
    assert {c["type"]: c["status"] for c in obj["status"]["conditions"]}["AllRecovered"] == "True"


def test_sweep_deletes_only_the_run(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    for manifest in manifests("run-a"):
        backend.apply(manifest)
    elsewhere = {"name": "kill", "type": "pod-kill", "namespace": "llm-batch"}
    for manifest in manifests("run-a", elsewhere) + manifests("run-b"):
        backend.apply(manifest)
    assert backend.sweep("run-a", ["llm-serving", "llm-batch"]) == 3
    left = server.chaos_objects()
    assert len(left) == 2 and {o["metadata"]["labels"]["kfchaos.io/run-id"] for o in left} == {"run-b"}
    assert backend.sweep("run-b") == 2  # all namespaces, through the cluster-wide list
    assert server.chaos_objects() == []


def test_sweep_older_than(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    for manifest in manifests("run-a"):
        backend.apply(manifest)
    assert backend.sweep(None, older_than=3600) == 0  # created just now: not old enough
    assert len(server.chaos_objects()) == 2
    assert backend.sweep(None, older_than=0) == 2
    assert server.chaos_objects() == []


def test_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    backend = make_backend(f"http://127.0.0.1:{port}")
    with pytest.raises(BackendError, match="did not answer after 4 attempts"):
        backend.apply(manifests()[0])
    assert [e.code for e in backend.events] == [0, 0, 0, 0]


def test_from_config_host_and_kubeconfig(server: KubeApiServer, tmp_path: Path) -> None:
    assert ChaosMeshBackend.from_config(host=server.url).preflight(manifests()[:1]).crds
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "loop", "cluster": {"server": server.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "u"}}],
                "current-context": "loop",
            }
        )
    )
    backend = ChaosMeshBackend.from_config(kubeconfig=str(kubeconfig), context="loop")
    assert backend.preflight(manifests()[:1]).crds == ["networkchaos.chaos-mesh.org"]


def test_label_selector_strings() -> None:
    selector = {
        "labelSelectors": {"b": "2", "a": "1"},
        "expressionSelectors": [
            {"key": "t", "operator": "In", "values": ["x", "y"]},
            {"key": "u", "operator": "DoesNotExist"},
        ],
    }
    assert label_selector(selector) == "a=1,b=2,t in (x,y),!u"


def test_bound_to_an_experiment_run(server: KubeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the pipeline steps use: faults instead of manifests, and a sweep of the experiment's namespaces."""
    from kfchaos.faults.chaosmesh import HOST_ENV
    from kfchaos.faults.render import render_fault
    from tests.faults.experiments import experiment_with

    experiment = experiment_with(
        {"name": "kill", "type": "pod-kill"},
        {"name": "batch-kill", "type": "pod-kill", "namespace": "llm-batch"},
        {"name": "burst", "type": "long-context-burst", "params": {"requests": 1, "context_tokens": 8}},
    )
    monkeypatch.setenv(HOST_ENV, server.url)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    backend = ChaosMeshBackend.from_environment(experiment, "run-bound", poll_interval=0.02)
    assert backend.experiment_namespaces() == ["llm-batch", "llm-serving"]
    fault = experiment.spec.faults[0]
    assert backend.preflight([fault]).matching_pods == {
        render_fault(experiment, fault, "run-bound")["metadata"]["name"]: 3
    }
    handles = [backend.apply(f) for f in experiment.spec.faults[:2]]
    assert backend.wait_injected(handles[0]).targets
    assert [h.name for h in handles] == [
        render_fault(experiment, f, "run-bound")["metadata"]["name"] for f in experiment.spec.faults[:2]
    ]
    # An object of the same run outside the experiment's namespaces is not this backend's to sweep.
    stray = {**manifests("run-bound")[1]}
    stray["metadata"] = {**stray["metadata"], "namespace": "elsewhere", "name": "stray"}
    stray["spec"] = {**stray["spec"], "selector": {"namespaces": ["elsewhere"], "labelSelectors": {"a": "b"}}}
    make_backend(server.url).apply(stray)
    assert backend.sweep("run-bound") == 2
    assert [o["metadata"]["name"] for o in server.chaos_objects()] == ["stray"]


def test_unbound_backend_needs_manifests(backend: ChaosMeshBackend) -> None:
    from tests.faults.experiments import experiment_with

    with pytest.raises(BackendError, match="no experiment run bound"):
        backend.apply(experiment_with({"name": "kill", "type": "pod-kill"}).spec.faults[0])


def test_one_shot_fault_needs_no_recovery(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    handle = backend.apply(manifests()[1])  # pod-kill
    backend.wait_injected(handle, timeout=5)
    backend.wait_recovered(handle, timeout=0.5)  # returns: AllInjected is a one-shot fault's end state
    (obj,) = server.objects("podchaos")
    conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
    assert conditions["AllInjected"] == "True" and conditions["AllRecovered"] == "False"


def test_sweep_skips_kinds_that_are_not_installed() -> None:
    with KubeApiServer(installed=["podchaos"]) as server:
        backend = make_backend(server.url)
        backend.apply(manifests()[1])  # pod-kill: PodChaos is installed
        assert backend.sweep("run-1") == 1
        assert server.chaos_objects() == []
        assert any(e.verb == "list" and e.kind == "networkchaos" and e.code == 404 for e in backend.events)
