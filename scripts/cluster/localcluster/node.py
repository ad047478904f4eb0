"""The real node of the local cluster (docs/cluster.md, "The real node").

containerd, runc and the CNI plugins are Debian's packages (scripts/cluster/ensure-node-packages.sh); the kubelet
and kube-proxy are built from the same k8s.io/kubernetes module as the API server. The node lives in a network
namespace of its own, persisted as a bind mount at `<state>/node/netns`: its bridge, the pods' veths, kube-proxy's
iptables chains and conntrack table are all inside it, so nothing of the node touches the host's network but one
veth pair. The host end of that pair carries the control plane's address as the node and its pods see it
(`NodeNet.host_ip`): the API server, CoreDNS, Prometheus and KFP's services bind it.

    host netns                                   node netns (<state>/node/netns)
    kfc<i>h 10.252.<i>.1/30  <---- veth ---->    kfc<i>n 10.252.<i>.2/30   (the Node's InternalIP)
    route 10.253.<i>.0/24 via 10.252.<i>.2        kfcbr<i> 10.253.<i>.1/24  (CNI bridge, the pods' gateway)
    route 10.254.<i>.0/24 via 10.252.<i>.2        kube-proxy's chains for the Services (10.254.<i>.0/24)
                                                  default via 10.252.<i>.1

Each cluster picks its own <i> (from its state directory, skipping one in use), so two clusters on one machine
never share an address, a bridge or a chain. Everything the node creates outside the network namespace is named
after the state directory and swept by `teardown`: the cgroup subtree `/kfchaos-<i>` under each v1 controller
(the kubelet's cgroupRoot), the mounts under `<state>/node`, and the container log links the kubelet keeps in
/var/log/containers.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import procs, shortpaths

NODE_NAME = "kfchaos-node-0"
# The real node is tainted so that the cluster suite's Deployments, meant for the KWOK nodes, never land on it: what
# should run there says so with a toleration (the e2e target, chaos-daemon, a run's pods via Argo's workflowDefaults).
NODE_TAINT_KEY = "kfchaos.io/real-node"
NODE_LABEL = "kfchaos.io/real-node"
CLUSTER_DOMAIN = "cluster.local"
CGROUP_ROOT = "/sys/fs/cgroup"
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
CONTAINER_LOG_LINKS = Path(
    "/var/log/containers"
)  # kubelet's fixed path (pkg/kubelet/kuberuntime/kuberuntime_manager.go)
# Node processes, in the order they are stopped (the kubelet first, so it restarts nothing while the rest go).
PROCESSES = ("kubelet", "kube-proxy", "containerd", "coredns")
NEEDS = ("containerd", "runc", "ctr", "nsenter", "unshare", "ip", "iptables", "conntrack")


class NodeError(RuntimeError):
    pass


@dataclass(frozen=True)
class NodeNet:
    index: int
    netns: Path

    @property
    def host_ip(self) -> str:
        return f"10.252.{self.index}.1"

    @property
    def node_ip(self) -> str:
        return f"10.252.{self.index}.2"

    @property
    def pod_cidr(self) -> str:
        return f"10.253.{self.index}.0/24"

    @property
    def pod_gateway(self) -> str:
        return f"10.253.{self.index}.1"

    @property
    def service_cidr(self) -> str:
        return f"10.254.{self.index}.0/24"

    @property
    def api_service_ip(self) -> str:
        """The `kubernetes` Service's address: the first of the range (the API server's own rule)."""
        return f"10.254.{self.index}.1"

    @property
    def dns_service_ip(self) -> str:
        """kube-dns's address: the tenth of the range, as kubeadm picks it."""
        return f"10.254.{self.index}.10"

    @property
    def host_veth(self) -> str:
        return f"kfc{self.index}h"

    @property
    def node_veth(self) -> str:
        return f"kfc{self.index}n"

    @property
    def bridge(self) -> str:
        return f"kfcbr{self.index}"

    @property
    def cgroup_parent(self) -> str:
        return f"/kfchaos-{self.index}"


def unavailable() -> str | None:
    """Why this machine cannot run the real node, or None."""
    if os.geteuid() != 0:
        return (
            "the real node needs root (containerd, the kubelet and a network namespace); run it as root, "
            "or in a VM or container you are root in"
        )
    missing = [tool for tool in NEEDS if not _which(tool)]
    if missing:
        return f"missing {', '.join(missing)}: run scripts/cluster/ensure-node-packages.sh"
    if not Path(CGROUP_ROOT, "memory", "memory.limit_in_bytes").exists():
        return "no cgroup v1 memory controller at /sys/fs/cgroup/memory (this node runs on cgroup v1)"
    return None


def _which(tool: str) -> bool:
    return any(Path(d, tool).is_file() for d in [*os.environ.get("PATH", "/usr/bin").split(":"), "/usr/sbin"])


def _run(*argv: str, netns: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    full = ["nsenter", f"--net={netns}", "--", *argv] if netns else list(argv)
    done = subprocess.run(full, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NodeError(f"{' '.join(full)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def _index_in_use(index: int) -> bool:
    addresses = _run("ip", "-o", "-4", "addr", "show").stdout + _run("ip", "-o", "-4", "route", "show").stdout
    return any(f"10.{block}.{index}." in addresses for block in (252, 253, 254))


def pick_net(state: Path) -> NodeNet:
    start = int(hashlib.sha256(str(state.resolve()).encode()).hexdigest(), 16) % 250
    for step in range(250):
        index = (start + step) % 250
        if not _index_in_use(index):
            return NodeNet(index, state / "node" / "netns")
    raise NodeError("no free 10.252.<i>.0/30 left for the node's link (250 clusters on this machine?)")


def write_sysctl(net: NodeNet, key: str, value: str) -> None:
    """A network sysctl of the node's namespace (/proc/sys/net is per namespace: write it from inside)."""
    path = "/proc/sys/" + key.replace(".", "/")
    _run("sh", "-c", f"echo {value} > {path}", netns=net.netns)


def make_network(state: Path) -> NodeNet:
    """The node's network namespace and its link to the host (before the API server, which binds host_ip)."""
    net = pick_net(state)
    net.netns.parent.mkdir(parents=True, exist_ok=True)
    net.netns.touch()
    # util-linux unshare(1): --net=FILE persists the new namespace with a bind mount on FILE.
    _run("unshare", f"--net={net.netns}", "true")
    # Made inside the namespace, with its peer put in ours (`netns PID`: the namespace of this process).
    _run(
        "ip",
        "link",
        "add",
        net.node_veth,
        "type",
        "veth",
        "peer",
        "name",
        net.host_veth,
        "netns",
        str(os.getpid()),
        netns=net.netns,
    )
    _run("ip", "addr", "add", f"{net.host_ip}/30", "dev", net.host_veth)
    _run("ip", "link", "set", net.host_veth, "up")
    for argv in (
        ("ip", "link", "set", "lo", "up"),
        ("ip", "addr", "add", f"{net.node_ip}/30", "dev", net.node_veth),
        ("ip", "link", "set", net.node_veth, "up"),
        ("ip", "route", "add", "default", "via", net.host_ip),
    ):
        _run(*argv, netns=net.netns)
    # The host reaches pods and, through kube-proxy in the node, Services (as `minikube tunnel` gives a host).
    _run("ip", "route", "add", net.pod_cidr, "via", net.node_ip)
    _run("ip", "route", "add", net.service_cidr, "via", net.node_ip)
    # The node routes between its pods and the host; br_netfilter makes pod-to-Service traffic that a DNAT sends
    # back onto the same bridge pass through iptables (kube-proxy's hairpin and reply NAT need it).
    write_sysctl(net, "net.ipv4.ip_forward", "1")
    write_sysctl(net, "net.bridge.bridge-nf-call-iptables", "1")
    return net


def saved_net(state: Path) -> NodeNet | None:
    try:
        data = json.loads((state / "node" / "net.json").read_text())
    except (OSError, ValueError):
        return None
    return NodeNet(int(data["index"]), Path(data["netns"]))


def save_net(state: Path, net: NodeNet) -> None:
    (state / "node" / "net.json").write_text(json.dumps({"index": net.index, "netns": str(net.netns)}))


# --- cgroups ---------------------------------------------------------------------------------------------


def _v1_controllers(types: tuple[str, ...] = ("cgroup",)) -> list[Path]:
    """Every cgroup hierarchy of `types` mounted under /sys/fs/cgroup: the v1 controllers the kubelet manages, and
    (with "cgroup2") the hybrid layout's unified mount, where runc also makes a group for each container."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        if fields[separator + 1] in types and fields[4].startswith(CGROUP_ROOT + "/"):
            found.append(Path(fields[4]))
    return sorted(set(found))


def make_cgroup_root(net: NodeNet) -> None:
    """The kubelet refuses a cgroupRoot that does not exist (pkg/kubelet/cm/container_manager_linux.go:
    "invalid configuration: cgroup-root %q doesn't exist"): make it under each v1 hierarchy. A new cpuset group
    starts with no CPUs and no memory nodes, so it copies its parent's (as runc's fs.CpusetGroup does)."""
    for controller in _v1_controllers():
        group = controller / net.cgroup_parent.lstrip("/")
        group.mkdir(exist_ok=True)
        if (controller / "cpuset.cpus").exists():
            for name in ("cpuset.cpus", "cpuset.mems"):
                (group / name).write_text((controller / name).read_text())


def _cgroup_dirs(net: NodeNet) -> list[Path]:
    """Every group under the node's cgroupRoot, deepest first."""
    dirs: list[Path] = []
    for controller in _v1_controllers(("cgroup", "cgroup2")):
        root = controller / net.cgroup_parent.lstrip("/")
        if root.is_dir():
            dirs.extend(Path(path) for path, _, _ in os.walk(root))
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def cgroup_pids(net: NodeNet) -> set[int]:
    pids: set[int] = set()
    for group in _cgroup_dirs(net):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (group / "cgroup.procs").read_text().split())
    return pids


# --- the processes ---------------------------------------------------------------------------------------


CAP_SYS_RESOURCE = 24  # <linux/capability.h>


def _has_capability(number: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> number & 1)
    return False


def containerd_config(state: Path, net: NodeNet, sandbox_image: str) -> Path:
    """containerd 1.6's config (version 2): every path under the state directory. Keys from containerd's
    docs/cri/config.md (release/1.6) and pkg/cri/config/config.go."""
    node = state / "node"
    config = node / "containerd.toml"
    cni_conf = node / "cni" / "net.d"
    cni_conf.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f"""version = 2
root = "{node / "containerd" / "root"}"
state = "{node / "containerd" / "state"}"
plugin_dir = ""
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{containerd_socket(state)}"

[ttrpc]
  address = "{socket_dir(state) / "containerd.sock.ttrpc"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{node / "containerd" / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # The pods' network namespaces are bind-mounted under the state directory, not /var/run/netns.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  # Where root lacks CAP_SYS_RESOURCE (some VMs and containers withhold it), runc cannot lower a container's
  # oom_score_adj below containerd's own (the kubelet asks -998 for a sandbox): then keep each at least
  # containerd's, the setting containerd has for that case (pkg/cri/config/config.go, RestrictOOMScoreAdj).
  restrict_oom_score_adj = {"false" if _has_capability(CAP_SYS_RESOURCE) else "true"}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = "{node / "runc"}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf}"
"""
    )
    # The bridge plugin makes the bridge and gives it the gateway address; host-local keeps its leases under
    # the state directory (containernetworking/plugins: plugins/main/bridge, plugins/ipam/host-local).
    conflist = {
        "cniVersion": "1.0.0",
        "name": "kfchaos",
        "plugins": [
            {
                "type": "bridge",
                "bridge": net.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": net.pod_cidr, "gateway": net.pod_gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    (cni_conf / "10-kfchaos.conflist").write_text(json.dumps(conflist, indent=2))
    return config


def socket_dir(state: Path) -> Path:
    """Where the node's containerd listens: a short path of its own per state folder (shortpaths)."""
    return shortpaths.socket_dir(state)


def containerd_socket(state: Path) -> Path:
    return socket_dir(state) / "containerd.sock"


def start_containerd(state: Path, net: NodeNet, sandbox_image: str) -> None:
    socket_dir(state).mkdir(parents=True, exist_ok=True, mode=0o700)
    config = containerd_config(state, net, sandbox_image)
    procs.start(state, "containerd", ["nsenter", f"--net={net.netns}", "--", "containerd", f"--config={config}"])


def ctr(state: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["ctr", f"--address={containerd_socket(state)}", "--namespace=k8s.io", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise NodeError(f"ctr {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done


def kubelet_config(state: Path, net: NodeNet, ca_cert: Path, serving_cert: Path, serving_key: Path) -> Path:
    """KubeletConfiguration v1beta1 (k8s.io/kubelet, config/v1beta1/types.go: every field below is defined there)."""
    node = state / "node"
    resolv = node / "resolv.conf"
    # The upstream resolver of pods with dnsPolicy Default (hostNetwork ones included): the cluster's CoreDNS.
    resolv.write_text(f"nameserver {net.host_ip}\n")
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This kernel mounts cgroup v1 only; from 1.35 the kubelet refuses v1 unless told (KEP-5573).
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": net.cgroup_parent,
        "containerRuntimeEndpoint": f"unix://{containerd_socket(state)}",
        "podLogsDir": str(node / "pod-logs"),
        "address": net.node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",  # inside the node's namespace
        "healthzPort": 10248,
        "tlsCertFile": str(serving_cert),
        "tlsPrivateKeyFile": str(serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [net.dns_service_ip],
        "resolvConf": str(resolv),
        "failSwapOn": False,
        # Images are imported, never pulled: the kubelet must never garbage-collect one (a pod could not start
        # again). 100 % is never reached.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # The machine's disk is shared; evict only when it is really full.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "maxPods": 110,
        "serializeImagePulls": False,
        "nodeStatusReportFrequency": "10s",
        "registerNode": True,
        "registerWithTaints": [{"key": NODE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
    }
    path = node / "kubelet-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start_kubelet(state: Path, net: NodeNet, kubelet_bin: Path, kubeconfig: Path, config: Path) -> None:
    procs.start(
        state,
        "kubelet",
        [
            "nsenter",
            f"--net={net.netns}",
            "--",
            str(kubelet_bin),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={shortpaths.kubelet_root(state)}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={net.node_ip}",
            f"--node-labels={NODE_LABEL}=true",
            "--v=1",
        ],
    )


def start_kube_proxy(state: Path, net: NodeNet, proxy_bin: Path, kubeconfig: Path) -> None:
    """kube-proxy in iptables mode inside the node's namespace (kubernetes/kubernetes, cmd/kube-proxy/app/options.go
    for the flags). The conntrack sysctls it would tune are the machine's, not the namespace's: 0 leaves them."""
    procs.start(
        state,
        "kube-proxy",
        [
            "nsenter",
            f"--net={net.netns}",
            "--",
            str(proxy_bin),
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={NODE_NAME}",
            "--proxy-mode=iptables",
            f"--cluster-cidr={net.pod_cidr}",
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
            "--v=1",
        ],
    )


def start_coredns(state: Path, net: NodeNet, coredns_bin: Path, kubeconfig: Path) -> None:
    """CoreDNS on the host end of the node's link, answering for the cluster from the kubernetes plugin as
    kubeadm's Corefile does (kubernetes/kubernetes, cmd/kubeadm/app/phases/addons/dns/manifests.go), without
    forwarding: nothing here reaches outside the machine."""
    corefile = state / "node" / "Corefile"
    corefile.write_text(
        f""".:53 {{
    bind {net.host_ip}
    errors
    health {net.host_ip}:8054
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
"""
    )
    procs.start(state, "coredns", [str(coredns_bin), "-conf", str(corefile)])


def node_ready(api_request: object) -> bool:
    found = api_request("GET", f"/api/v1/nodes?fieldSelector=metadata.name%3D{NODE_NAME}")  # type: ignore[operator]
    if not found["items"]:
        return False  # the kubelet has not registered it yet
    node = found["items"][0]
    conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
    taints = [t for t in node.get("spec", {}).get("taints", []) or [] if t["key"].startswith("node.kubernetes.io/")]
    return conditions.get("Ready") == "True" and not taints


# --- teardown --------------------------------------------------------------------------------------------


def _mounts_under(root: Path) -> list[Path]:
    prefix = str(root.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].encode().decode("unicode_escape")
        if target == prefix or target.startswith(prefix + "/"):
            found.append(Path(target))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def mounts_left(state: Path) -> list[Path]:
    """Mounts of the node: its network namespace's under <state>/node, the pods' volumes under the kubelet's root."""
    return _mounts_under(state / "node") + _mounts_under(shortpaths.kubelet_root(state))


def _shim_sockets(state: Path) -> list[Path]:
    """The sockets of the node's containerd shims: /run/containerd/s/<sha256 of address/namespace/id>, outside the
    state directory (containerd release/1.6, runtime/v2/shim/util_unix.go: SocketAddress, socketRoot)."""
    tasks = state / "node" / "containerd" / "state" / "io.containerd.runtime.v2.task"
    sockets = []
    if tasks.is_dir():
        for namespace in tasks.iterdir():
            for task in namespace.iterdir():
                key = f"{containerd_socket(state)}/{namespace.name}/{task.name}"
                sockets.append(Path("/run/containerd/s") / hashlib.sha256(key.encode()).hexdigest())
    return [s for s in sockets if s.exists()]


def _short_folders(state: Path) -> list[Path]:
    """The node's folders outside the state folder (shortpaths): the sockets', and the kubelet root's parent."""
    return [shortpaths.socket_dir(state), shortpaths.kubelet_root(state).parent]


def teardown(state: Path) -> list[str]:
    """Remove what the node left outside its processes, once they are stopped: every process in its cgroups
    (the containers), the containerd shims (they carry the state marker), the node's mounts (mounts_left), the network
    namespace (and with it the veth pair, the bridge and every iptables chain in it), the host route, the cgroups
    and the container log links. Returns what it had to remove."""
    removed: list[str] = []
    net = saved_net(state)
    if net is not None:
        for _ in range(50):
            pids = cgroup_pids(net)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            removed.append(f"{len(pids)} container process(es)")
            time.sleep(0.1)
    for pid in procs.leftovers(state):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        removed.append(f"process {pid}")
    deadline = time.monotonic() + 10
    while procs.leftovers(state) and time.monotonic() < deadline:
        time.sleep(0.1)
    for mount in mounts_left(state):
        done = subprocess.run(["umount", "--lazy", str(mount)], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            removed.append(f"mount {mount}")
    if net is not None:
        # The host end goes with the namespace; delete it anyway in case the namespace is held elsewhere.
        if _run("ip", "link", "show", net.host_veth, check=False).returncode == 0:
            _run("ip", "link", "delete", net.host_veth, check=False)
            removed.append(f"link {net.host_veth}")
        _run("ip", "route", "delete", net.pod_cidr, check=False)
        _run("ip", "route", "delete", net.service_cidr, check=False)
        for group in _cgroup_dirs(net):
            with contextlib.suppress(OSError):
                group.rmdir()
        removed.extend(f"cgroup {g}" for g in _cgroup_dirs(net))
    for socket in _shim_sockets(state):
        socket.unlink(missing_ok=True)
        removed.append(f"socket {socket}")
    for folder in _short_folders(state):
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(f"folder {folder}")
    logs = state / "node" / "pod-logs"
    if CONTAINER_LOG_LINKS.is_dir():
        for link in CONTAINER_LOG_LINKS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(logs)):
                    link.unlink()
    return removed


def leftovers(state: Path) -> list[str]:
    """What of the node is still on the machine (the cluster-down test asserts this is empty)."""
    found: list[str] = [f"mount {m}" for m in mounts_left(state)]
    found.extend(f"socket {s}" for s in _shim_sockets(state))
    found.extend(f"folder {folder}" for folder in _short_folders(state) if folder.exists())
    net = saved_net(state)
    if net is not None:
        if _run("ip", "link", "show", net.host_veth, check=False).returncode == 0:
            found.append(f"link {net.host_veth}")
        routes = _run("ip", "-4", "route", "show").stdout
        found.extend(f"route {cidr}" for cidr in (net.pod_cidr, net.service_cidr) if cidr.split("/")[0] in routes)
        found.extend(f"cgroup {g}" for g in _cgroup_dirs(net))
        found.extend(f"process {p} in the node's cgroups" for p in cgroup_pids(net))
    return found


def in_pod_cidr(address: str, net: NodeNet) -> bool:
    return ipaddress.ip_address(address) in ipaddress.ip_network(net.pod_cidr)
