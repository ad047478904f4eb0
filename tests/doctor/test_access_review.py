"""The loopback API server answers authorization.k8s.io/v1 access reviews as the real one does: POST only,
the request echoed with `status`, RBAC allows or has no opinion (allowed false, no reason, no `denied`),
a SubjectAccessReview needs a user or groups, a SelfSubjectAccessReview is decided for the caller."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes.client as k
import pytest
import yaml

from tests.conftest import ROOT
from tests.manifests.test_manifests import MANIFESTS, kustomize_build
from tests.support.kubeapi import KubeApiServer, kubernetes_client

RUNNER = "system:serviceaccount:kubeflow:kfchaos-runner"
GROUPS = ["system:serviceaccounts", "system:serviceaccounts:kubeflow", "system:authenticated"]
UPSTREAM = [d for d in yaml.safe_load_all((ROOT / "tests/manifests/data/kfp-pipeline-runner-role.yaml").read_text())]


def _attrs(
    verb: str, resource: str, namespace: str, group: str = "", name: str | None = None
) -> k.V1ResourceAttributes:
    return k.V1ResourceAttributes(verb=verb, group=group, resource=resource, namespace=namespace, name=name)


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as running:
        running.rbac = kustomize_build(MANIFESTS) + UPSTREAM
        yield running


def test_subject_access_review_decides_with_rbac(server: KubeApiServer) -> None:
    api = k.AuthorizationV1Api(kubernetes_client(server.url))

    def review(attrs: k.V1ResourceAttributes) -> k.V1SubjectAccessReviewStatus:
        spec = k.V1SubjectAccessReviewSpec(user=RUNNER, groups=GROUPS, resource_attributes=attrs)
        return api.create_subject_access_review(k.V1SubjectAccessReview(spec=spec)).status

    allowed = review(_attrs("create", "networkchaos", "llm-serving", "chaos-mesh.org"))
    assert allowed.allowed is True
    assert allowed.reason.startswith('RBAC: allowed by RoleBinding "kfchaos-fault-injector/llm-serving"')
    denied = review(_attrs("create", "networkchaos", "default", "chaos-mesh.org"))
    assert denied.allowed is False and not denied.reason and not denied.denied
    assert review(_attrs("get", "configmaps", "kubeflow", name="kfp-launcher")).allowed is True


def test_self_subject_access_review_is_decided_for_the_caller(server: KubeApiServer) -> None:
    api = k.AuthorizationV1Api(kubernetes_client(server.url))
    spec = k.V1SelfSubjectAccessReviewSpec(resource_attributes=_attrs("delete", "pods", "anywhere"))
    admin = api.create_self_subject_access_review(k.V1SelfSubjectAccessReview(spec=spec))
    assert admin.status.allowed is True and "system:masters" in admin.status.reason
    server.user, server.groups = RUNNER, tuple(GROUPS)
    runner = api.create_self_subject_access_review(k.V1SelfSubjectAccessReview(spec=spec))
    assert runner.status.allowed is False


def test_a_subject_access_review_without_user_or_groups_is_invalid(server: KubeApiServer) -> None:
    api = k.AuthorizationV1Api(kubernetes_client(server.url))
    spec = k.V1SubjectAccessReviewSpec(resource_attributes=_attrs("get", "pods", "x"))
    with pytest.raises(k.ApiException) as caught:
        api.create_subject_access_review(k.V1SubjectAccessReview(spec=spec))
    assert caught.value.status == 422
