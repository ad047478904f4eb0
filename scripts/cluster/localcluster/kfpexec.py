"""What executes a KFP run on the local cluster (docs/cluster.md, "KFP's execution path").

KFP 2.1.0's API server compiles a run into an Argo Workflow (kfp.py). Here the rest of a standalone install's
execution path runs as host processes, each as KFP's manifests deploy it:

- Argo's workflow-controller v3.3.10 (the version KFP 2.1.0's go.mod requires), namespaced to `kubeflow`, with the
  ConfigMap KFP's manifests patch (manifests/kustomize/third-party/argo/base/workflow-controller-configmap-patch.yaml:
  the emissary executor, logs archived to KFP's object store); its executor image is built here (images.py).
- ML Metadata's gRPC service (scripts/cluster/programs/mlmd_server.py), which the driver and launcher record
  executions and artifacts in.
- KFP's persistence agent, which reports each Workflow's state back to the API server (what `kfchaos run --wait`
  and the KFP UI read).
- The Services the run's pods dial (minio-service, metadata-grpc-service, ml-pipeline), as Services of host
  processes (hostservices.py), and the ConfigMaps, Secret, ServiceAccount and Role KFP's manifests create.

Pods of a run go to the real node (its toleration and node selector) through Argo's workflowDefaults (docs/cluster.md
says why the node is tainted), the controller's documented way to give every Workflow a setting (argo-workflows v3.3.10,
docs/default-workflow-specs.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Protocol

import yaml

from . import PROGRAMS, hostservices, images, kfp, node, procs

NAMESPACE = kfp.NAMESPACE
PROCESSES = ("kfp-persistence-agent", "argo-workflow-controller", "mlmd")
MLMD_VERSION = "1.15.0"  # the newest ml-metadata wheel for CPython 3.11 whose store KFP 2.1.0's client speaks to
MLMD_PORT = 8080  # metadata-grpc-service's port (manifests/kustomize/base/metadata/base/metadata-grpc-service.yaml)
MINIO_PORT = 9000  # minio-service's port (third-party/minio/base/minio-service.yaml)
RUNNER_SA = "pipeline-runner"  # DEFAULTPIPELINERUNNERSERVICEACCOUNT in the API server's config (kfp.py)
PERSISTENCE_SA = "ml-pipeline-persistenceagent"
MINIO_SECRET = "mlpipeline-minio-artifact"
BUCKET = "mlpipeline"
NODE_TOLERATION = {"key": node.NODE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


class KfpExecError(RuntimeError):
    pass


class Images(Protocol):
    argoexec: str


Api = kfp.Api
Wait = kfp.Wait


def mlmd_python() -> Path:
    """The Python of a virtualenv with `ml-metadata` (PyPI), cached beside the cluster's binaries."""
    venv = images.cache_root() / "cluster" / f"ml-metadata-{MLMD_VERSION}"
    python = venv / "bin" / "python"
    if (venv / ".complete").is_file():
        return python
    for argv in (
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"ml-metadata=={MLMD_VERSION}"],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise KfpExecError(f"installing ml-metadata {MLMD_VERSION}: {' '.join(argv[:4])}: {done.stderr[-2000:]}")
    (venv / ".complete").touch()
    return python


def _manifest(bin_dir: Path, name: str) -> dict[str, object]:
    document = yaml.safe_load((bin_dir / "exec" / name).read_text())
    document["metadata"]["namespace"] = NAMESPACE  # kustomize sets it upstream
    return document  # type: ignore[no-any-return]


def _objects(api: Api, bin_dir: Path, backend: kfp.Kfp) -> None:
    core = f"/api/v1/namespaces/{NAMESPACE}"
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}"
    for sa, role_file in (
        (RUNNER_SA, "pipeline-runner-role.yaml"),
        (PERSISTENCE_SA, "ml-pipeline-persistenceagent-role.yaml"),
    ):
        role = _manifest(bin_dir, role_file)
        role_name = role["metadata"]["name"]  # type: ignore[index]
        api.apply(
            f"{core}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": NAMESPACE}},
        )
        api.apply(f"{rbac}/roles", role)
        api.apply(
            f"{rbac}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": role_name, "namespace": NAMESPACE},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}],
            },
        )
    # The persistence agent reports through the API server's TokenReview-backed auth; the ClusterRole part of its
    # manifests (cluster-scoped) is what lets it report, read here from its Role (same rules, namespaced).
    api.apply(f"{core}/configmaps", _manifest(bin_dir, "metadata-grpc-configmap.yaml"))
    launcher = _manifest(bin_dir, "kfp-launcher-configmap.yaml")
    # generic install's pipeline-install-config: defaultPipelineRoot "" (the launcher's own default,
    # minio://mlpipeline/v2/artifacts: backend/src/v2/config/env.go).
    launcher["data"] = {}
    api.apply(f"{core}/configmaps", launcher)
    api.apply(
        f"{core}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": MINIO_SECRET, "namespace": NAMESPACE},
            "stringData": {"accesskey": backend.s3_access_key, "secretkey": backend.s3_secret_key},
        },
    )
    controller_config = _manifest(bin_dir, "workflow-controller-configmap-patch.yaml")
    data = controller_config["data"]
    data["artifactRepository"] = (  # type: ignore[index]
        data["artifactRepository"].replace("$(kfp-namespace)", NAMESPACE).replace("$(kfp-artifact-bucket-name)", BUCKET)  # type: ignore[index]
    )
    # Every pod of a run on the real node: the KWOK nodes would take them and only pretend to run them.
    defaults = {"spec": {"tolerations": [NODE_TOLERATION], "nodeSelector": {node.NODE_LABEL: "true"}}}
    data["workflowDefaults"] = yaml.safe_dump(defaults)  # type: ignore[index]
    api.apply(f"{core}/configmaps", controller_config)


def start(
    state: Path,
    api: Api,
    bins: dict[str, Path],
    server: str,
    ca_cert: Path,
    admin_kubeconfig: Path,
    net: node.NodeNet,
    images: Images,
    backend: kfp.Kfp,
    wait: Wait,
) -> None:
    kfp_bins = bins["kfp-apiserver"]
    _objects(api, kfp_bins, backend)
    host = net.host_ip
    mlmd_port = kfp.free_port()
    hostservices.external_service(
        api, NAMESPACE, "minio-service", host, [hostservices.Port("http", MINIO_PORT, backend.s3_port)]
    )
    hostservices.external_service(
        api,
        NAMESPACE,
        "ml-pipeline",
        host,
        [hostservices.Port("http", 8888, backend.http_port), hostservices.Port("grpc", 8887, backend.rpc_port)],
    )
    hostservices.external_service(
        api, NAMESPACE, "metadata-grpc-service", host, [hostservices.Port("grpc-api", MLMD_PORT, mlmd_port)]
    )

    root = state / "kfp"
    procs.start(
        state,
        "mlmd",
        [
            str(mlmd_python()),
            str(PROGRAMS / "mlmd_server.py"),
            f"--host={host}",
            f"--port={mlmd_port}",
            f"--db={root / 'mlmd.sqlite'}",
        ],
    )
    wait("ML Metadata's gRPC service", lambda: kfp.port_open(mlmd_port, host), state, "mlmd")

    # The controller reads its ConfigMap from its own namespace, the kubeconfig context's (argo-workflows v3.3.10,
    # cmd/workflow-controller/main.go: clientConfig.Namespace()); flags as KFP's namespaced install sets them.
    kubeconfig = yaml.safe_load(admin_kubeconfig.read_text())
    kubeconfig["contexts"][0]["context"]["namespace"] = NAMESPACE
    argo_kubeconfig = root / "argo.kubeconfig"
    argo_kubeconfig.write_text(yaml.safe_dump(kubeconfig))
    argo_kubeconfig.chmod(0o600)
    procs.start(
        state,
        "argo-workflow-controller",
        [
            str(bins["argo"] / "workflow-controller"),
            f"--kubeconfig={argo_kubeconfig}",
            "--configmap=workflow-controller-configmap",
            f"--executor-image={images.argoexec}",
            "--namespaced",
            f"--managed-namespace={NAMESPACE}",
            "--loglevel=info",
        ],
        # DEFAULT_REQUEUE_TIME: how long the controller waits before it looks at a workflow again (argo-workflows
        # v3.3.10 workflow/controller/rate_limiters.go GetRequeueTime: 10 s by default, "some users may wish to have
        # this as low as 2s" for workflows of many short nodes). A KFP v2 pipeline is just that, a driver pod and an
        # executor pod per task, so at 10 s each task waited on the queue as long as it ran. 2 s, upstream's own
        # low end; the floor of 1 s keeps the informer's copy of the workflow current.
        env={"LEADER_ELECTION_DISABLE": "true", "HOME": str(root), "DEFAULT_REQUEUE_TIME": "2s"},
    )

    # The persistence agent builds its Argo client in-cluster (backend/src/common/util/execution_client.go) and
    # sends the token of its ServiceAccount (projected with audience pipelines.kubeflow.org in its Deployment,
    # ml-pipeline-persistenceagent-deployment.yaml) from SaTokenFile (agent/persistence/client/token_refresher.go).
    token = kfp.token(api, PERSISTENCE_SA)
    agent = root / "persistence-agent.kubeconfig"
    kubeconfig = yaml.safe_load(admin_kubeconfig.read_text())
    kubeconfig["users"][0]["user"] = {"token": token}
    agent.write_text(yaml.safe_dump(kubeconfig))
    agent.chmod(0o600)
    argv = [
        str(kfp_bins / "persistence-agent"),
        f"--kubeconfig={agent}",
        f"--namespace={NAMESPACE}",
        f"--mlPipelineAPIServerName={backend.address}",
        f"--mlPipelineServiceHttpPort={backend.http_port}",
        f"--mlPipelineServiceGRPCPort={backend.rpc_port}",
        "--ttlSecondsAfterWorkflowFinish=86400",
        "--numWorker=2",
    ]
    procs.start(
        state,
        "kfp-persistence-agent",
        kfp.in_cluster(
            root,
            "persistence-agent",
            token,
            ca_cert,
            argv,
            {"/run/secrets/kubeflow/tokens/persistenceagent-sa-token": token},
        ),
        env=kfp.in_cluster_env(server),
    )
