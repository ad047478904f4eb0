"""The series a cluster keeps about one container, as kube-state-metrics and cAdvisor export them.

One place for their names and labels, for the supervisor of the real vLLM engine (kfchaos.demo.stack.enginesupervisor),
which exports them on a /metrics endpoint of its own beside vLLM's, as kube-state-metrics and the kubelet's cAdvisor
are processes of their own beside a pod, and for the demo server, which exports them from inside the modelled server
(kfchaos.demo.server.api `_export_container_status`).

- kube-state-metrics (kubernetes/kube-state-metrics internal/store/pod.go), from the pod object, labels namespace,
  pod, uid, container: `kube_pod_container_status_restarts_total` (restartCount),
  `kube_pod_container_status_last_terminated_reason{reason}` = 1 and `..._last_terminated_exitcode` once the
  container has terminated before (lastState.terminated), `kube_pod_container_status_terminated_reason{reason}` = 1
  while the container's State is Terminated (here: from its exit until the next container starts), and
  `kube_pod_container_resource_limits{resource="memory",unit="byte"}` from the pod spec.
- cAdvisor (google/cadvisor metrics/prometheus.go), per container cgroup, labels namespace, pod, container, id:
  `container_oom_events_total` (manager/manager.go watchForNewOoms credits each kernel OOM kill to the killed
  task's own cgroup, so a process that is not the container's first counts too), `container_start_time_seconds`,
  `container_spec_memory_limit_bytes`, `container_memory_working_set_bytes`. The series exist only while the
  cgroup does: the killed container's count goes with it (google/cadvisor#3015).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

POD_LABELS = ("namespace", "pod", "uid", "container")
CGROUP_LABELS = ("namespace", "pod", "container", "id")


@dataclass(frozen=True)
class Pod:
    namespace: str
    pod: str
    uid: str
    container: str

    def cgroup_id(self, container_id: str) -> str:
        return f"/kubepods/{self.namespace}/pod{self.uid}/{container_id}"


@dataclass(frozen=True)
class ContainerSeries:
    """What the kubelet's pod status and the container's cgroup say at one scrape."""

    restarts: int
    last_reason: str | None
    last_exit_code: int | None
    terminated_reason: str | None  # the current container's reason while it is Terminated, else None
    memory_limit_bytes: int
    # The running container's cgroup, None while there is none (between an exit and the next start).
    container_id: str | None = None
    started_at: float | None = None
    oom_events: int = 0
    working_set_bytes: int | None = None


def families(pod: Pod, status: ContainerSeries) -> Iterator[Metric]:
    where = [pod.namespace, pod.pod, pod.uid, pod.container]

    def gauge(name: str, about: str, value: float, extra: dict[str, str] | None = None) -> Metric:
        family = GaugeMetricFamily(name, about, labels=[*POD_LABELS, *(extra or {})])
        family.add_metric([*where, *(extra or {}).values()], value)
        return family

    yield gauge("kube_pod_container_status_restarts_total", "Restarts (kube-state-metrics)", status.restarts)
    if status.last_reason is not None:
        yield gauge("kube_pod_container_status_last_terminated_reason", "Last terminated reason (kube-state-metrics)",
                    1, {"reason": status.last_reason})  # fmt: skip
        yield gauge("kube_pod_container_status_last_terminated_exitcode", "Last terminated exit code "
                    "(kube-state-metrics)", status.last_exit_code or 0)  # fmt: skip
    if status.terminated_reason is not None:
        yield gauge("kube_pod_container_status_terminated_reason", "Terminated reason (kube-state-metrics)", 1,
                    {"reason": status.terminated_reason})  # fmt: skip
    yield gauge("kube_pod_container_resource_limits", "Limits (kube-state-metrics)", status.memory_limit_bytes,
                {"resource": "memory", "unit": "byte"})  # fmt: skip
    if status.container_id is None:
        return
    cgroup = [pod.namespace, pod.pod, pod.container, pod.cgroup_id(status.container_id)]
    for name, about, value in (
        ("container_oom_events_total", "OOM events of this cgroup (cAdvisor)", status.oom_events),
        ("container_start_time_seconds", "Start time of this cgroup (cAdvisor)", status.started_at),
        ("container_spec_memory_limit_bytes", "Memory limit (cAdvisor)", status.memory_limit_bytes),
        ("container_memory_working_set_bytes", "Working set (cAdvisor)", status.working_set_bytes),
    ):
        if value is not None:
            family = GaugeMetricFamily(name, about, labels=list(CGROUP_LABELS))
            family.add_metric(cgroup, float(value))
            yield family
