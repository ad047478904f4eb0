"""Chaos Mesh's controller-manager as the local cluster runs it: a host process configured as the helm chart
configures its Deployment, the Deployment object a Helm install leaves (what `kfchaos doctor` reads), the chart's
admission webhooks pointing at the process, and the release's CRDs aligned with the `api` module it is built with.
chaos-daemon, on the real node, is chaosdaemon.py.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Protocol

CHAOS_NAMESPACE = "chaos-mesh"


class Api(Protocol):
    def request(self, method: str, path: str) -> object: ...

    def apply(self, path: str, body: dict[str, object], field_manager: str = ...) -> object: ...


# The webhooks of Chaos Mesh's helm chart: one mutating and one validating per entry of values.yaml
# `webhook.CRDS` (chaos-mesh/chaos-mesh, helm/chaos-mesh/values.yaml; templates/mutating-admission-webhooks.yaml
# and validating-admission-webhooks.yaml: path /mutate-chaos-mesh-org-v1alpha1-<crd>, name m<crd>.kb.io;
# /validate-chaos-mesh-org-v1alpha1-<crd>, v<crd>.kb.io; plus /validate-auth, vauth.kb.io, on every resource).
WEBHOOK_CRDS = (
    "podchaos",
    "iochaos",
    "timechaos",
    "networkchaos",
    "kernelchaos",
    "stresschaos",
    "awschaos",
    "azurechaos",
    "gcpchaos",
    "dnschaos",
    "jvmchaos",
    "schedule",
    "workflow",
    "httpchaos",
    "blockchaos",
    "physicalmachinechaos",
    "physicalmachine",
    "statuscheck",
    "remotecluster",
)
WEBHOOK_RESOURCE = {
    "schedule": "schedules",
    "workflow": "workflows",
    "physicalmachine": "physicalmachines",
    "statuscheck": "statuschecks",
}
WEBHOOK_TIMEOUT_SECONDS = 5  # values.yaml webhook.timeoutSeconds
WEBHOOK_FAILURE_POLICY = "Fail"  # values.yaml webhook.FailurePolicy

# The chart's image for the controller: <images.registry>/<controllerManager.image.repository>:<images.tag>,
# from helm/chaos-mesh/values.yaml of the commit cluster/chaos-mesh/go.mod pins (its images.tag is v2.8.4).
CONTROLLER_IMAGE = "ghcr.io/chaos-mesh/chaos-mesh:v2.8.4"
# Per-machine settings of the process: not what a Deployment in a cluster would carry.
LOCAL_ONLY_ENV = (
    "KUBECONFIG",
    "WEBHOOK_HOST",
    "WEBHOOK_PORT",
    "CERTS_DIR",
    "METRICS_HOST",
    "METRICS_PORT",
    "CHAOS_MESH_CA_CERT",
    "CHAOS_DAEMON_CLIENT_CERT",
    "CHAOS_DAEMON_CLIENT_KEY",
)


def controller_deployment(env: dict[str, str]) -> dict[str, object]:
    """chaos-mesh/chaos-controller-manager as helm/chaos-mesh/templates/controller-manager-deployment.yaml
    makes it: the chart's labels (templates/_helpers.tpl chaos-mesh.labels and selectors), one replica (leader
    election off), the release's image and the controller's environment."""
    selector = {
        "app.kubernetes.io/name": "chaos-mesh",
        "app.kubernetes.io/instance": "chaos-mesh",
        "app.kubernetes.io/component": "controller-manager",
    }
    labels = {**selector, "app.kubernetes.io/part-of": "chaos-mesh", "app.kubernetes.io/version": "v2.8.4"}
    container_env = [{"name": k, "value": v} for k, v in env.items() if k not in LOCAL_ONLY_ENV]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chaos-controller-manager", "namespace": CHAOS_NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "chaos-mesh", "image": CONTROLLER_IMAGE, "env": container_env}],
                },
            },
        },
    }


# Fields of the Go types in the served chaos-mesh `api` module that the release's CRDs lack (cluster/chaos-mesh/
# go.mod: the proxy serves `api` only at a later master commit than the controller). Without them the API server
# prunes what the mutating webhook defaults, and the validating webhook's `reflect.DeepEqual(old.Spec, new.Spec)`
# (api/v1alpha1/zz_generated.chaosmesh.go, ValidateUpdate) then refuses every update the controller makes
# ("Cannot update chaos spec"): records and desiredPhase could never be written.
# NetworkChaosSpec.PartitionBehavior: api/v1alpha1/networkchaos_types.go, defaulted to "drop" in
# networkchaos_webhook.go.
API_MODULE_FIELDS = {
    "networkchaos.chaos-mesh.org": {
        "partitionBehavior": {
            "type": "string",
            "enum": ["drop", "reject"],
            "description": "added by kfchaos's local cluster: a field of the api module the controller is built with",
        }
    }
}


def align_with_api_module(crd: dict[str, object]) -> dict[str, object]:
    fields = API_MODULE_FIELDS.get(crd["metadata"]["name"])  # type: ignore[index]
    for version in crd["spec"]["versions"] if fields else []:  # type: ignore[index]
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].update(fields)
    return crd


def register_webhooks(api: Api, ca: Path, port: int) -> None:
    """The helm chart's webhook configurations, pointing at the controller's webhook server on 127.0.0.1."""
    bundle = base64.b64encode(ca.read_bytes()).decode()

    def hook(name: str, path: str, resources: list[str]) -> dict[str, object]:
        return {
            "name": name,
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle},
            "failurePolicy": WEBHOOK_FAILURE_POLICY,
            "timeoutSeconds": WEBHOOK_TIMEOUT_SECONDS,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1", "v1beta1"],
            "rules": [
                {
                    "apiGroups": ["chaos-mesh.org"],
                    "apiVersions": ["v1alpha1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": resources,
                }
            ],
        }

    mutating = [
        hook(f"m{crd}.kb.io", f"/mutate-chaos-mesh-org-v1alpha1-{crd}", [WEBHOOK_RESOURCE.get(crd, crd)])
        for crd in WEBHOOK_CRDS
    ]
    validating = [
        hook(f"v{crd}.kb.io", f"/validate-chaos-mesh-org-v1alpha1-{crd}", [WEBHOOK_RESOURCE.get(crd, crd)])
        for crd in WEBHOOK_CRDS
    ]
    group = "/apis/admissionregistration.k8s.io/v1"
    kind = "admissionregistration.k8s.io/v1"
    api.apply(
        f"{group}/mutatingwebhookconfigurations",
        {
            "apiVersion": kind,
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "chaos-mesh-mutation"},
            "webhooks": mutating,
        },
    )
    api.apply(
        f"{group}/validatingwebhookconfigurations",
        {
            "apiVersion": kind,
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "chaos-mesh-validation"},
            "webhooks": validating,
        },
    )
    api.apply(
        f"{group}/validatingwebhookconfigurations",
        {
            "apiVersion": kind,
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "chaos-mesh-validation-auth"},
            "webhooks": [hook("vauth.kb.io", "/validate-auth", ["*"])],
        },
    )


def crds_established(api: Api) -> bool:
    crds = api.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    chaos = [c for c in crds["items"] if c["spec"]["group"] == "chaos-mesh.org"]  # type: ignore[index]
    return bool(chaos) and all(
        any(
            cond["type"] == "Established" and cond["status"] == "True"
            for cond in c.get("status", {}).get("conditions", [])
        )
        for c in chaos
    )
