"""RBAC on the real API server (issue 21 §3.5): manifests/ applied (with KFP's own pipeline-runner Role, as a
KFP install has it); as kfchaos-runner every call a run makes is allowed by the real RBAC authorizer and the
fault backend's lifecycle works; an identity without the bindings gets a real 403 that kfchaos names as RBAC;
a webhook denial is named as admission, not RBAC."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import dynamic
from kubernetes.client.rest import ApiException

from kfchaos.faults.backend import AdmissionDenied, PermissionDenied
from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.faults.render import render_fault
from kfchaos.faults.retry import RetryPolicy
from kfchaos.kfp.identity import RUN_CALLS, Call
from tests.cluster.conftest import RealCluster
from tests.cluster.test_smoke import eventually
from tests.faults.experiments import experiment_with
from tests.manifests.test_manifests import MANIFESTS, kustomize_build
from tests.manifests.test_rbac import KFP_NAMESPACE, TARGET_NAMESPACE, UPSTREAM_KFP_RBAC

pytestmark = pytest.mark.cluster

TARGET_LABELS = {"app.kubernetes.io/name": "vllm"}
RETRY = RetryPolicy(attempts=3, base_delay=0.05, max_delay=0.2)


def apply_all(api_client: k8s.ApiClient, objects: list[dict[str, Any]]) -> None:
    """Server-side apply, as `kubectl apply --server-side` would."""
    client = dynamic.DynamicClient(api_client)
    for obj in objects:
        resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace") if resource.namespaced else None
        resource.server_side_apply(
            body=obj,
            name=obj["metadata"]["name"],
            namespace=namespace,
            field_manager="kfchaos-tests",
            force_conflicts=True,
        )


@pytest.fixture(scope="module")
def rbac_applied(real_cluster: RealCluster) -> Iterator[RealCluster]:
    admin = real_cluster.api_client()
    objects = kustomize_build(MANIFESTS) + UPSTREAM_KFP_RBAC
    apply_all(admin, [o for o in objects if o["kind"] == "Namespace"])
    apply_all(admin, [o for o in objects if o["kind"] != "Namespace"])
    yield real_cluster


def _namespace(call: Call) -> str:
    return {"kfp": KFP_NAMESPACE, "target": TARGET_NAMESPACE, "cluster": ""}[call.scope]


def test_every_call_of_a_run_is_allowed_for_kfchaos_runner_by_real_rbac(rbac_applied: RealCluster) -> None:
    authz = k8s.AuthorizationV1Api(rbac_applied.api_client("runner"))
    denied = []
    for call in RUN_CALLS:
        review = authz.create_self_subject_access_review(
            k8s.V1SelfSubjectAccessReview(
                spec=k8s.V1SelfSubjectAccessReviewSpec(
                    resource_attributes=k8s.V1ResourceAttributes(
                        verb=call.verb,
                        group=call.group,
                        resource=call.resource,
                        namespace=_namespace(call) or None,
                        name=call.name or None,
                    )
                )
            )
        )
        if not review.status.allowed:
            denied.append(call.describe())
    assert denied == []


def _target_pods(real_cluster: RealCluster) -> None:
    apps = k8s.AppsV1Api(real_cluster.api_client())
    name = "vllm"
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": TARGET_NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": TARGET_LABELS},
            "template": {
                "metadata": {"labels": TARGET_LABELS},
                "spec": {"containers": [{"name": "vllm", "image": "example.invalid/vllm:1"}]},
            },
        },
    }
    try:
        apps.create_namespaced_deployment(TARGET_NAMESPACE, body)
    except ApiException as error:
        if error.status != 409:
            raise
    core = k8s.CoreV1Api(real_cluster.api_client())
    eventually(
        "two Running vllm pods",
        lambda: (
            len(
                [
                    p
                    for p in core.list_namespaced_pod(
                        TARGET_NAMESPACE, label_selector="app.kubernetes.io/name=vllm"
                    ).items
                    if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
                ]
            )
            >= 2
        ),
    )


def _backend(api_client: k8s.ApiClient, experiment: Any, run_id: str) -> ChaosMeshBackend:
    return ChaosMeshBackend(
        api_client, retry=RETRY, poll_interval=0.2, request_timeout=10, experiment=experiment, run_id=run_id,
        placement_checks=False,
    )  # fmt: skip


def test_the_backend_lifecycle_runs_as_kfchaos_runner(rbac_applied: RealCluster) -> None:
    _target_pods(rbac_applied)
    experiment = experiment_with({"name": "kill", "type": "pod-kill", "mode": "one"})
    run_id = f"rbac-{uuid.uuid4().hex[:6]}"
    backend = _backend(rbac_applied.api_client("runner"), experiment, run_id)
    manifest = render_fault(experiment, experiment.spec.faults[0], run_id)
    assert backend.preflight([manifest]).dry_run
    backend.apply(manifest)
    assert backend.sweep(run_id, [TARGET_NAMESPACE], timeout=30) == 1


def _token_client(real_cluster: RealCluster, account: str) -> k8s.ApiClient:
    """A client authenticated as a fresh ServiceAccount (TokenRequest), bound to nothing."""
    core = k8s.CoreV1Api(real_cluster.api_client())
    try:
        core.create_namespaced_service_account(
            KFP_NAMESPACE, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=account))
        )
    except ApiException as error:
        if error.status != 409:
            raise
    token = core.create_namespaced_service_account_token(
        account,
        KFP_NAMESPACE,
        k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)),
    ).status.token
    admin_config = real_cluster.api_client().configuration
    configuration = k8s.Configuration()
    configuration.host = admin_config.host
    configuration.ssl_ca_cert = admin_config.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return k8s.ApiClient(configuration)


def test_an_unbound_identity_gets_a_real_403_that_kfchaos_names_as_rbac(rbac_applied: RealCluster) -> None:
    experiment = experiment_with({"name": "kill", "type": "pod-kill", "mode": "one"})
    backend = _backend(_token_client(rbac_applied, "kfchaos-unbound"), experiment, "rbac-unbound")
    with pytest.raises(PermissionDenied) as caught:
        backend.preflight([render_fault(experiment, experiment.spec.faults[0], "rbac-unbound")])
    text = str(caught.value)
    assert "permission denied" in text and "Add the rule" in text
    assert "system:serviceaccount:kubeflow:kfchaos-unbound" in text  # the real server's message, quoted


def test_a_webhook_denial_is_named_as_admission_not_rbac(rbac_applied: RealCluster) -> None:
    _target_pods(rbac_applied)
    experiment = experiment_with({"name": "kill", "type": "pod-kill", "mode": "fixed-percent", "value": "50"})
    manifest = render_fault(experiment, experiment.spec.faults[0], "rbac-adm")
    manifest["spec"]["value"] = "12.5"  # what the webhook refuses (the schema admits any string)
    backend = _backend(rbac_applied.api_client("runner"), experiment, "rbac-adm")
    with pytest.raises(AdmissionDenied) as caught:
        backend.preflight([manifest])
    text = str(caught.value)
    assert 'admission webhook "vpodchaos.kb.io"' in text and "not RBAC" in text
