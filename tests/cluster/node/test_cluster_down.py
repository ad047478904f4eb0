"""`make cluster-down` leaves nothing of the real node behind (issue 30): no mount under the state directory, no
network namespace, veth, route or iptables chain it made, no cgroup, no process, no containerd shim socket.

A second cluster, in a state directory of the test's own, is started beside the session's (which also shows two
clusters on one machine keep apart: their own link, bridge, Service range and cgroups), a pod is run on its node so
that every kind of leftover exists, and it is stopped.

Its state directory is as deep as a team's checkout can be (issue 43): the kubelet's pod-resources socket under
`<state>/node/kubelet` would pass a unix socket's 107 bytes there and the kubelet would not start, so the node keeps
its sockets and the kubelet's root at short paths of their own (localcluster.shortpaths), removed with it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from localcluster import node, procs, shortpaths

from tests.cluster.conftest import controlplane
from tests.cluster.node.conftest import NODE_TOLERATION, NodeCluster, eventually

pytestmark = [pytest.mark.cluster, pytest.mark.node]


def _host_chains() -> str:
    done = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False)
    return done.stdout


def test_cluster_down_leaves_no_mount_namespace_link_chain_cgroup_or_process(
    node_cluster: NodeCluster, tmp_path: Path
) -> None:
    state = (tmp_path / "home-of-a-platform-team" / "src" / "serving-chaos-experiments" / ".cluster").resolve()
    assert len(str(state / "node" / "kubelet" / "pod-resources" / "kubelet.sock").encode()) > 107  # too deep before
    chains_before = _host_chains()
    env = controlplane.up(state)
    try:
        net = node.saved_net(state)
        assert net is not None
        first = node.saved_net(node_cluster.cluster.env.state)
        assert first is not None and net.index != first.index  # its own addresses, bridge and cgroups
        core = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(env.admin_kubeconfig)))
        image = node_cluster.values["KFCHAOS_NODE_IMAGE_PAUSE"]
        core.create_namespaced_pod(
            "default",
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name="leftover-bait"),
                spec=k8s.V1PodSpec(
                    node_selector={node.NODE_LABEL: "true"},
                    tolerations=[k8s.V1Toleration(**NODE_TOLERATION)],
                    containers=[k8s.V1Container(name="c", image=image, image_pull_policy="IfNotPresent")],
                ),
            ),
        )
        eventually(
            "the pod to run on the second cluster's node",
            lambda: core.read_namespaced_pod("leftover-bait", "default").status.phase == "Running",
            timeout=120,
        )
        # What a running node holds outside its processes, before the stop:
        assert node.mounts_left(state), "a running node has mounts under its state directory"
        assert node.cgroup_pids(net), "a running pod has processes in the node's cgroups"
        # Every socket at its short path, none under the deep state folder.
        assert node.containerd_socket(state).is_socket()
        assert (shortpaths.kubelet_root(state) / "pod-resources" / "kubelet.sock").is_socket()
        sockets = [path for path in state.rglob("*") if path.is_socket()]
        assert sockets == [], sockets
        assert node.mounts_left(state) != node._mounts_under(state / "node"), "pods' volumes under the kubelet's root"
    finally:
        controlplane.down(state)
    assert node.leftovers(state) == []
    assert node.mounts_left(state) == []
    assert not shortpaths.socket_dir(state).exists() and not shortpaths.kubelet_root(state).parent.exists()
    assert not any(
        line.split()[4].startswith(str(state)) for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert net.host_veth not in links and net.bridge not in links
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=True).stdout
    assert f"10.253.{net.index}." not in routes and f"10.254.{net.index}." not in routes
    assert not any(
        Path(controller, net.cgroup_parent.lstrip("/")).exists() for controller in Path("/sys/fs/cgroup").iterdir()
    )
    assert procs.leftovers(state) == []
    # kube-proxy's chains were in the node's namespace, gone with it: the host's own are as they were.
    assert _host_chains().count("KUBE-") == chains_before.count("KUBE-")
