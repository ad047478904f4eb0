"""Which crash restarts the node's kernel OOM killer explains (docs/verdict.md "OOM kills").

Two ways an OOM kill reaches kube-state-metrics without the reason OOMKilled:
- a global OOM (the node, not the container's cgroup, out of memory): the kernel kills the victim with no memory
  cgroup event, containerd sees a plain SIGKILL (or vLLM's API server exiting after its worker), and the reason is
  Error or Completed; cAdvisor credits the kill to `/` (google/cadvisor utils/oomparser, manager/manager.go
  `watchForNewOoms`), never to the victim's container;
- a cgroup OOM kill whose TaskOOM event lost the race with the task's exit (containerd#8180, #8893): the reason is
  again that of the exit.
Either way the kernel counted it: mm/oom_kill.c `__oom_kill_process` does `count_vm_event(OOM_KILL)` for every
kill, global or in a memory cgroup, and node-exporter's vmstat collector publishes that counter as
`node_vmstat_oom_kill` (prometheus/node_exporter collector/vmstat_linux.go: `oom_kill` is in the default
`--collector.vmstat.fields`).

The rule: a crash restart of a container in scope counts as an OOM kill when its node's kernel counter rose
between the kubelet's longest back-off before the crash showed and two query steps after it. Each kill the kernel
counted explains one death: the OOMKilled restarts on that node take theirs first, so the failed start that may
follow a kill (vLLM's, docs/vllm.md) is not a second one. It never makes a kill disappear; it may count a crash that
coincided with another pod's OOM kill on the same node as one (a false FAIL, never a false PASS). A crash whose
node has no counter around it is *unknown*: it may have been an OOM kill, and the OOM check cannot PASS on it.

Where the node is: kube-state-metrics' `kube_pod_info{node}` for the pods in scope. Where node-exporter's series
are: kube-prometheus-stack scrapes node-exporter through its Service (prometheus-community/helm-charts
charts/prometheus-node-exporter/templates/servicemonitor.yaml, no relabelling by default), so its series carry the
node-exporter pod's `namespace` and `pod`, and the node comes from that pod's own `kube_pod_info`, as
kubernetes-mixin's `node_namespace_pod:kube_pod_info:` recording rule does; a scrape that labels its series with
`node` itself is read as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from kfchaos.metrics import counters
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.source import RangeSeries

NODE_OOM_METRIC = "node_vmstat_oom_kill"
POD_INFO_METRIC = "kube_pod_info"
# The kubelet's longest crash back-off (kubernetes pkg/kubelet/kubelet.go MaxContainerBackOff, 300 s): a crash can
# first show as a restart this long after the kill, when no scrape caught the container down in between.
MAX_BACK_OFF = 300.0
# The kubelet's cgroup version gauge (kubernetes pkg/kubelet/metrics/metrics.go CgroupVersion, set at start in
# pkg/kubelet/kubelet_linux.go; 1.31 and later): how a kill looks on that node. On cgroup v2 the kubelet sets
# memory.oom.group on each container unless its configuration says singleProcessOOMKill: true
# (pkg/kubelet/kuberuntime/kuberuntime_container_linux.go), so the kernel kills the whole container; on v1 it kills
# one process, and a server whose worker it killed may live on or exit by itself (OOMKilled with exit 0). The kubelet
# publishes singleProcessOOMKill only on /configz, behind nodes/proxy, a right kfchaos does not ask for.
CGROUP_METRIC = "kubelet_cgroup_version"
PARTS = ("node_oom", "pod_nodes", "cgroup_version")  # the names of `queries`' parts


def queries(scope: Scope) -> dict[str, str]:
    """The node kernel's OOM counters with their node, and the node of each pod in scope."""
    # kube_pod_info is 1 per pod (and per kube-state-metrics replica: max by dedups them).
    exporter_nodes = f'max by (namespace, pod, node) ({POD_INFO_METRIC}{{node!=""}})'
    in_scope = scope.matchers('node!=""')
    return {
        "node_oom": (
            f"({NODE_OOM_METRIC} * on (namespace, pod) group_left (node) {exporter_nodes})"
            f' or {NODE_OOM_METRIC}{{node!=""}}'
        ),
        "pod_nodes": f"max by (namespace, pod, uid, node) ({POD_INFO_METRIC}{{{in_scope}}})",
        # kube-prometheus-stack's kubelet job labels its series with `node` (prometheus-operator
        # pkg/prometheus/promcfg.go relabels an endpoint whose target is a Node to node=<its name>).
        "cgroup_version": f'max by (node) ({CGROUP_METRIC}{{node!=""}})',
    }


@dataclass
class NodeOoms:
    """Each node's kernel OOM kills in a range: when its counter rose, and where it was sampled."""

    rose: dict[str, list[list[float]]] = field(default_factory=dict)  # node -> [time, kills not yet explained]
    sampled: dict[str, np.ndarray] = field(default_factory=dict)  # node -> times with a finite sample
    pod_node: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (namespace, pod, uid) -> node
    cgroup: dict[str, int] = field(default_factory=dict)  # node -> its kubelet's cgroup version, where scraped

    def nodes(self) -> list[str]:
        """The nodes the pods in scope ran on."""
        return sorted(set(self.pod_node.values()))

    def shapes(self) -> dict[str, dict[str, object]]:
        """What each node of the pods in scope says about how an OOM kill looks there, for the run's record."""
        return {node: kill_shape(self.cgroup.get(node)) for node in self.nodes()}

    def node_of(self, namespace: str, pod: str, uid: str) -> str | None:
        """The pod's node; by name alone where the series carry no uid."""
        return self.pod_node.get((namespace, pod, uid)) or self.pod_node.get((namespace, pod, ""))

    def covers(self, node: str, at: float) -> bool:
        """The node's counter was sampled before `at` and at or after it: a kill just before it would show."""
        times = self.sampled.get(node)
        return times is not None and bool(np.any(times < at)) and bool(np.any(times >= at))

    def explain(self, node: str, at: float, step: float, deaths: float = 1.0) -> bool:
        """Whether the node's kernel OOM-killed between a back-off before `at` and two steps after it, with a kill
        no earlier death took: that kill is then this death's (the earliest first), and no other's."""
        explained = False
        for rise in self.rose.get(node, []):
            while deaths > 0 and rise[1] > 0 and at - MAX_BACK_OFF - step <= rise[0] <= at + 2 * step:
                rise[1] -= 1.0
                deaths -= 1.0
                explained = True
        return explained


def kill_shape(cgroup_version: int | None) -> dict[str, object]:
    """A node's cgroup version and what it means for an OOM kill (see CGROUP_METRIC)."""
    if cgroup_version == 1:
        single = "does not apply: on cgroup v1 the kernel kills one process"
        shape = "one process: a worker's kill can leave the container running, or exiting by itself (OOMKilled, exit 0)"
    elif cgroup_version == 2:
        single = "not read (the kubelet's /configz, behind nodes/proxy)"
        shape = "the whole container (memory.oom.group), unless the kubelet sets singleProcessOOMKill: true"
    else:
        single = "not read"
        shape = f"unknown: {CGROUP_METRIC} (the kubelet's /metrics, Kubernetes 1.31 and later) not scraped"
    return {"cgroup_version": cgroup_version, "single_process_oom_kill": single, "oom_kill_takes": shape}


def node_ooms(
    node_series: Iterable[RangeSeries],
    pod_series: Iterable[RangeSeries],
    since: float,
    cgroup_series: Iterable[RangeSeries] = (),
) -> NodeOoms:
    """The counters differenced per series (kfchaos.metrics.counters; a node-exporter pod replaced by its
    DaemonSet is a new series whose first sample is its level), then gathered per node."""
    found = NodeOoms()
    for series in node_series:
        node = series.labels.get("node", "")
        if not node:
            continue
        found.rose.setdefault(node, []).extend([t, n] for t, n in counters.events(series, since))
        finite = series.times[np.isfinite(series.values)]
        found.sampled[node] = np.union1d(found.sampled.get(node, np.empty(0)), finite)
    for rises in found.rose.values():
        rises.sort()
    for series in cgroup_series:
        finite = series.values[np.isfinite(series.values)]
        if series.labels.get("node") and len(finite):
            found.cgroup[series.labels["node"]] = int(finite[-1])
    for series in pod_series:
        labels = series.labels
        if labels.get("node"):
            found.pod_node[(labels.get("namespace", ""), labels.get("pod", ""), labels.get("uid", ""))] = labels["node"]
            found.pod_node.setdefault((labels.get("namespace", ""), labels.get("pod", ""), ""), labels["node"])
    return found
