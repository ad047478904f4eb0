"""KFP's own API server in the local cluster (docs/kfp-backend.md).

MariaDB (Debian's package, scripts/ensure-mariadb.sh) on 127.0.0.1 → an S3 object store (moto's server, from PyPI)
→ KFP's ScheduledWorkflow CRD and Argo's Workflow CRDs → the API server's and the ScheduledWorkflow controller's
ServiceAccounts and Roles → the API server (KFP_HOST) and the ScheduledWorkflow controller. The object store and
the API server listen on the cluster's address (the host end of the real node's link), where the pods of a run
reach them; kfpexec.py starts what executes a run (Argo, ML Metadata, the persistence agent).

Both KFP binaries build their Kubernetes clients with client-go's rest.InClusterConfig (kubeflow/pipelines,
backend/src/apiserver/client/util.go, backend/src/common/util/execution_client.go), which reads the token and CA
from the fixed path /var/run/secrets/kubernetes.io/serviceaccount. Each is therefore started in its own mount
namespace (`unshare -m`, root) with a tmpfs over /run holding its ServiceAccount's token: nothing on the host's
/run changes, and two clusters on one machine do not share a token.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml

from . import procs, shortpaths

NAMESPACE = "kubeflow"  # KFP's single-user install (manifests/kustomize/env/platform-agnostic: namespace kubeflow)
# The ServiceAccounts KFP's manifests give its API server and ScheduledWorkflow controller
# (manifests/kustomize/base/pipeline/ml-pipeline-apiserver-sa.yaml, ml-pipeline-scheduledworkflow-sa.yaml),
# each bound to the Role of the same release (ml-pipeline-apiserver-rolebinding.yaml and
# ml-pipeline-scheduledworkflow-rolebinding.yaml bind Role ml-pipeline / ml-pipeline-scheduledworkflow-role).
API_SERVICE_ACCOUNT = "ml-pipeline"
SWF_SERVICE_ACCOUNT = "ml-pipeline-scheduledworkflow"
# Stop order: the clients first, the database last.
PROCESSES = ("kfp-scheduledworkflow", "kfp-apiserver", "kfp-objectstore", "kfp-mariadb")
SA_DIR = "/run/secrets/kubernetes.io/serviceaccount"  # /var/run is a link to /run on Debian


class KfpError(RuntimeError):
    pass


class Api(Protocol):
    def request(
        self, method: str, path: str, body: object | None = None, content_type: str = "application/json"
    ) -> object: ...

    def apply(self, path: str, body: dict[str, object], field_manager: str = ...) -> object: ...


Wait = Callable[[str, Callable[[], bool], Path, "str | None"], None]


@dataclass(frozen=True)
class Kfp:
    host: str  # the API server's HTTP endpoint (what `kfchaos --host` and kfp.Client take)
    version: str  # the pinned module version of github.com/kubeflow/pipelines
    address: str  # where the API server and the object store listen
    http_port: int
    rpc_port: int
    s3_port: int
    s3_access_key: str
    s3_secret_key: str


def mariadbd() -> tuple[str, str]:
    server = shutil.which("mariadbd") or ("/usr/sbin/mariadbd" if Path("/usr/sbin/mariadbd").exists() else None)
    install = shutil.which("mariadb-install-db")
    if server is None or install is None:
        raise KfpError("MariaDB is not installed: run scripts/ensure-mariadb.sh (Debian package `mariadb-server`)")
    return server, install


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_open(port: int, address: str = "127.0.0.1") -> bool:
    with socket.create_connection((address, port), timeout=2):
        return True


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)


def start(
    state: Path,
    api: Api,
    bin_dir: Path,
    server: str,
    ca_cert: Path,
    wait: Wait,
    address: str,
    images: Images,
) -> Kfp:
    """Start KFP's backend against the running control plane (`server`, trusted through `ca_cert`); its listeners
    on `address`, its compiled Workflows naming the node's driver and launcher `images`."""
    ports = {name: free_port() for name in ("db", "s3", "kfp-http", "kfp-rpc", "kfp-visualization")}
    root = state / "kfp"
    root.mkdir(parents=True, exist_ok=True)
    database = _start_mariadb(state, root, ports["db"], wait)
    _start_objectstore(state, address, ports["s3"], wait)
    _install_crds_and_rbac(api, bin_dir, wait, state)
    tokens = {sa: token(api, sa) for sa in (API_SERVICE_ACCOUNT, SWF_SERVICE_ACCOUNT)}
    version = (bin_dir / "VERSION").read_text().strip()
    host = _start_apiserver(
        state, root, bin_dir, server, ca_cert, tokens[API_SERVICE_ACCOUNT], ports, database, version, address, images
    )
    wait(
        "KFP API server /apis/v2beta1/healthz", lambda: _http_ok(f"{host}/apis/v2beta1/healthz"), state, "kfp-apiserver"
    )
    _start_scheduledworkflow(state, root, bin_dir, server, ca_cert, tokens[SWF_SERVICE_ACCOUNT])
    return Kfp(
        host=host,
        version=version,
        address=address,
        http_port=ports["kfp-http"],
        rpc_port=ports["kfp-rpc"],
        s3_port=ports["s3"],
        s3_access_key=S3_ACCESS_KEY,
        s3_secret_key=S3_SECRET_KEY,
    )


# moto accepts any credentials; these are what the API server and the pods' Secret carry.
S3_ACCESS_KEY = "kfchaos"
S3_SECRET_KEY = "kfchaos-local"


class Images(Protocol):
    kfp_driver: str
    kfp_launcher: str


# --- MariaDB ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Database:
    port: int
    user: str
    password: str


def _mariadb_socket(state: Path) -> Path:
    """MariaDB listens on a unix socket too, whether used or not: at a short path (shortpaths), not in the state."""
    folder = shortpaths.socket_dir(state)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder / "mariadb.sock"


def _start_mariadb(state: Path, root: Path, port: int, wait: Wait) -> _Database:
    server, install = mariadbd()
    data = root / "mariadb"
    as_root = ["--user=root"] if os.geteuid() == 0 else []  # mariadbd refuses root unless told
    done = _run(
        [
            install,
            "--no-defaults",
            f"--datadir={data}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *as_root,
        ]
    )
    if done:
        raise KfpError(f"mariadb-install-db failed:\n{done}")
    # A user for KFP over TCP from 127.0.0.1 with a fresh password; --init-file runs one statement per line.
    password = secrets.token_hex(16)
    init = root / "mariadb-init.sql"
    init.write_text(
        f"CREATE USER IF NOT EXISTS 'kfp'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
        "GRANT ALL PRIVILEGES ON *.* TO 'kfp'@'127.0.0.1';\n"
    )
    init.chmod(0o600)
    procs.start(
        state,
        "kfp-mariadb",
        [
            server,
            "--no-defaults",
            f"--datadir={data}",
            f"--socket={_mariadb_socket(state)}",
            f"--pid-file={root / 'mariadb.pid'}",
            "--bind-address=127.0.0.1",
            f"--port={port}",
            "--skip-name-resolve",
            f"--init-file={init}",
            "--innodb-buffer-pool-size=64M",
            "--skip-log-bin",
            *as_root,
        ],
    )
    wait("MariaDB", lambda: port_open(port), state, "kfp-mariadb")
    return _Database(port, "kfp", password)


def _run(argv: list[str]) -> str:
    """Run a short setup command; '' when it succeeded, else its output."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    return "" if done.returncode == 0 else (done.stdout + done.stderr)[-3000:]


# --- the object store ------------------------------------------------------------------------------------


def _start_objectstore(state: Path, address: str, port: int, wait: Wait) -> None:
    """moto's S3 server (PyPI `moto[server]`): the API server keeps each uploaded pipeline file there, and a run's
    launchers its artifacts (KFP's MinIO, minio-service.kubeflow:9000, points here: kfpexec.py)."""
    # Path-style buckets whatever the Host: moto reads "minio-service.kubeflow:9000" as bucket "minio-service" in
    # a virtual-hosted request otherwise (moto/s3/responses.py, subdomain_based_buckets); MinIO, which KFP's
    # manifests deploy and its clients address path-style, has no such rule.
    procs.start(
        state,
        "kfp-objectstore",
        [sys.executable, "-m", "moto.server", "-H", address, "-p", str(port)],
        env={"S3_IGNORE_SUBDOMAIN_BUCKETNAME": "true"},
    )
    wait("the object store (moto)", lambda: _http_ok(f"http://{address}:{port}/moto-api/"), state, "kfp-objectstore")


# --- CRDs and RBAC ---------------------------------------------------------------------------------------


def _install_crds_and_rbac(api: Api, bin_dir: Path, wait: Wait, state: Path) -> None:
    names = []
    for crd_file in sorted((bin_dir / "crds").glob("*.yaml")):
        for document in yaml.safe_load_all(crd_file.read_text()):
            if document and document.get("kind") == "CustomResourceDefinition":
                api.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", document)
                names.append(document["metadata"]["name"])
    wait("KFP's and Argo's CRDs to be established", lambda: _established(api, names), state, "kube-apiserver")
    bindings = {"ml-pipeline": API_SERVICE_ACCOUNT, "ml-pipeline-scheduledworkflow-role": SWF_SERVICE_ACCOUNT}
    for sa in (API_SERVICE_ACCOUNT, SWF_SERVICE_ACCOUNT):
        api.apply(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": NAMESPACE}},
        )
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}"
    for role_file in sorted((bin_dir / "rbac").glob("*.yaml")):
        role = yaml.safe_load(role_file.read_text())
        role["metadata"]["namespace"] = NAMESPACE  # kustomize sets it upstream
        api.apply(f"{rbac}/roles", role)
        name = role["metadata"]["name"]
        api.apply(
            f"{rbac}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": bindings[name], "namespace": NAMESPACE}],
            },
        )


def _established(api: Api, names: list[str]) -> bool:
    for name in names:
        crd = api.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = crd.get("status", {}).get("conditions", [])  # type: ignore[attr-defined]
        if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return False
    return True


def token(api: Api, service_account: str) -> str:
    answer = api.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{service_account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}},
    )
    return str(answer["status"]["token"])  # type: ignore[index]


# --- the KFP processes -----------------------------------------------------------------------------------


def in_cluster(
    root: Path, name: str, token: str, ca_cert: Path, argv: list[str], extra: dict[str, str] | None = None
) -> list[str]:
    """argv run in its own mount namespace where /run/secrets/... holds `token` and the cluster's CA, plus `extra`
    files (paths under /run → content), as a pod's projected volumes would."""
    files = root / f"{name}-run"
    shutil.rmtree(files, ignore_errors=True)
    sa_dir = files / SA_DIR.removeprefix("/run/")
    sa_dir.mkdir(parents=True)
    (sa_dir / "token").write_text(token)
    shutil.copy(ca_cert, sa_dir / "ca.crt")
    (sa_dir / "namespace").write_text(NAMESPACE)
    for path, content in (extra or {}).items():
        target = files / path.removeprefix("/run/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    for path in files.rglob("*"):
        path.chmod(0o700 if path.is_dir() else 0o600)
    files.chmod(0o700)
    if shutil.which("unshare") is None:
        raise KfpError("unshare (util-linux) is needed to give KFP's binaries their in-cluster credentials")
    if os.geteuid() != 0:
        # Mounting over /run in a new mount namespace needs CAP_SYS_ADMIN (the project's machines and CI run as
        # root). Not tried here: an unprivileged user namespace (unshare --user --map-root-user).
        raise KfpError("KFP's API server is started in its own mount namespace, which needs root here")
    script = 'set -e; mount -t tmpfs -o mode=0755 kfchaos-kfp /run; cp -a "$1"/. /run/; shift; exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", str(files), *argv]


def in_cluster_env(server: str) -> dict[str, str]:
    # rest.InClusterConfig reads the API server's address from these (client-go, rest/config.go).
    host, port = server.removeprefix("https://").rsplit(":", 1)
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}


def _start_apiserver(
    state: Path,
    root: Path,
    bin_dir: Path,
    server: str,
    ca_cert: Path,
    token: str,
    ports: dict[str, int],
    database: _Database,
    version: str,
    address: str,
    images: Images,
) -> str:
    # The settings of backend/src/apiserver/config/config.json (the file the image ships), with the database
    # and object store pointed at ours (client_manager.go reads DBConfig.MySQLConfig.{Host,Port,User,Password}
    # and ObjectStoreConfig.{Host,Port,Secure,AccessKey,SecretAccessKey}). TAG_NAME and COMMIT_SHA are what
    # /apis/v2beta1/healthz reports (backend/Dockerfile sets them from the release).
    config_dir = root / "config"
    config_dir.mkdir(exist_ok=True)
    config = {
        "DBConfig": {
            "MySQLConfig": {
                "Host": "127.0.0.1",
                "Port": str(database.port),
                "User": database.user,
                "Password": database.password,
                "DBName": "mlpipeline",
                "GroupConcatMaxLen": "4194304",
            },
            "ConMaxLifeTime": "120s",
        },
        "ObjectStoreConfig": {
            "Host": address,
            "Port": str(ports["s3"]),
            "Secure": False,
            "AccessKey": S3_ACCESS_KEY,
            "SecretAccessKey": S3_SECRET_KEY,
            "BucketName": "mlpipeline",
            "PipelinePath": "pipelines",
        },
        "DBDriverName": "mysql",
        "InitConnectionTimeout": "60s",
        "DEFAULTPIPELINERUNNERSERVICEACCOUNT": "pipeline-runner",
        "CacheEnabled": "true",
        "CRON_SCHEDULE_TIMEZONE": "UTC",
        "CACHE_IMAGE": "gcr.io/google-containers/busybox",
        "CACHE_NODE_RESTRICTIONS": "false",
        "TAG_NAME": _release(version),
        "COMMIT_SHA": version.rsplit("-", 1)[-1],
        "POD_NAMESPACE": NAMESPACE,
        # The visualization server's Service (main.go reads these at start; no test uses it, and nothing
        # listens there: a call to the VisualizationService fails, as it would with that server down).
        "ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_HOST": "127.0.0.1",
        "ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_PORT": str(ports["kfp-visualization"]),
    }
    (config_dir / "config.json").write_text(json.dumps(config, indent=2))
    (config_dir / "config.json").chmod(0o600)
    (config_dir / "sample_config.json").write_text("[]")
    home = root / "home"  # no ~/.kube/config: the API server must not pick up a developer's cluster
    home.mkdir(exist_ok=True)
    argv = [
        str(bin_dir / "apiserver"),
        f"--config={config_dir}",
        f"--sampleconfig={config_dir / 'sample_config.json'}",
        # main.go dials its own gRPC server at "localhost" + rpcPortFlag for the HTTP gateway, so the gRPC port
        # can only be given as ":port" (all interfaces); the HTTP port that clients use is bound to loopback.
        f"--rpcPortFlag=:{ports['kfp-rpc']}",
        f"--httpPortFlag={address}:{ports['kfp-http']}",
        "--logtostderr=true",
    ]
    procs.start(
        state,
        "kfp-apiserver",
        in_cluster(root, "apiserver", token, ca_cert, argv),
        env={
            **in_cluster_env(server),
            "HOME": str(home),
            "POD_NAMESPACE": NAMESPACE,
            # The images its Workflow compiler names for the driver and launcher
            # (backend/src/v2/compiler/argocompiler/container.go: V2_DRIVER_IMAGE, V2_LAUNCHER_IMAGE).
            "V2_DRIVER_IMAGE": images.kfp_driver,
            "V2_LAUNCHER_IMAGE": images.kfp_launcher,
        },
    )
    return f"http://{address}:{ports['kfp-http']}"


def _start_scheduledworkflow(state: Path, root: Path, bin_dir: Path, server: str, ca_cert: Path, token: str) -> None:
    # backend/src/crd/controller/scheduledworkflow/main.go: --kubeconfig for its own clients, in-cluster config
    # for the Argo client (common/util/execution_client.go); --namespace as the single-user manifests set it.
    kubeconfig = root / "scheduledworkflow.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}],
                "users": [{"name": SWF_SERVICE_ACCOUNT, "user": {"token": token}}],
                "contexts": [{"name": "swf", "context": {"cluster": "local", "user": SWF_SERVICE_ACCOUNT}}],
                "current-context": "swf",
            }
        )
    )
    kubeconfig.chmod(0o600)
    argv = [
        str(bin_dir / "scheduledworkflow"),
        f"--kubeconfig={kubeconfig}",
        f"--namespace={NAMESPACE}",
    ]
    procs.start(
        state,
        "kfp-scheduledworkflow",
        in_cluster(root, "scheduledworkflow", token, ca_cert, argv),
        env={**in_cluster_env(server), "CRON_SCHEDULE_TIMEZONE": "UTC"},
    )


# The release each pinned commit is (cluster/kfp-apiserver/go.mod says why these).
RELEASES = {"f328f0b588c3": "2.1.0", "fc3214d4b4d3": "2.14.3", "c5658f09ec38": "2.0.5"}


def _release(version: str) -> str:
    return RELEASES.get(version.rsplit("-", 1)[-1], version)
