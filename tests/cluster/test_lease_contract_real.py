"""The loopback fake's leases (tests/support/kubeapi.py `_serve_leases`) against the real kube-apiserver: the same
calls, the same status codes, so that tests that drive the target's lease through the fake (tests/manifests/
test_rbac.py, the steps' tests) see what a cluster would answer. The calls are those kfchaos.lease.kube makes."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.cluster.conftest import RealCluster
from tests.cluster.test_rbac_real import rbac_applied  # noqa: F401 (a fixture)
from tests.manifests.test_rbac import TARGET_NAMESPACE
from tests.support.kubeapi import KubeApiServer, kubernetes_client

pytestmark = pytest.mark.cluster


def lease(name: str, duration: int = 30, version: str | None = None, transitions: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": TARGET_NAMESPACE}
    if version is not None:
        meta["resourceVersion"] = version
    spec = {"holderIdentity": "run-a", "leaseDurationSeconds": duration, "leaseTransitions": transitions}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def answers(api_client: k8s.ApiClient) -> list[tuple[str, int]]:
    """(call, HTTP status) of each call of a lease's life, the refused ones included."""
    api = k8s.CoordinationV1Api(api_client)
    name = f"contract-{uuid.uuid4().hex[:6]}"
    seen: list[tuple[str, int]] = []

    def call(what: str, do: Any) -> dict[str, Any] | None:
        try:
            answer = do()
        except k8s.ApiException as error:
            seen.append((what, int(error.status)))
            return None
        seen.append((what, 200))
        return dict(json.loads(answer.data))

    kw = {"_preload_content": False}
    call("get missing", lambda: api.read_namespaced_lease(name, TARGET_NAMESPACE, **kw))
    created = call("create", lambda: api.create_namespaced_lease(TARGET_NAMESPACE, lease(name), **kw))
    assert created is not None, seen
    version = created["metadata"]["resourceVersion"]
    call("create again", lambda: api.create_namespaced_lease(TARGET_NAMESPACE, lease(name), **kw))
    call("update without version", lambda: api.replace_namespaced_lease(name, TARGET_NAMESPACE, lease(name), **kw))
    same = call(
        "update that changes nothing",
        lambda: api.replace_namespaced_lease(name, TARGET_NAMESPACE, lease(name, version=version), **kw),
    )
    assert same is not None
    seen.append(("... keeps its resourceVersion", int(same["metadata"]["resourceVersion"] == version)))
    updated = call(
        "update", lambda: api.replace_namespaced_lease(name, TARGET_NAMESPACE, lease(name, 15, version), **kw)
    )
    assert updated is not None and updated["metadata"]["resourceVersion"] != version
    call(
        "update with a stale version",
        lambda: api.replace_namespaced_lease(name, TARGET_NAMESPACE, lease(name, version=version), **kw),
    )
    fresh = updated["metadata"]["resourceVersion"]
    call(
        "update to a zero duration",
        lambda: api.replace_namespaced_lease(name, TARGET_NAMESPACE, lease(name, 0, fresh), **kw),
    )
    call(
        "update to negative transitions",
        lambda: api.replace_namespaced_lease(name, TARGET_NAMESPACE, lease(name, 30, fresh, -1), **kw),
    )
    got = call("get", lambda: api.read_namespaced_lease(name, TARGET_NAMESPACE, **kw))
    assert got is not None and got["spec"]["leaseDurationSeconds"] == 15
    return seen


def test_the_fakes_leases_answer_as_the_real_api_servers(rbac_applied: RealCluster) -> None:  # noqa: F811
    real = answers(rbac_applied.api_client())  # the target namespace made by manifests/
    with KubeApiServer() as fake:
        faked = answers(kubernetes_client(fake.url))
    assert faked == real
    # What kfchaos.lease.kube relies on: 404 for a missing lease, 409 for a create race and a stale write.
    assert dict(real)["get missing"] == 404 and dict(real)["create again"] == 409
    assert dict(real)["update with a stale version"] == 409
