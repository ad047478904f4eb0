"""manifests/ builds with kustomize and every object validates offline against the Kubernetes schemas."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import ROOT, require_tool

MANIFESTS = ROOT / "manifests"
# The oldest and newest Kubernetes minor versions we claim to support.
K8S_VERSIONS = ["1.29.0", "1.35.0"]


def kustomize_build(path: Path) -> list[dict[str, Any]]:
    kubectl = require_tool("kubectl", "kustomize builds of manifests/")
    result = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def built() -> list[dict[str, Any]]:
    return kustomize_build(MANIFESTS)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_validates_strictly(built: list[dict[str, Any]], version: str) -> None:
    assert built
    for obj in built:
        kubernetes_validate.validate(obj, version, strict=True)


def test_a_schema_violation_is_caught() -> None:
    role = yaml.safe_load((MANIFESTS / "base" / "serviceaccount.yaml").read_text())
    role["metadata"]["nmae"] = "typo"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(role, K8S_VERSIONS[-1], strict=True)


def _by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_target_namespace_is_annotated_for_chaos_mesh_filter_namespace(built: list[dict[str, Any]]) -> None:
    (namespace,) = _by_kind(built, "Namespace")
    assert namespace["metadata"]["name"] == "llm-serving"
    assert namespace["metadata"]["annotations"]["chaos-mesh.org/inject"] == "enabled"


def test_bindings_name_the_runner_service_account(built: list[dict[str, Any]]) -> None:
    (account,) = _by_kind(built, "ServiceAccount")
    for binding in _by_kind(built, "RoleBinding") + _by_kind(built, "ClusterRoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "kubeflow"}
        ]
    namespaces = sorted(b["metadata"]["namespace"] for b in _by_kind(built, "RoleBinding"))
    assert namespaces == ["kubeflow", "llm-serving"]  # KFP's runner Role in the KFP namespace; the chaos Role


def test_argocd_never_prunes_or_deletes_the_target_namespace(built: list[dict[str, Any]]) -> None:
    # kfchaos does not own llm-serving: removing the overlay or the Application must leave it (Argo CD
    # sync-options.md: a resource's Prune=false overrides the Application's prune: true).
    (namespace,) = _by_kind(built, "Namespace")
    options = {o.strip() for o in namespace["metadata"]["annotations"]["argocd.argoproj.io/sync-options"].split(",")}
    assert {"Prune=false", "Delete=false"} <= options


def test_cluster_wide_access_is_read_only_crds(built: list[dict[str, Any]]) -> None:
    (cluster_role,) = _by_kind(built, "ClusterRole")
    assert cluster_role["rules"] == [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get"]}
    ]


def test_every_experiment_namespace_has_an_overlay(built: list[dict[str, Any]]) -> None:
    from kfchaos.validate import load_experiment

    granted = {o["metadata"]["namespace"] for o in _by_kind(built, "Role")}
    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        experiment = load_experiment(path)
        needed = {experiment.fault_namespace(f) for f in experiment.spec.faults if f.cluster_side}
        assert needed <= granted, f"{path.name}: no Role in {needed - granted}; add manifests/overlays/<ns>"


def test_argocd_application_syncs_this_folder() -> None:
    app = yaml.safe_load((MANIFESTS / "argocd" / "application.yaml").read_text())
    assert app["apiVersion"] == "argoproj.io/v1alpha1" and app["kind"] == "Application"
    source = app["spec"]["source"]
    assert (ROOT / source["path"] / "kustomization.yaml").is_file()
    assert app["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    # Standard object metadata still validates against the Kubernetes schema for ObjectMeta.
    meta_only = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": app["metadata"]}
    kubernetes_validate.validate(meta_only, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_demo_target_validates_and_matches_the_e2e_experiment(version: str) -> None:
    from kfchaos.validate import load_experiment

    objects = kustomize_build(MANIFESTS / "demo-target")
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)
    experiment = load_experiment(ROOT / "scripts" / "e2e" / "experiment.yaml")
    (deployment,) = _by_kind(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert experiment.spec.target.selector.labels.items() <= pod_labels.items()
    assert deployment["metadata"]["namespace"] == experiment.spec.target.namespace
    (service,) = _by_kind(objects, "Service")
    assert f"//{service['metadata']['name']}.{experiment.spec.target.namespace}.svc:" in experiment.spec.target.endpoint


def test_schedules_file_loads_and_names_compiled_pipelines() -> None:
    from kfchaos.kfp.schedules import load_schedules

    schedules = load_schedules(MANIFESTS / "schedules.yaml")
    assert schedules.schedules
    compiled = {p.name for p in (ROOT / "pipelines" / "compiled").iterdir() if p.is_dir()}
    for entry in schedules.schedules:
        assert entry.pipeline in compiled, f"{entry.name}: no compiled pipeline {entry.pipeline}"
        assert len(entry.cron.split()) == 6
