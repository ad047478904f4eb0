"""Cleanup drills (issue 13): each ends with zero kfchaos chaos objects on the loopback API server, and
never deletes what kfchaos does not own. Listed in the README, section "Reliability" (drills 7-12)."""

from __future__ import annotations

import time

import kubernetes.client
import pytest

from kfchaos.cli import main
from kfchaos.faults.backend import AdmissionDenied, BackendError, NamespaceGone, PermissionDenied
from kfchaos.faults.catalog import GROUP, VERSION
from tests.faults.conftest import make_backend, manifests
from tests.support.kubeapi import KubeApiServer, kubernetes_client

KILL = {"name": "kill", "type": "pod-kill"}
DELAY = {"name": "delay", "type": "network-delay", "mode": "all", "params": {"latency": "100ms"}}


def test_drill_same_name_object_without_kfchaos_labels_is_never_adopted_or_deleted(server: KubeApiServer) -> None:
    backend = make_backend(server.url)
    (manifest,) = manifests("run-own", DELAY)
    foreign = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NetworkChaos",
        "metadata": {"name": manifest["metadata"]["name"], "namespace": "llm-serving"},  # someone else's
        "spec": manifest["spec"],
    }
    custom = kubernetes.client.CustomObjectsApi(kubernetes_client(server.url))
    custom.create_namespaced_custom_object(GROUP, VERSION, "llm-serving", "networkchaos", foreign)
    with pytest.raises(BackendError, match="refusing to adopt"):
        backend.apply(manifest)
    assert backend.sweep("run-own", ["llm-serving"], timeout=5) == 0
    assert main(["cleanup", "--older-than", "0s", "--host", server.url]) == 0  # the janitor's sweep, too
    (left,) = server.chaos_objects()
    assert "labels" not in left["metadata"] or not left["metadata"]["labels"]  # untouched
    custom.delete_namespaced_custom_object(GROUP, VERSION, "llm-serving", "networkchaos", foreign["metadata"]["name"])
    assert server.chaos_objects() == []


def test_drill_target_namespace_deleted_mid_run_is_no_rbac_error(server: KubeApiServer) -> None:
    backend = make_backend(server.url)
    first, second = manifests("run-ns", DELAY, KILL)
    backend.apply(first)
    server.finalizer_delay = 0.3
    server.delete_namespace("llm-serving")  # Terminating: its content goes, chaos objects after the finalizer
    with pytest.raises(NamespaceGone, match="being deleted or is gone") as caught:
        backend.apply(second)
    assert not isinstance(caught.value, PermissionDenied) and "RBAC rule" not in str(caught.value)
    assert backend.sweep("run-ns", ["llm-serving"], timeout=5) == 0  # deleted by the namespace controller
    assert server.chaos_objects() == []
    with pytest.raises(NamespaceGone, match='namespaces "llm-serving" not found'):
        backend.apply(second)  # gone now: 404 from the NamespaceLifecycle plugin
    assert server.chaos_objects() == []


def test_drill_webhook_denial_at_create_time(server: KubeApiServer) -> None:
    backend = make_backend(server.url)
    first, second = manifests("run-deny", DELAY, KILL)
    assert backend.preflight([first, second]).dry_run  # admitted on the dry run ...
    handle = backend.apply(first)
    server.deny_admission("podchaos", 'spec.value: Invalid value: "x": changed webhook')  # ... not at create
    with pytest.raises(AdmissionDenied, match=r'admission webhook "vpodchaos\.kb\.io" denied the request'):
        backend.apply(second)
    assert handle.name in {o["metadata"]["name"] for o in server.chaos_objects()}
    assert backend.sweep("run-deny", ["llm-serving"], timeout=5) == 1  # the exit handler
    assert server.chaos_objects() == []


def test_drill_local_clock_ahead_of_the_servers(server: KubeApiServer) -> None:
    """`cleanup --older-than` ages objects by the server's clock: with the local clock an hour ahead, a
    live run's fault created a minute ago is not swept; a cancelled run's fault two hours old is."""
    backend = make_backend(server.url)
    server.clock_offset = -7200.0
    backend.apply(manifests("run-cancelled", KILL)[0])  # created two hours ago, by the server's clock
    server.clock_offset = -3600.0  # from now on the server is an hour behind this machine
    backend.apply(manifests("run-live", DELAY)[0])
    assert main(["cleanup", "--older-than", "30m", "--host", server.url]) == 0
    assert [o["metadata"]["labels"]["kfchaos.io/run-id"] for o in server.chaos_objects()] == ["run-live"]
    local_cutoff = time.time() - 1800  # what a local-clock sweep would have compared with: both look old
    assert all(backend_created(o) < local_cutoff for o in [*server.chaos_objects()]), (
        "the drill must put the live fault behind the local cutoff"
    )
    assert backend.sweep("run-live", None, timeout=5) == 1
    assert server.chaos_objects() == []


def backend_created(obj: dict[str, object]) -> float:
    from kfchaos.faults.chaosmesh import _created

    return _created(obj)  # type: ignore[arg-type]


def test_drill_finalizer_outlives_the_sweeps_timeout(server: KubeApiServer) -> None:
    backend = make_backend(server.url)
    for manifest in manifests("run-stuck", DELAY, KILL):
        backend.apply(manifest)
    server.finalizer_delay = 1.0  # Chaos Mesh still recovering the pods
    with pytest.raises(BackendError, match=r"still present after 0.2s: .*networkchaos llm-serving/delay"):
        backend.sweep("run-stuck", ["llm-serving"], timeout=0.2)
    deletes = [e for e in backend.events if e.verb == "delete"]
    assert len(deletes) == 2
    # The next sweep (a retried exit handler, or the janitor) deletes nothing twice and waits them out.
    assert backend.sweep("run-stuck", ["llm-serving"], timeout=10) == 0
    assert len([e for e in backend.events if e.verb == "delete"]) == 2
    assert server.chaos_objects() == []
