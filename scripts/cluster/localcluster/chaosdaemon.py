"""chaos-daemon on the real node (docs/cluster.md, "chaos-daemon"), as Chaos Mesh's chart deploys it.

The DaemonSet, its headless Service and its mTLS settings follow helm/chaos-mesh/templates/chaos-daemon-daemonset.yaml,
chaos-daemon-service.yaml and values.yaml (chaosDaemon: privileged, hostPID, the runtime's socket directory at
/host-run, the host's /sys at /host-sys, gRPC 31767 and HTTP 31766, mtls.enabled). The controller finds a node's
daemon through the Service's EndpointSlices (controllers/utils/chaosdaemon/chaosdaemon.go, FindDaemonIP) and
dials it with a client certificate, checking the server name chaos-daemon.chaos-mesh.org (pkg/grpc/utils.go).

Only the real node runs it (nodeSelector and toleration): KWOK's nodes have no daemon, as before, and a fault on
a pod there still fails with the controller's "cannot find daemonIP" (tests/cluster/test_daemon_faults.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from . import node
from .pki import CertificateAuthority, KeyPair

NAMESPACE = "chaos-mesh"
NAME = "chaos-daemon"
GRPC_PORT = 31767
HTTP_PORT = 31766
SERVER_NAME = "chaos-daemon.chaos-mesh.org"  # pkg/grpc/utils.go: ChaosDaemonServerName
CERT_SECRET = "chaos-mesh-daemon-certs"  # templates/secrets-configuration.yaml
LABELS = {
    "app.kubernetes.io/name": "chaos-mesh",
    "app.kubernetes.io/instance": "chaos-mesh",
    "app.kubernetes.io/component": NAME,
}


class Api(Protocol):
    def apply(self, path: str, body: dict[str, object], field_manager: str = ...) -> object: ...


def client_certificates(ca: CertificateAuthority) -> dict[str, str]:
    """The controller's environment for the daemon's mTLS (pkg/config/controller.go, TLSConfig)."""
    client: KeyPair = ca.issue("chaos-daemon-client", "chaos-mesh-controller-manager")
    return {
        "CHAOS_MESH_CA_CERT": str(ca.cert),
        "CHAOS_DAEMON_CLIENT_CERT": str(client.cert),
        "CHAOS_DAEMON_CLIENT_KEY": str(client.key),
    }


def deploy(api: Api, ca: CertificateAuthority, image: str, state: Path) -> None:
    serving = ca.issue("chaos-daemon", SERVER_NAME, server_names=(SERVER_NAME,), client=False)
    core = f"/api/v1/namespaces/{NAMESPACE}"
    api.apply(
        f"{core}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": CERT_SECRET, "namespace": NAMESPACE},
            "stringData": {
                "ca.crt": ca.cert.read_text(),
                "tls.crt": serving.cert.read_text(),
                "tls.key": serving.key.read_text(),
            },
        },
    )
    api.apply(
        f"{core}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
    )
    api.apply(
        f"{core}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": LABELS},
            "spec": {
                "clusterIP": "None",
                "selector": LABELS,
                "ports": [
                    {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
                    {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                ],
            },
        },
    )
    socket_dir = node.containerd_socket(state).parent
    api.apply(
        f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": LABELS},
            "spec": {
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        "serviceAccountName": NAME,
                        "hostPID": True,
                        "nodeSelector": {node.NODE_LABEL: "true"},
                        "tolerations": [{"key": node.NODE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
                        "containers": [
                            {
                                "name": NAME,
                                "image": image,
                                "imagePullPolicy": "IfNotPresent",
                                "command": [
                                    "/usr/local/bin/chaos-daemon",
                                    "--runtime",
                                    "containerd",
                                    "--http-port",
                                    str(HTTP_PORT),
                                    "--grpc-port",
                                    str(GRPC_PORT),
                                    "--ca",
                                    "/etc/chaos-daemon/cert/ca.crt",
                                    "--cert",
                                    "/etc/chaos-daemon/cert/tls.crt",
                                    "--key",
                                    "/etc/chaos-daemon/cert/tls.key",
                                    "--runtime-socket-path",
                                    "/host-run/containerd.sock",
                                ],
                                "env": [{"name": "TZ", "value": "UTC"}],
                                "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_PTRACE"]}},
                                "volumeMounts": [
                                    {"name": "socket-path", "mountPath": "/host-run"},
                                    {"name": "sys-path", "mountPath": "/host-sys"},
                                    {
                                        "name": "chaos-daemon-cert",
                                        "mountPath": "/etc/chaos-daemon/cert",
                                        "readOnly": True,
                                    },
                                ],
                                "ports": [
                                    {"name": "grpc", "containerPort": GRPC_PORT},
                                    {"name": "http", "containerPort": HTTP_PORT},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "socket-path", "hostPath": {"path": str(socket_dir)}},
                            {"name": "sys-path", "hostPath": {"path": "/sys"}},
                            {"name": "chaos-daemon-cert", "secret": {"secretName": CERT_SECRET}},
                        ],
                    },
                },
            },
        },
    )
