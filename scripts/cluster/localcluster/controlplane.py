"""Start and stop the local cluster (docs/cluster.md): free ports, state in one directory.

etcd → kube-apiserver → kube-controller-manager, kube-scheduler, KWOK, Chaos Mesh's controller-manager,
kube-state-metrics → the real Prometheus scraping kube-state-metrics → the real node (node.py: containerd, the
kubelet, kube-proxy and CoreDNS) → KFP's API server and its execution path (kfp.py, kfpexec.py). Binaries come
from scripts/cluster/build.sh's cache, images from images.py's. Each component's flags are read from its upstream
source (cited where set).

The control plane listens on the host end of the node's link (node.NodeNet.host_ip), which is also reachable from
the host itself: the node, its pods and the tests on the host all dial the same address.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import (
    PROGRAMS,
    chaoscontroller,
    chaosdaemon,
    hostservices,
    images,
    kfp,
    kfpexec,
    node,
    procs,
    shortpaths,
    startup,
)
from .pki import CertificateAuthority, KeyPair, service_account_keys

ROOT = Path(__file__).resolve().parents[3]
BUILD = ROOT / "scripts" / "cluster" / "build.sh"
OUR_STAGES = ROOT / "scripts" / "cluster" / "stages"  # the project's own KWOK Stages (pod-oom-kill.yaml)
COMPONENTS = ("etcd", "kubernetes", "kwok", "chaos-mesh", "kube-state-metrics", "kfp-apiserver", "argo", "coredns")
# Stop order: the clients first, etcd last, so nothing logs a storm of connection errors on the way down.
STOP_ORDER = (
    "prometheus-pod-targets",
    *kfpexec.PROCESSES,
    *kfp.PROCESSES,
    *node.PROCESSES,
    "prometheus",
    "kube-state-metrics",
    "chaos-controller-manager",
    "kwok",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
)
RUNNER_NAMESPACE = "kubeflow"  # manifests/base/serviceaccount.yaml
PROMETHEUS_SERVICE_PORT = 9090  # Prometheus's own default port, as kube-prometheus's Service exposes it
RUNNER = "kfchaos-runner"
READY_TIMEOUT = float(os.environ.get("KFCHAOS_CLUSTER_READY_TIMEOUT", "90"))

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


class ClusterError(RuntimeError):
    pass


@dataclass(frozen=True)
class ClusterEnv:
    state: Path
    admin_kubeconfig: Path
    runner_kubeconfig: Path
    prometheus_url: str
    api_url: str
    kfp_host: str = ""  # KFP's API server (scripts/cluster/localcluster/kfp.py)
    node_name: str = ""  # the real node (node.py)

    @property
    def env_file(self) -> Path:
        return self.state / "env"


def default_state() -> Path:
    return Path(os.environ.get("KFCHAOS_CLUSTER_DIR", ROOT / ".cluster"))


def free_ports(*names: str) -> dict[str, int]:
    """Distinct free loopback ports: every probe socket stays bound until all are chosen, so no two names get
    the same port (a port can still be taken by another program before its component binds it)."""
    probes = []
    try:
        for _ in names:
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probes.append(probe)
            probe.bind(("127.0.0.1", 0))
        return {name: int(probe.getsockname()[1]) for name, probe in zip(names, probes, strict=True)}
    finally:
        for probe in probes:
            probe.close()


def build() -> dict[str, Path]:
    """Each component's binary directory (building what is not cached yet)."""
    done = subprocess.run(["bash", str(BUILD), *COMPONENTS], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ClusterError(f"building the control plane failed:\n{done.stderr.strip()[-4000:]}")
    dirs = [Path(line) for line in done.stdout.split()]
    return dict(zip(COMPONENTS, dirs, strict=True))


# --- kubeconfigs -----------------------------------------------------------------------------------------


def _kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str], name: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kfchaos-local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": "kfchaos-local", "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def _cert_user(pair: KeyPair) -> dict[str, str]:
    return {"client-certificate": str(pair.cert), "client-key": str(pair.key)}


# --- waiting ---------------------------------------------------------------------------------------------


def _wait(what: str, check: Callable[[], bool], state: Path, process: str | None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process is not None and not procs.alive(state, process):
            raise ClusterError(f"{process} exited while waiting for {what}:\n{procs.log_tail(state, process)}")
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError, ValueError):
            pass
        time.sleep(0.2)
    tail = procs.log_tail(state, process) if process else ""
    raise ClusterError(f"timed out after {READY_TIMEOUT:g}s waiting for {what}\n{tail}")


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=2, context=context) as response:
        return bool(response.status == 200)


def _tls_context(ca: Path, client: KeyPair | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


class Api:
    """The few admin calls cluster-up makes, over plain HTTPS with the admin certificate."""

    def __init__(self, server: str, context: ssl.SSLContext) -> None:
        self.server = server
        self.context = context

    def request(
        self, method: str, path: str, body: object | None = None, content_type: str = "application/json"
    ) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Content-Type", content_type)
        request.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise ClusterError(f"{method} {path}: HTTP {error.code}: {error.read()[:2000]!r}") from error

    def apply(self, path: str, body: dict[str, object], field_manager: str = "kfchaos-cluster-up") -> object:
        """Server-side apply (PATCH application/apply-patch+yaml; JSON is YAML)."""
        name = body["metadata"]["name"]  # type: ignore[index]
        return self.request(
            "PATCH",
            f"{path}/{name}?fieldManager={field_manager}&force=true",
            body,
            content_type="application/apply-patch+yaml",
        )


# --- the components --------------------------------------------------------------------------------------


def up(state: Path | None = None, bins: dict[str, Path] | None = None) -> ClusterEnv:
    state = (state or default_state()).resolve()
    existing = reuse(state)
    if existing is not None:
        return existing
    # Before any build: a machine that cannot run the node, or a state folder it cannot run from, is told at once.
    why_not = node.unavailable() or shortpaths.state_problem(state)
    if why_not:
        raise ClusterError(why_not)
    down(state)  # a stale or half-started one
    bins = bins or build()
    started = time.monotonic()
    if state.exists():
        shutil.rmtree(state)
    pki_dir = state / "pki"
    ca = CertificateAuthority(pki_dir)
    sa = service_account_keys(pki_dir)
    try:
        env = _start(state, bins, ca, sa)
    except BaseException as error:
        try:
            down(state)
        except ClusterError as also:
            error.add_note(str(also))
        raise
    (state / "up-seconds").write_text(f"{time.monotonic() - started:.2f}\n")
    return env


@dataclass
class Boot:
    """What the start-up steps hand on to each other (STEPS), filled in as they run."""

    state: Path
    bins: dict[str, Path]
    ca: CertificateAuthority
    sa: KeyPair
    net: node.NodeNet = field(init=False)
    ports: dict[str, int] = field(init=False)
    server: str = field(init=False)
    etcd_url: str = field(init=False)
    api: Api = field(init=False)
    kubeconfigs: Path = field(init=False)
    admin_kubeconfig: Path = field(init=False)
    runner_kubeconfig: Path = field(init=False)
    controller_env: dict[str, str] = field(init=False)
    prometheus_url: str = field(init=False)
    node_images: images.Images = field(init=False)
    backend: kfp.Kfp = field(init=False)
    env: ClusterEnv = field(init=False)

    def component_kubeconfig(self, name: str, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig with a client certificate of its own (CN the user, O the groups) for one component."""
        pair = self.ca.issue(name, user, groups)
        return _kubeconfig(self.kubeconfigs / f"{name}.kubeconfig", self.server, self.ca.cert, _cert_user(pair), name)


def _start(state: Path, bins: dict[str, Path], ca: CertificateAuthority, sa: KeyPair) -> ClusterEnv:
    why_not = node.unavailable()
    if why_not:
        raise ClusterError(why_not)
    boot = Boot(state, bins, ca, sa)
    startup.run(STEPS, boot, state, fail=ClusterError)
    return boot.env


def _network(boot: Boot) -> None:
    """The node's network first: the API server and the services pods reach bind its host end."""
    boot.net = node.make_network(boot.state)
    node.save_net(boot.state, boot.net)
    boot.ports = free_ports(
        "etcd",
        "etcd-peer",
        "apiserver",
        "webhook",
        "chaos-metrics",
        "ksm",
        "ksm-telemetry",
        "prometheus",
        "node-exporter",
    )
    boot.server = f"https://{boot.net.host_ip}:{boot.ports['apiserver']}"


def _etcd(boot: Boot) -> None:
    """etcd: flags as controller-runtime's envtest starts it (kubernetes-sigs/controller-runtime,
    pkg/internal/testing/controlplane/etcd.go); --unsafe-no-fsync because the data is thrown away."""
    boot.etcd_url = f"http://127.0.0.1:{boot.ports['etcd']}"
    peer_url = f"http://127.0.0.1:{boot.ports['etcd-peer']}"
    procs.start(
        boot.state,
        "etcd",
        [
            str(boot.bins["etcd"] / "etcd"),
            "--name=default",
            f"--data-dir={boot.state / 'etcd'}",
            f"--listen-client-urls={boot.etcd_url}",
            f"--advertise-client-urls={boot.etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ],
    )
    _wait("etcd /health", lambda: _http_ok(f"{boot.etcd_url}/health"), boot.state, "etcd")


def _apiserver(boot: Boot) -> None:
    """kube-apiserver (kubernetes/kubernetes, cmd/kube-apiserver/app/options and
    staging/src/k8s.io/apiserver/pkg/server/options: every flag below is defined there), then the admin's
    kubeconfig and the API client the later steps use."""
    state, ca, address = boot.state, boot.ca, boot.net.host_ip
    serving = ca.issue(
        "apiserver",
        "kube-apiserver",
        server_names=(
            "127.0.0.1",
            address,
            boot.net.api_service_ip,
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        client=False,
    )
    # The API server's identity towards kubelets: system:masters, as kubeadm's apiserver-kubelet-client
    # (kubernetes/kubernetes, cmd/kubeadm/app/phases/certs/certlist.go: KubeadmCertKubeletClient).
    kubelet_client = ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
    procs.start(
        state,
        "kube-apiserver",
        [
            str(boot.bins["kubernetes"] / "kube-apiserver"),
            f"--etcd-servers={boot.etcd_url}",
            f"--bind-address={address}",
            f"--advertise-address={address}",
            f"--secure-port={boot.ports['apiserver']}",
            f"--cert-dir={state / 'apiserver'}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={ca.cert}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={boot.server}",
            f"--service-account-key-file={boot.sa.cert}",
            f"--service-account-signing-key-file={boot.sa.key}",
            f"--service-cluster-ip-range={boot.net.service_cidr}",
            "--allow-privileged=true",
            # The `kubernetes` Service's endpoint is the advertised address (the default `lease` reconciler):
            # pods on the real node reach the API server through it, as in any cluster.
            # kubectl logs/exec and metrics go to the kubelet with this client certificate.
            f"--kubelet-client-certificate={kubelet_client.cert}",
            f"--kubelet-client-key={kubelet_client.key}",
            # The node's name resolves nowhere on the host: dial the kubelet at the address it reports.
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
        ],
    )
    admin = ca.issue("admin", "kfchaos-admin", ("system:masters",))
    admin_context = _tls_context(ca.cert, admin)
    _wait("kube-apiserver /readyz", lambda: _http_ok(f"{boot.server}/readyz", admin_context), state, "kube-apiserver")
    boot.api = Api(boot.server, admin_context)
    boot.kubeconfigs = state / "kubeconfigs"
    boot.kubeconfigs.mkdir()
    boot.admin_kubeconfig = _kubeconfig(
        boot.kubeconfigs / "admin.kubeconfig", boot.server, ca.cert, _cert_user(admin), "admin"
    )


def _controller_manager(boot: Boot) -> None:
    """kube-controller-manager as a real cluster runs it: its own identity (RBAC's bootstrap
    system:kube-controller-manager) and one ServiceAccount per controller (--use-service-account-credentials;
    kubernetes/kubernetes, cmd/kube-controller-manager/app/options/options.go). Only the controllers a
    Deployment's pods need (cmd/kube-controller-manager/names/controller_names.go)."""
    kcm = boot.component_kubeconfig("kube-controller-manager", "system:kube-controller-manager")
    procs.start(
        boot.state,
        "kube-controller-manager",
        [
            str(boot.bins["kubernetes"] / "kube-controller-manager"),
            f"--kubeconfig={kcm}",
            # node-lifecycle-controller lifts the node.kubernetes.io/not-ready taint the API server's
            # TaintNodesByCondition admission puts on every new Node, once KWOK reports it Ready.
            # daemonset-controller: a chaos-daemon DaemonSet's pods land only on nodes whose taints it tolerates
            # (tests/cluster/test_doctor_blockers.py).
            # The real node adds what its pods need: Services' EndpointSlices (endpointslice-controller; the
            # mirroring one for Endpoints made by hand), the kube-root-ca.crt ConfigMap every ServiceAccount token
            # volume projects (root-ca-certificate-publisher-controller), and pod garbage collection.
            "--controllers=deployment-controller,replicaset-controller,garbage-collector-controller,"
            "namespace-controller,serviceaccount-controller,node-lifecycle-controller,daemonset-controller,"
            "endpointslice-controller,endpointslice-mirroring-controller,endpoints-controller,"
            "root-ca-certificate-publisher-controller,pod-garbage-collector-controller",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--secure-port=0",  # staging/src/k8s.io/apiserver/pkg/server/options/serving.go: 0 = don't serve
            f"--root-ca-file={boot.ca.cert}",
            "--cluster-name=kfchaos-local",
        ],
    )


def _scheduler(boot: Boot) -> None:
    scheduler = boot.component_kubeconfig("kube-scheduler", "system:kube-scheduler")
    procs.start(
        boot.state,
        "kube-scheduler",
        [
            str(boot.bins["kubernetes"] / "kube-scheduler"),
            f"--kubeconfig={scheduler}",
            f"--authentication-kubeconfig={scheduler}",
            f"--authorization-kubeconfig={scheduler}",
            "--leader-elect=false",
            "--secure-port=0",  # cmd/kube-scheduler/app/options/options.go: serving only when BindPort != 0
        ],
    )


def _chaos_mesh_crds(boot: Boot) -> None:
    """Chaos Mesh's CRDs (the release the controller was built from: build.sh copies them next to it), and the
    namespaces of Chaos Mesh and of the runner."""
    for crd_file in sorted((boot.bins["chaos-mesh"] / "crds").glob("*.yaml")):
        for document in yaml.safe_load_all(crd_file.read_text()):
            if document:
                crd = chaoscontroller.align_with_api_module(document)
                boot.api.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    for namespace in (chaoscontroller.CHAOS_NAMESPACE, RUNNER_NAMESPACE):
        boot.api.apply("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})


def _chaos_controller(boot: Boot) -> None:
    """The controller-manager outside the cluster. Its settings are environment variables
    (chaos-mesh/chaos-mesh, pkg/config/controller.go, envconfig) set as helm/chaos-mesh/templates/
    controller-manager-deployment.yaml sets them; the kubeconfig comes from controller-runtime's
    ctrl.GetConfigOrDie (cmd/chaos-controller-manager/provider/controller.go), which reads $KUBECONFIG.
    Its webhook server listens on WEBHOOK_HOST:WEBHOOK_PORT with tls.crt/tls.key from CERTS_DIR
    (controller-runtime's webhook.Options defaults for the file names)."""
    ca = boot.ca
    webhook_certs = boot.state / "chaos-mesh-certs"
    webhook_certs.mkdir()
    webhook_pair = ca.issue("chaos-mesh-webhook", "chaos-mesh-webhook", server_names=("127.0.0.1",), client=False)
    shutil.copy(webhook_pair.cert, webhook_certs / "tls.crt")
    shutil.copy(webhook_pair.key, webhook_certs / "tls.key")
    chaos_kubeconfig = boot.component_kubeconfig(
        "chaos-controller-manager", "chaos-controller-manager", ("system:masters",)
    )
    boot.controller_env = {
        "KUBECONFIG": str(chaos_kubeconfig),
        "NAMESPACE": chaoscontroller.CHAOS_NAMESPACE,
        "TEMPLATE_NAMESPACE": chaoscontroller.CHAOS_NAMESPACE,
        "TARGET_NAMESPACE": "",
        "CLUSTER_SCOPED": "true",
        "WEBHOOK_HOST": "127.0.0.1",
        "WEBHOOK_PORT": str(boot.ports["webhook"]),
        "CERTS_DIR": str(webhook_certs),
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(boot.ports["chaos-metrics"]),
        "ENABLE_LEADER_ELECTION": "false",
        "SECURITY_MODE": "true",  # values.yaml dashboard.securityMode: validate-auth checks the requester
        # No chaosd here: with its default (true) the manager would read mTLS files that do not exist.
        "CHAOSD_SECURITY_MODE": "false",
        "ENABLED_CONTROLLERS": "*",
        "ENABLED_WEBHOOKS": "*",
        "TEMPLATE_LABELS": "app.kubernetes.io/component:template",
        "CONFIGMAP_LABELS": "app.kubernetes.io/component:webhook",
        "TZ": "UTC",
        # mTLS towards chaos-daemon on the real node (chaosdaemon.py), as the chart's mtls.enabled sets it.
        **chaosdaemon.client_certificates(ca),
    }
    controller = [str(boot.bins["chaos-mesh"] / "chaos-controller-manager")]
    procs.start(boot.state, "chaos-controller-manager", controller, boot.controller_env)
    # The Deployment object a Helm install has (what `kfchaos doctor` reads for the release): its pods are run by
    # KWOK and do nothing; the controller that serves the webhooks and reconciles is the process above.
    deployment = chaoscontroller.controller_deployment(boot.controller_env)
    boot.api.apply(f"/apis/apps/v1/namespaces/{chaoscontroller.CHAOS_NAMESPACE}/deployments", deployment)


def _kwok(boot: Boot) -> None:
    """KWOK: fake Nodes (those annotated kwok.x-k8s.io/node=fake) and the Pod lifecycle through the Stages in
    its --config files (sigs.k8s.io/kwok, pkg/kwok/cmd/root.go: "no stages found" without any). The default
    stages are the ones kwokctl writes (pkg/kwokctl/runtime/cluster.go: node-initialize, the lease heartbeat,
    pod-ready, pod-complete, pod-delete), copied from the module by build.sh, and the project's own (OUR_STAGES:
    pod-oom-kill.yaml, OOM kills as the kubelet reports them, for tests/cluster/test_oom_real.py)."""
    kwok_kubeconfig = boot.component_kubeconfig("kwok", "kwok-controller", ("system:masters",))
    stage_files = sorted((boot.bins["kwok"] / "stages").glob("*.yaml")) + sorted(OUR_STAGES.glob("*.yaml"))
    procs.start(
        boot.state,
        "kwok",
        [
            str(boot.bins["kwok"] / "kwok"),
            f"--kubeconfig={kwok_kubeconfig}",
            *[f"--config={path}" for path in stage_files],
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            "--cidr=10.244.0.1/16",
            "--node-ip=10.0.1.1",
            "--node-lease-duration-seconds=40",
        ],
    )


def _kube_state_metrics(boot: Boot) -> None:
    """kube-state-metrics (k8s.io/kube-state-metrics/v2, pkg/options/options.go for the flags)."""
    ksm_kubeconfig = boot.component_kubeconfig("kube-state-metrics", "kube-state-metrics", ("system:masters",))
    procs.start(
        boot.state,
        "kube-state-metrics",
        [
            str(boot.bins["kube-state-metrics"] / "kube-state-metrics"),
            f"--kubeconfig={ksm_kubeconfig}",
            "--host=127.0.0.1",
            f"--port={boot.ports['ksm']}",
            "--telemetry-host=127.0.0.1",
            f"--telemetry-port={boot.ports['ksm-telemetry']}",
            "--resources=pods,nodes,deployments,replicasets,namespaces",
        ],
    )


def _prometheus(boot: Boot) -> None:
    prometheus_kubeconfig = boot.component_kubeconfig("prometheus", "prometheus", ("system:masters",))
    node_exporter = _start_node_exporter(boot.state, boot.ports["node-exporter"])
    boot.prometheus_url = _start_prometheus(
        boot.state,
        boot.net.host_ip,
        boot.ports["prometheus"],
        Targets(f"127.0.0.1:{boot.ports['ksm']}", node_exporter, boot.net.node_ip),
        prometheus_kubeconfig,
        boot.ca,
    )


def _start_node_exporter(state: Path, port: int) -> str:
    """node-exporter on the host, which is the real node: its kernel's OOM kill counter (node_vmstat_oom_kill, the
    vmstat collector; prometheus/node_exporter collector/vmstat_linux.go), which counts kills the OOMKilled reason
    misses (a global OOM, a lost TaskOOM event: kfchaos.metrics.nodeoom). Only that collector: the others read the
    host's disks, network and the like, which nothing here judges."""
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        raise ClusterError(
            "node-exporter is not installed: run scripts/cluster/ensure-node-packages.sh "
            "(Debian package `prometheus-node-exporter`)"
        )
    address = f"127.0.0.1:{port}"
    procs.start(
        state,
        "node-exporter",
        [binary, f"--web.listen-address={address}", "--collector.disable-defaults", "--collector.vmstat"],
    )
    _wait("node-exporter /metrics", lambda: _http_ok(f"http://{address}/metrics"), state, "node-exporter")
    return address


@dataclass(frozen=True)
class Targets:
    """What the local Prometheus scrapes besides the pods: kube-state-metrics, node-exporter, the node's kubelet."""

    ksm: str
    node_exporter: str
    node_ip: str


def _registrations(boot: Boot) -> None:
    """Chaos Mesh's webhooks, the fake nodes, and the runner's ServiceAccount token."""
    chaoscontroller.register_webhooks(boot.api, boot.ca.cert, boot.ports["webhook"])
    _make_nodes(boot.api)
    boot.runner_kubeconfig = _runner_identity(boot.api, boot.kubeconfigs, boot.server, boot.ca.cert)


def _ready(boot: Boot) -> None:
    """Ready means: every Chaos Mesh CRD established, the webhook server answering TLS, the nodes Ready,
    the serviceaccount controller working (the `default` ServiceAccount exists), kube-state-metrics serving."""
    state, api = boot.state, boot.api
    webhook_context = _tls_context(boot.ca.cert)
    _wait(
        "Chaos Mesh's webhook server",
        lambda: _tls_accepts(boot.ports["webhook"], webhook_context),
        state,
        "chaos-controller-manager",
    )
    established = chaoscontroller.crds_established
    _wait("the Chaos Mesh CRDs to be established", lambda: established(api), state, "kube-apiserver")
    _wait("the KWOK nodes to be Ready", lambda: _nodes_ready(api), state, "kwok")
    _wait(
        "the default ServiceAccount (kube-controller-manager)",
        lambda: bool(api.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")),
        state,
        "kube-controller-manager",
    )
    _wait(
        "kube-state-metrics /healthz",
        lambda: _http_ok(f"http://127.0.0.1:{boot.ports['ksm']}/healthz"),
        state,
        "kube-state-metrics",
    )


def _real_node(boot: Boot) -> None:
    """The node's images (cached), then CoreDNS, containerd, the kubelet and kube-proxy (_start_node); and
    Prometheus as kube-prometheus names it for the pods (an experiment's spec.baseline.capture.prometheus:
    http://prometheus.monitoring.svc:9090), a Service of the host process."""
    boot.node_images = _start_node(
        boot.state, boot.bins, boot.ca, boot.api, boot.net, boot.server, boot.component_kubeconfig
    )
    boot.api.apply("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}})
    prometheus_port = int(boot.prometheus_url.rsplit(":", 1)[1])
    hostservices.external_service(
        boot.api,
        "monitoring",
        "prometheus",
        boot.net.host_ip,
        [hostservices.Port("web", PROMETHEUS_SERVICE_PORT, prometheus_port)],
    )


def _kfp(boot: Boot) -> None:
    """KFP's API server (kfp.py), then its execution path: Argo, the driver and launcher, ML Metadata (kfpexec.py)."""
    try:
        boot.backend = kfp.start(
            boot.state,
            boot.api,
            boot.bins["kfp-apiserver"],
            boot.server,
            boot.ca.cert,
            _wait,
            boot.net.host_ip,
            boot.node_images,
        )
        kfpexec.start(
            boot.state,
            boot.api,
            boot.bins,
            boot.server,
            boot.ca.cert,
            boot.admin_kubeconfig,
            boot.net,
            boot.node_images,
            boot.backend,
            _wait,
        )
    except (kfp.KfpError, kfpexec.KfpExecError) as error:
        raise ClusterError(str(error)) from error


def _env_file(boot: Boot) -> None:
    """<state>/env: what `source .cluster/env` gives a shell and what the tests read back (read_env)."""
    backend, net, node_images = boot.backend, boot.net, boot.node_images
    boot.env = ClusterEnv(
        boot.state,
        boot.admin_kubeconfig,
        boot.runner_kubeconfig,
        boot.prometheus_url,
        boot.server,
        backend.host,
        node.NODE_NAME,
    )
    image_lines = "".join(
        f"export KFCHAOS_NODE_IMAGE_{k.upper().replace('-', '_')}={v}\n" for k, v in node_images.all().items()
    )
    boot.env.env_file.write_text(
        f"export KUBECONFIG={boot.admin_kubeconfig}\n"
        f"export KFCHAOS_RUNNER_KUBECONFIG={boot.runner_kubeconfig}\n"
        f"export PROMETHEUS_URL={boot.prometheus_url}\n"
        f"export KFCHAOS_CLUSTER_API={boot.server}\n"
        f"export KFCHAOS_CLUSTER_WEBHOOK=https://127.0.0.1:{boot.ports['webhook']}\n"
        f"export KUBE_STATE_METRICS_URL=http://127.0.0.1:{boot.ports['ksm']}\n"
        f"export KFP_HOST={backend.host}\n"
        f"export KFCHAOS_CLUSTER_PROMETHEUS=http://prometheus.monitoring.svc:{PROMETHEUS_SERVICE_PORT}\n"
        f"export KFCHAOS_NODE={node.NODE_NAME}\n"
        f"export KFCHAOS_NODE_IP={net.node_ip}\n"
        f"export KFCHAOS_NODE_NETNS={net.netns}\n"
        # Components run on the image built from this working tree (images.py); compile names it.
        f"export KFCHAOS_IMAGE={node_images.component}\n"
        # Where `kfchaos run --wait` reads a verdict the 2.1.0 API cannot serve (kfchaos.kfp.objectstore).
        f"export KFCHAOS_ARTIFACT_STORE=http://{backend.address}:{backend.s3_port}\n"
        f"export KFCHAOS_ARTIFACT_ACCESS_KEY={backend.s3_access_key}\n"
        f"export KFCHAOS_ARTIFACT_SECRET_KEY={backend.s3_secret_key}\n"
        f"{image_lines}"
    )


# The start, in order: each step named, timed into <state>/up-steps.tsv, and named in the error of one that fails.
STEPS: tuple[startup.Step[Boot], ...] = (
    startup.Step("the node's network", _network),
    startup.Step("etcd", _etcd),
    startup.Step("kube-apiserver", _apiserver),
    startup.Step("kube-controller-manager", _controller_manager),
    startup.Step("kube-scheduler", _scheduler),
    startup.Step("Chaos Mesh's CRDs and namespaces", _chaos_mesh_crds),
    startup.Step("chaos-controller-manager", _chaos_controller),
    startup.Step("KWOK", _kwok),
    startup.Step("kube-state-metrics", _kube_state_metrics),
    startup.Step("Prometheus", _prometheus),
    startup.Step("webhooks, fake nodes, the runner's identity", _registrations),
    startup.Step("the control plane ready", _ready),
    startup.Step("the real node", _real_node),
    startup.Step("KFP's API server and execution path", _kfp),
    startup.Step("the env file", _env_file),
)


def build_all() -> images.Images:
    """Every binary and every image the cluster starts from, built where not cached yet (nothing is started):
    `make test` builds them while the tests that need no cluster run. The images are the real node's: where it
    cannot run, `up` says why, and nothing is built for it."""
    why_not = node.unavailable()
    if why_not:
        raise ClusterError(why_not)
    try:
        return images.build(ROOT, ROOT / ".venv" / "bin" / "pip", build())
    except images.ImageError as error:
        raise ClusterError(f"building the node's images failed: {error}") from error


def refresh_images(state: Path | None = None) -> images.Images:
    """Build the node's images again from the working tree (a changed kfchaos gives a new component tag) and
    import them into the running node's containerd; `<state>/env` then names the new ones."""
    state = (state or default_state()).resolve()
    if reuse(state) is None:
        raise ClusterError(f"no running cluster at {state}: make cluster-up")
    try:
        node_images = images.build(ROOT, ROOT / ".venv" / "bin" / "pip", build())
        node.ctr(state, "images", "import", "--all-platforms", str(node_images.archive))
    except (images.ImageError, node.NodeError, subprocess.TimeoutExpired) as error:
        raise ClusterError(f"refreshing the node's images failed: {error}") from error
    lines = [
        line
        for line in (state / "env").read_text().splitlines()
        if not line.startswith(("export KFCHAOS_IMAGE=", "export KFCHAOS_NODE_IMAGE_"))
    ]
    lines.append(f"export KFCHAOS_IMAGE={node_images.component}")
    lines += [f"export KFCHAOS_NODE_IMAGE_{k.upper().replace('-', '_')}={v}" for k, v in node_images.all().items()]
    (state / "env").write_text("\n".join(lines) + "\n")
    return node_images


def _start_node(
    state: Path,
    bins: dict[str, Path],
    ca: CertificateAuthority,
    api: Api,
    net: node.NodeNet,
    server: str,
    component_kubeconfig: Callable[..., Path],
) -> images.Images:
    """CoreDNS, containerd, the kubelet and kube-proxy on the node's network namespace; the images imported."""
    k8s = bins["kubernetes"]
    try:
        node_images = images.build(ROOT, ROOT / ".venv" / "bin" / "pip", bins)
    except images.ImageError as error:
        raise ClusterError(f"building the node's images failed: {error}") from error
    dns_kubeconfig = component_kubeconfig("coredns", "coredns", ("system:masters",))
    node.start_coredns(state, net, bins["coredns"] / "coredns", dns_kubeconfig)
    hostservices.external_service(
        api,
        "kube-system",
        "kube-dns",
        net.host_ip,
        [hostservices.Port("dns", 53, 53, "UDP"), hostservices.Port("dns-tcp", 53, 53, "TCP")],
        cluster_ip=net.dns_service_ip,
    )
    node.make_cgroup_root(net)
    node.start_containerd(state, net, node_images.pause)
    _wait("containerd", lambda: node.containerd_socket(state).is_socket(), state, "containerd")
    try:
        node.ctr(state, "images", "import", "--all-platforms", str(node_images.archive))
    except (node.NodeError, subprocess.TimeoutExpired) as error:
        raise ClusterError(f"importing the node's images into containerd failed: {error}") from error
    # The kubelet's identity: system:node:<name> in system:nodes, what the Node authorizer and NodeRestriction
    # expect (kubernetes/kubernetes, plugin/pkg/auth/authorizer/node/node_authorizer.go).
    kubelet_kubeconfig = component_kubeconfig("kubelet", f"system:node:{node.NODE_NAME}", ("system:nodes",))
    serving = ca.issue("kubelet-serving", node.NODE_NAME, server_names=(net.node_ip, node.NODE_NAME), client=False)
    config = node.kubelet_config(state, net, ca.cert, serving.cert, serving.key)
    node.start_kubelet(state, net, k8s / "kubelet", kubelet_kubeconfig, config)
    proxy_kubeconfig = component_kubeconfig("kube-proxy", "system:kube-proxy")
    node.start_kube_proxy(state, net, k8s / "kube-proxy", proxy_kubeconfig)
    _wait("the real node to be Ready", lambda: node.node_ready(api.request), state, "kubelet")
    chaosdaemon.deploy(api, ca, node_images.chaos_daemon, state)
    return node_images


def _tls_accepts(port: int, context: ssl.SSLContext) -> bool:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        return True


def _start_prometheus(
    state: Path, address: str, port: int, targets: Targets, kubeconfig: Path, ca: CertificateAuthority
) -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        raise ClusterError(
            "prometheus is not installed: run scripts/ensure-prometheus.sh (Debian package `prometheus`)"
        )
    directory = state / "prometheus"
    directory.mkdir()
    config = directory / "prometheus.yml"
    kubelet_client = ca.issue("prometheus-kubelet", "prometheus", ("system:masters",))
    pod_targets = directory / "pods.json"
    pod_targets.write_text("[]")
    config.write_text(
        yaml.safe_dump(_prometheus_config(targets, pod_targets, ca.cert, kubelet_client), sort_keys=False)
    )
    procs.start(
        state,
        "prometheus-pod-targets",
        [
            sys.executable,
            str(PROGRAMS / "podtargets.py"),
            f"--kubeconfig={kubeconfig}",
            f"--node={node.NODE_NAME}",
            f"--out={pod_targets}",
        ],
    )
    url = f"http://{address}:{port}"
    procs.start(
        state,
        "prometheus",
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address={address}:{port}",
            "--web.enable-lifecycle",
        ],
    )
    _wait("prometheus /-/ready", lambda: _http_ok(f"{url}/-/ready"), state, "prometheus")
    return url


def _prometheus_config(targets: Targets, pod_targets: Path, ca: Path, client: KeyPair) -> dict[str, object]:
    """kube-state-metrics; the real node's kubelet (its own series, /metrics, and cAdvisor's container series,
    /metrics/cadvisor, over TLS with a client certificate); the node's node-exporter, labelled with its node as a
    scrape that sets `node` is (kfchaos.metrics.nodeoom); and the node's pods that ask to be scraped
    (prometheus.io/* annotations), from the file scripts/cluster/programs/podtargets.py keeps (Debian's Prometheus
    has no Kubernetes service discovery: that file says more). The jobs are those of Prometheus's example
    configuration for Kubernetes (prometheus/prometheus, documentation/examples/prometheus-kubernetes.yml:
    kubernetes-nodes, kubernetes-nodes-cadvisor, kubernetes-pods)."""
    tls = {"ca_file": str(ca), "cert_file": str(client.cert), "key_file": str(client.key)}
    kubelet = [{"targets": [f"{targets.node_ip}:10250"], "labels": {"node": node.NODE_NAME}}]
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "kube-state-metrics", "static_configs": [{"targets": [targets.ksm]}]},
            {
                "job_name": "node-exporter",
                "scrape_interval": "5s",
                "static_configs": [{"targets": [targets.node_exporter], "labels": {"node": node.NODE_NAME}}],
            },
            {
                "job_name": "kubernetes-nodes",
                "scrape_interval": "5s",
                "scheme": "https",
                "tls_config": tls,
                "static_configs": kubelet,
            },
            {
                "job_name": "kubernetes-nodes-cadvisor",
                "scrape_interval": "5s",
                "scheme": "https",
                "metrics_path": "/metrics/cadvisor",
                "tls_config": tls,
                "static_configs": kubelet,
            },
            {
                "job_name": "kubernetes-pods",
                "file_sd_configs": [{"files": [str(pod_targets)], "refresh_interval": "2s"}],
            },
        ],
    }


def node_manifest(name: str, *, gpus: int = 0) -> dict[str, object]:
    """A KWOK-managed Node; a GPU node carries nvidia.com/gpu capacity and the taint GPU pools use."""
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    labels = {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    spec: dict[str, object] = {}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
        labels["nvidia.com/gpu.present"] = "true"
        spec["taints"] = [GPU_TAINT]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {KWOK_NODE_ANNOTATION: "fake"}},
        "spec": spec,
        "status": {"capacity": capacity, "allocatable": capacity},
    }


NODES = (("kwok-node-0", 0), ("kwok-node-1", 0), ("kwok-gpu-0", 8))


def _make_nodes(api: Api) -> None:
    for name, gpus in NODES:
        manifest = node_manifest(name, gpus=gpus)
        status = manifest.pop("status")
        api.apply("/api/v1/nodes", manifest)
        # Capacity is status: the status subresource (kubectl would do the same with --subresource=status).
        api.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status?fieldManager=kfchaos-cluster-up&force=true",
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status},
            content_type="application/apply-patch+yaml",
        )


def _nodes_ready(api: Api) -> bool:
    nodes = api.request("GET", "/api/v1/nodes")
    items = nodes["items"]  # type: ignore[index]
    ready = {
        item["metadata"]["name"]
        for item in items
        if any(c["type"] == "Ready" and c["status"] == "True" for c in item.get("status", {}).get("conditions", []))
    }
    untainted = {
        item["metadata"]["name"]
        for item in items
        if not any(t["key"] == "node.kubernetes.io/not-ready" for t in item.get("spec", {}).get("taints", []))
    }
    return ready & untainted >= {name for name, _ in NODES}


def _runner_identity(api: Api, kubeconfigs: Path, server: str, ca: Path) -> Path:
    """kfchaos-runner's kubeconfig: a token from the TokenRequest API for the real ServiceAccount."""
    api.apply(
        f"/api/v1/namespaces/{RUNNER_NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": RUNNER, "namespace": RUNNER_NAMESPACE}},
    )
    answer = api.request(
        "POST",
        f"/api/v1/namespaces/{RUNNER_NAMESPACE}/serviceaccounts/{RUNNER}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}},
    )
    token = answer["status"]["token"]  # type: ignore[index]
    token_file = kubeconfigs / "runner.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    return _kubeconfig(kubeconfigs / "runner.kubeconfig", server, ca, {"tokenFile": str(token_file)}, RUNNER)


# --- reuse and stop --------------------------------------------------------------------------------------


def read_env(state: Path) -> ClusterEnv | None:
    env_file = state / "env"
    if not env_file.is_file():
        return None
    values = {}
    for line in env_file.read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        values[key] = value
    try:
        return ClusterEnv(
            state,
            Path(values["KUBECONFIG"]),
            Path(values["KFCHAOS_RUNNER_KUBECONFIG"]),
            values["PROMETHEUS_URL"],
            values["KFCHAOS_CLUSTER_API"],
            values.get("KFP_HOST", ""),
        )
    except KeyError:
        return None


def reuse(state: Path) -> ClusterEnv | None:
    """The running cluster named by `<state>/env`, if every process is alive and the API server ready."""
    env = read_env(state)
    if env is None or not all(procs.alive(state, name) for name in STOP_ORDER):
        return None
    admin = KeyPair(state / "pki" / "admin.crt", state / "pki" / "admin.key")
    try:
        if _http_ok(f"{env.api_url}/readyz", _tls_context(state / "pki" / "ca.crt", admin)):
            return env
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return None
    return None


def down(state: Path | None = None) -> list[str]:
    state = (state or default_state()).resolve()
    stopped = procs.stop_all(state, STOP_ORDER)
    # The node's containers, shims, mounts, network namespace and cgroups outlive its processes: sweep them.
    node.teardown(state)
    (state / "env").unlink(missing_ok=True)
    left = procs.leftovers(state)
    if left:
        raise ClusterError(f"processes still running after cluster-down: {procs.describe(left)}")
    remains = node.leftovers(state)
    if remains:
        raise ClusterError(f"the node left these behind after cluster-down: {'; '.join(remains)}")
    return stopped
