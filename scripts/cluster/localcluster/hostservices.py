"""Services whose endpoints are processes of the host (docs/cluster.md, "The real node").

The control plane's processes run on the host, as a managed cluster's control plane runs outside its nodes. Pods
find them as they would in a cluster: by a Service's DNS name or its environment variables. Each is a Service
without a selector and an EndpointSlice that names the host's address on the node's link, the pattern Kubernetes
documents for a Service of something outside the cluster (kubernetes/website,
content/en/docs/concepts/services-networking/service.md, "Services without selectors"). kube-proxy on the node
forwards the Service's address to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Api(Protocol):
    def apply(self, path: str, body: dict[str, object], field_manager: str = ...) -> object: ...


@dataclass(frozen=True)
class Port:
    name: str
    port: int  # what clients dial (the Service's port)
    target: int  # where the host process listens
    protocol: str = "TCP"


MANAGED_BY = "kfchaos-cluster-up"


def external_service(
    api: Api, namespace: str, name: str, host_ip: str, ports: list[Port], cluster_ip: str | None = None
) -> None:
    spec: dict[str, object] = {
        "ports": [{"name": p.name, "port": p.port, "targetPort": p.target, "protocol": p.protocol} for p in ports]
    }
    if cluster_ip:
        spec["clusterIP"] = cluster_ip
    api.apply(
        f"/api/v1/namespaces/{namespace}/services",
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace}, "spec": spec},
    )
    # discovery.k8s.io/v1: kube-proxy reads EndpointSlices; the service-name label ties the slice to its Service
    # and managed-by keeps the endpointslice controller's hands off it (staging/src/k8s.io/api/discovery/v1).
    api.apply(
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{name}-host",
                "namespace": namespace,
                "labels": {
                    "kubernetes.io/service-name": name,
                    "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host_ip], "conditions": {"ready": True}}],
            "ports": [{"name": p.name, "port": p.target, "protocol": p.protocol} for p in ports],
        },
    )
