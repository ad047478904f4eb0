"""Checks on a real cluster after scripts/e2e-kind.sh (skipped without one: set KUBECONFIG)."""

from __future__ import annotations

import pytest

from kfchaos.kfp.identity import CHAOS_PLURALS

pytestmark = pytest.mark.e2e


def test_chaos_mesh_crds_are_installed() -> None:
    from kubernetes import client, config

    config.load_kube_config()
    names = {crd.metadata.name for crd in client.ApiextensionsV1Api().list_custom_resource_definition().items}
    assert {f"{plural}.chaos-mesh.org" for plural in CHAOS_PLURALS} <= names


def test_no_chaos_object_of_kfchaos_remains() -> None:
    from kubernetes import client, config

    config.load_kube_config()
    api = client.CustomObjectsApi()
    left = []
    for plural in CHAOS_PLURALS:
        items = api.list_cluster_custom_object(
            "chaos-mesh.org", "v1alpha1", plural, label_selector="app.kubernetes.io/managed-by=kfchaos"
        )["items"]
        left += [f"{plural}/{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items]
    assert left == []
