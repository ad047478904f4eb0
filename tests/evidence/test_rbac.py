"""RBAC for the evidence bundle: the calls it makes against the loopback API server are the ones
kfchaos.kfp.identity lists; the default manifests allow the reads and not pods/log or pods/exec, which
manifests/optional/ grants (validated against the Kubernetes schemas like the rest of manifests/)."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kfchaos.evidence.collect import Kill, Options, events, last_state, nvidia_smi, previous_log
from kfchaos.evidence.kube import ClusterKube
from kfchaos.kfp.identity import EVIDENCE_CALLS, OPTIONAL_EVIDENCE_CALLS, RUN_SERVICE_ACCOUNT, Call
from tests.manifests.test_manifests import K8S_VERSIONS, MANIFESTS, kustomize_build
from tests.support.kubeapi import KubeApiServer, kubernetes_client
from tests.support.rbac import Attributes, RbacAuthorizer, service_account_groups, service_account_user

NS = "llm-serving"
OPTIONAL = [doc for name in ("evidence-logs.yaml", "evidence-exec.yaml")
            for doc in yaml.safe_load_all((MANIFESTS / "optional" / name).read_text())]  # fmt: skip


def _call(method: str, path: str) -> tuple[str, str]:
    path = path.partition("?")[0]
    sub = re.fullmatch(r"/api/v1/namespaces/[^/]+/pods/[^/]+/(log|exec)", path)
    if sub:
        return f"pods/{sub.group(1)}", "get" if sub.group(1) == "log" else "create"
    found = re.fullmatch(r"/api/v1/namespaces/[^/]+/([^/]+)(/[^/]+)?", path)
    assert found, path
    return found.group(1), "get" if found.group(2) else "list"


def test_the_calls_are_the_listed_ones() -> None:
    with KubeApiServer() as server:
        server.add_pod(NS, "vllm-0", {"app": "vllm"}, containers=["vllm"])
        server.restart_container(NS, "vllm-0", "vllm", "OOMKilled", 137)
        kube = ClusterKube(kubernetes_client(server.url))
        kill = Kill(NS, "vllm-0", "vllm", None, "OOMKilled")
        server.exec_handler = lambda *a: ("pid, used_memory [MiB]\n1, 10 MiB\n", 0)
        last_state(kube, kill), events(kube, NS, "vllm-0"), previous_log(kube, kill, Options())
        nvidia_smi(kube, NS, "vllm-0", "vllm", Options(exec_nvidia_smi=True))
        kube.pods(NS, "app=vllm")
        made = {_call(m, p) for m, p in server.requests}
    listed = {(c.resource, c.verb) for c in EVIDENCE_CALLS + OPTIONAL_EVIDENCE_CALLS}
    assert made == listed


def _allowed(objects: list[dict[str, Any]], call: Call) -> bool:
    resource, _, sub = call.resource.partition("/")
    attrs = Attributes(call.verb, call.group, resource, NS, subresource=sub)
    user = service_account_user("kubeflow", RUN_SERVICE_ACCOUNT)
    return RbacAuthorizer(objects).authorize(user, service_account_groups("kubeflow"), attrs)[0]


def test_default_manifests_allow_the_reads_but_not_logs_or_exec() -> None:
    default = kustomize_build(MANIFESTS)
    assert all(_allowed(default, c) for c in EVIDENCE_CALLS)
    assert not any(_allowed(default, c) for c in OPTIONAL_EVIDENCE_CALLS)
    scoped = [{**o, "metadata": {**o["metadata"], "namespace": NS}} for o in OPTIONAL]  # kubectl apply -n llm-serving
    assert all(_allowed(default + scoped, c) for c in OPTIONAL_EVIDENCE_CALLS)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_optional_roles_validate(version: str) -> None:
    for obj in OPTIONAL:
        kubernetes_validate.validate(obj, version, strict=True)
