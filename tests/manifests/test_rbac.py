"""RBAC coverage: every Kubernetes API call a run makes is allowed by manifests/ for the run's identity, and
manifests/ grants nothing the code never uses. The fault backend's calls are the ones the real kubernetes
client sends to the loopback API server while the backend runs a whole fault lifecycle for every Chaos Mesh
kind and the GPU pod; they must equal kfchaos.kfp.identity.FAULT_CALLS (what `kfchaos doctor` reviews). KFP's
runtime calls (identity.KFP_RUNTIME_CALLS) are allowed through KFP's own pipeline-runner Role, vendored in
tests/manifests/data/ from upstream, which manifests/ binds to the run identity."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kfchaos.errors import KfchaosError
from kfchaos.faults.render import render_experiment
from kfchaos.kfp.identity import FAULT_CALLS, KFP_RUNTIME_CALLS, PLACEMENT_CALLS, RUN_CALLS, RUN_SERVICE_ACCOUNT, Call
from kfchaos.kfp.schedules import load_schedules
from kfchaos.lease import Acquired, RunInfo, TargetLease
from kfchaos.lease.kube import KubeLeaseStore
from tests.faults.conftest import TARGET_LABELS, make_backend
from tests.faults.experiments import experiment_with
from tests.manifests.test_manifests import MANIFESTS, kustomize_build
from tests.support.kubeapi import KubeApiServer
from tests.support.rbac import Attributes, RbacAuthorizer, service_account_groups, service_account_user

KFP_NAMESPACE = "kubeflow"
TARGET_NAMESPACE = "llm-serving"
UPSTREAM_KFP_RBAC = list(yaml.safe_load_all((Path(__file__).parent / "data/kfp-pipeline-runner-role.yaml").read_text()))

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
        # Preflight's placement reads (kfchaos.faults.clustercheck) are best effort and not granted here:
        # noted as unchecked when denied; `kfchaos doctor` runs them with the user's own access.
        backend.placement_checks = False
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
        _lease_lifecycle(backend.api_client)
        return {api_call(method, path) for method, path in server.requests}


def _lease_lifecycle(api_client: Any) -> None:
    """The target's lease as a run uses it: created by the first run, renewed, released (kfchaos.lease.kube)."""
    store = KubeLeaseStore(api_client, TARGET_NAMESPACE, "kfchaos-target-rbac")
    lease = TargetLease(store, RunInfo("run-rbac"), name=store.name, namespace=TARGET_NAMESPACE, target="rbac")
    assert isinstance(lease.acquire(0), Acquired)
    assert isinstance(lease.hold(), Acquired)
    assert lease.release().startswith("released")


@pytest.fixture(scope="module")
def calls() -> set[tuple[str, str, str]]:
    return lifecycle_calls()


@pytest.fixture(scope="module")
def rules() -> set[tuple[str, str, str]]:
    return granted(kustomize_build(MANIFESTS))


BEST_EFFORT = {(c.group, c.resource, c.verb) for c in PLACEMENT_CALLS}


def test_every_call_the_backend_makes_is_allowed(calls: set[tuple[str, str, str]], rules: set[Any]) -> None:
    assert calls, "the lifecycle made no API calls"
    # Placement reads are best effort (denied: noted unchecked) and deliberately not granted.
    assert sorted(calls - rules - BEST_EFFORT) == []
    assert not {c for c in BEST_EFFORT if c[1] != "pods"} & rules


def test_the_roles_grant_nothing_the_backend_never_uses(calls: set[tuple[str, str, str]], rules: set[Any]) -> None:
    assert sorted(rules - calls) == []


def test_the_identity_module_lists_exactly_the_calls_the_backend_makes(calls: set[tuple[str, str, str]]) -> None:
    # Both directions: `kfchaos doctor` reviews exactly what a run needs, not a guess at it; the rest of
    # what the lifecycle calls are the best-effort placement reads.
    required = {(c.group, c.resource, c.verb) for c in FAULT_CALLS}
    assert required <= calls
    assert sorted(calls - required - BEST_EFFORT) == []


def _namespace(call: Call) -> str:
    return {"kfp": KFP_NAMESPACE, "target": TARGET_NAMESPACE, "cluster": ""}[call.scope]


def _allowed(objects: list[dict[str, Any]], account: str, call: Call) -> bool:
    authorizer = RbacAuthorizer(objects)
    user = service_account_user(KFP_NAMESPACE, account)
    attrs = Attributes(call.verb, call.group, call.resource, _namespace(call), call.name)
    return authorizer.authorize(user, service_account_groups(KFP_NAMESPACE), attrs)[0]


@pytest.fixture(scope="module")
def cluster_rbac() -> list[dict[str, Any]]:
    """manifests/ as applied to a cluster where KFP standalone installed its own RBAC."""
    return kustomize_build(MANIFESTS) + UPSTREAM_KFP_RBAC


def test_the_run_identity_may_make_every_call_of_a_run_kfp_runtime_included(cluster_rbac: list[Any]) -> None:
    denied = [c.describe() for c in RUN_CALLS if not _allowed(cluster_rbac, RUN_SERVICE_ACCOUNT, c)]
    assert denied == []


def test_without_the_binding_to_kfps_runner_role_every_task_would_fail(cluster_rbac: list[Any]) -> None:
    # The blocker of issue 12: kfchaos-runner alone cannot read kfp-launcher or the object-store Secret.
    without = [o for o in cluster_rbac if o["metadata"]["name"] != "kfchaos-runner-pipeline-runner"]
    assert len(without) == len(cluster_rbac) - 1
    assert all(not _allowed(without, RUN_SERVICE_ACCOUNT, c) for c in KFP_RUNTIME_CALLS)


def test_kfps_default_identity_cannot_inject_so_runs_must_name_ours(cluster_rbac: list[Any]) -> None:
    chaos = [c for c in FAULT_CALLS if c.group == "chaos-mesh.org"]
    assert all(_allowed(cluster_rbac, "pipeline-runner", c) for c in KFP_RUNTIME_CALLS)
    assert not any(_allowed(cluster_rbac, "pipeline-runner", c) for c in chaos)
    schedules = load_schedules(MANIFESTS / "schedules.yaml")
    assert schedules.service_account == RUN_SERVICE_ACCOUNT
    assert all(e.service_account in (None, RUN_SERVICE_ACCOUNT) for e in schedules.schedules)


def test_the_authorizer_honours_resource_names_and_namespaces(cluster_rbac: list[Any]) -> None:
    secret = next(c for c in KFP_RUNTIME_CALLS if c.resource == "secrets")
    assert _allowed(cluster_rbac, RUN_SERVICE_ACCOUNT, secret)
    # The chaos Role is namespaced: the same call elsewhere is denied.
    create = next(c for c in FAULT_CALLS if c.resource == "networkchaos" and c.verb == "create")
    authorizer = RbacAuthorizer(cluster_rbac)
    user = service_account_user(KFP_NAMESPACE, RUN_SERVICE_ACCOUNT)
    groups = service_account_groups(KFP_NAMESPACE)
    assert authorizer.authorize(user, groups, Attributes("create", create.group, create.resource, "other"))[0] is False
    allowed, reason = authorizer.authorize(user, groups, Attributes("create", create.group, create.resource,
                                                                    TARGET_NAMESPACE))  # fmt: skip
    assert allowed and 'RoleBinding "kfchaos-fault-injector/llm-serving"' in reason
    named = RbacAuthorizer([{"kind": "Role", "metadata": {"name": "r", "namespace": "n"},
                             "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"],
                                        "resourceNames": ["only"]}]},
                            {"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "n"},
                             "roleRef": {"kind": "Role", "name": "r"},
                             "subjects": [{"kind": "ServiceAccount", "name": "sa"}]}])  # fmt: skip
    sa = service_account_user("n", "sa")
    assert named.authorize(sa, [], Attributes("get", "", "secrets", "n", "only"))[0]
    assert not named.authorize(sa, [], Attributes("get", "", "secrets", "n", "other"))[0]
    assert not named.authorize(sa, [], Attributes("list", "", "secrets", "n"))[0]


def test_the_mapping_of_rest_calls_to_verbs() -> None:
    assert api_call("GET", "/apis/chaos-mesh.org/v1alpha1/namespaces/a/networkchaos/x") == (
        "chaos-mesh.org", "networkchaos", "get")  # fmt: skip
    assert api_call("GET", "/api/v1/namespaces/a/pods?labelSelector=x") == ("", "pods", "list")
    assert api_call("DELETE", "/api/v1/namespaces/a/pods/p") == ("", "pods", "delete")
    assert api_call("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podchaos.chaos-mesh.org") == (
        "apiextensions.k8s.io", "customresourcedefinitions", "get")  # fmt: skip
