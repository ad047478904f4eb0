"""RBAC coverage: every Kubernetes API call the fault backend makes is allowed by manifests/, and manifests/
grants nothing the code never uses. The calls are the ones the real kubernetes client sends to the loopback
API server while the backend runs a whole fault lifecycle for every Chaos Mesh kind and the GPU pod."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pytest

from kfchaos.errors import KfchaosError
from kfchaos.faults.render import render_experiment
from tests.faults.conftest import TARGET_LABELS, make_backend
from tests.faults.experiments import experiment_with
from tests.manifests.test_manifests import MANIFESTS, kustomize_build
from tests.support.kubeapi import KubeApiServer

ONE_OF_EACH_KIND: list[dict[str, Any]] = [
    {"name": "delay", "type": "network-delay", "mode": "all", "params": {"latency": "100ms"}},
    {"name": "kill", "type": "pod-kill"},
    {"name": "mem", "type": "stress-memory", "params": {"size": "256MB"}},
    {"name": "abort", "type": "http-abort", "params": {"port": 8000}},
    {"name": "io", "type": "io-latency", "params": {"volume_path": "/data", "delay": "10ms"}},
    {"name": "clock", "type": "time-offset", "params": {"offset": "-5m"}},
    {"name": "dns", "type": "dns-error", "params": {"patterns": ["redis.*"]}},
    {"name": "gpu", "type": "gpu-memory-pressure", "params": {"share": "30%"}},
]

_NAMESPACED = re.compile(r"^/apis?/(?:(?P<group>[^/]+)/)?v\w+/namespaces/[^/]+/(?P<resource>[^/?]+)(?P<item>/[^/?]+)?")
_CLUSTER = re.compile(r"^/apis?/(?:(?P<group>[^/]+)/)?v\w+/(?P<resource>[^/?]+)(?P<item>/[^/?]+)?")


def api_call(method: str, path: str) -> tuple[str, str, str]:
    """(API group, resource, RBAC verb) of one REST call."""
    match = _NAMESPACED.match(path) or _CLUSTER.match(path)
    assert match, path
    group = match["group"] if path.startswith("/apis/") else ""
    item = bool(match["item"])
    query = path.partition("?")[2]
    verbs = {
        "GET": "get" if item else ("watch" if "watch=true" in query else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if item else "deletecollection",
    }
    return group or "", match["resource"], verbs[method]


def granted(objects: Iterable[dict[str, Any]]) -> set[tuple[str, str, str]]:
    rules = [r for o in objects if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
    return {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}


def lifecycle_calls() -> set[tuple[str, str, str]]:
    """Every call of preflight, apply, wait injected, remove, wait recovered, sweep, and a wait that times out
    (the one path that reads events)."""
    with KubeApiServer(inject_delay=0.05) as server:
        for index in range(3):
            server.add_pod("llm-serving", f"vllm-{index}", TARGET_LABELS, node=f"gpu-{index}", containers=["vllm"])
        backend = make_backend(server.url)
        manifests = render_experiment(experiment_with(*ONE_OF_EACH_KIND), "run-rbac")
        backend.preflight(manifests)
        handles = [backend.apply(m) for m in manifests]
        for handle in handles:
            backend.wait_injected(handle, timeout=5)
        for handle in handles[:3]:
            backend.remove(handle)
            backend.wait_recovered(handle, timeout=5)
        server.inject_delay = 60.0
        slow = backend.apply(render_experiment(experiment_with(ONE_OF_EACH_KIND[0]), "run-slow")[0])
        with pytest.raises(KfchaosError):
            backend.wait_injected(slow, timeout=0.3)
        backend.sweep("run-rbac", ["llm-serving"], timeout=5)
        backend.sweep("run-slow", ["llm-serving"], timeout=5)
        return {api_call(method, path) for method, path in server.requests}


@pytest.fixture(scope="module")
def calls() -> set[tuple[str, str, str]]:
    return lifecycle_calls()


@pytest.fixture(scope="module")
def rules() -> set[tuple[str, str, str]]:
    return granted(kustomize_build(MANIFESTS))


def test_every_call_the_backend_makes_is_allowed(calls: set[tuple[str, str, str]], rules: set[Any]) -> None:
    assert calls, "the lifecycle made no API calls"
    assert sorted(calls - rules) == []


def test_the_roles_grant_nothing_the_backend_never_uses(calls: set[tuple[str, str, str]], rules: set[Any]) -> None:
    assert sorted(rules - calls) == []


def test_the_mapping_of_rest_calls_to_verbs() -> None:
    assert api_call("GET", "/apis/chaos-mesh.org/v1alpha1/namespaces/a/networkchaos/x") == (
        "chaos-mesh.org", "networkchaos", "get")  # fmt: skip
    assert api_call("GET", "/api/v1/namespaces/a/pods?labelSelector=x") == ("", "pods", "list")
    assert api_call("DELETE", "/api/v1/namespaces/a/pods/p") == ("", "pods", "delete")
    assert api_call("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podchaos.chaos-mesh.org") == (
        "apiextensions.k8s.io", "customresourcedefinitions", "get")  # fmt: skip
