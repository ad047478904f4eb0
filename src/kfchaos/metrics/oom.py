"""OOM kills and GPU OOM crashes, counted from the series a cluster keeps (docs/verdict.md "OOM kills").

Why not cAdvisor's `container_oom_events_total` alone: cAdvisor keeps that count on the killed container's
cgroup; the kubelet replaces the container and the new container's series starts again at 0, so the kill is
usually never scraped (google/cadvisor#3015, kubernetes-monitoring/kubernetes-mixin#822).

The primary source is kube-state-metrics (kubernetes/kube-state-metrics internal/store/pod.go,
docs/metrics/workload/pod-metrics.md), whose series live on the *pod* object and so survive the container:
- `kube_pod_container_status_restarts_total{namespace,pod,uid,container}`: the container status's
  `restartCount`, a counter for the pod's lifetime;
- `kube_pod_container_status_last_terminated_reason{namespace,pod,uid,container,reason}` = 1 while
  `lastState.terminated` is set; `reason` is the runtime's: "OOMKilled" when the cgroup was OOM-killed,
  "Error" for another non-zero exit, "Completed" for exit 0 (containerd internal/cri/server:
  oomExitReason / errorExitReason / completeExitReason). It changes in the same pod update as the count.
A restart whose last terminated reason (at the point the restart shows) is OOMKilled is a host-memory OOM
kill. Every other restart is a crash: a CUDA out-of-memory ends vLLM's engine with a Python exception and
the API server then shuts down (vllm-project/vllm vllm/entrypoints/launcher.py `_add_shutdown_handlers`), so
the reason is "Error" (or "Completed"), never OOMKilled; exit code 137 alone is any SIGKILL. A crash counts
as a GPU OOM when the previous container's log (`kubectl logs --previous`, the pod log API with
previous=true) shows CUDA out of memory; when that log cannot be read the crash stays *unread* and the OOM
check cannot PASS on it.

Counting is per series, then summed: each container's counter is differenced on its own (a drop is a reset,
its new value all increase) and only then are the increments added up, so a pod that disappears (its
series ends) subtracts nothing. The counts go into the snapshot as cumulative, never-decreasing series on
the query grid, so `Series.increase` over any window is the number of events in it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kfchaos.metrics import names
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.prometheus import PrometheusError, PrometheusUnreachable
from kfchaos.metrics.snapshot import MetricsSnapshot, Series
from kfchaos.metrics.source import MetricsSource, RangeSeries

RESTARTS_METRIC = "kube_pod_container_status_restarts_total"
REASON_METRIC = "kube_pod_container_status_last_terminated_reason"
CADVISOR_METRIC = "container_oom_events_total"
OOM_REASON = "OOMKilled"

# Snapshot series (cumulative event counts on the query grid).
HOST_OOM = names.OOM_KILLS  # restarts whose last terminated reason is OOMKilled (kube-state-metrics)
CADVISOR_OOM = "oom_kills_cadvisor"  # cAdvisor OOM events, per container series (a lower bound)
CRASHES = "crash_restarts"  # restarts for any other reason (or an unknown one)
GPU_OOM = "gpu_oom_crashes"  # crashes whose previous container log shows CUDA out of memory
UNREAD = "crash_restarts_unread"  # crashes whose cause could not be read: could be either kind of OOM
PENDING = "oom_terminated_containers"  # gauge: containers terminated by OOM, restart not yet counted
OOM_SERIES = (HOST_OOM, CADVISOR_OOM, CRASHES, GPU_OOM, UNREAD)

# torch raises torch.OutOfMemoryError ("CUDA out of memory. Tried to allocate ..."; torch.cuda.OutOfMemoryError
# before torch 2.5); a failed CUDA runtime allocation outside the caching allocator reads "CUDA error: out of memory".
GPU_OOM_LOG = re.compile(r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUDA error: out of memory")

ContainerKey = tuple[str, str, str, str]  # namespace, pod, container, pod uid ("" where not exported)
CrashLogReader = Callable[[str, str, str], "str | None"]
"""(namespace, pod, container) -> the previous container's log tail, or None when it cannot be read."""


def container_key(labels: dict[str, str]) -> ContainerKey:
    return (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""), labels.get("uid", ""))


def increments(values: NDArray[np.float64], new: bool = False) -> NDArray[np.float64]:
    """Each point's increase since the previous finite point of the *same* series: a drop is a counter
    reset, after which the new value is all increase (Prometheus's rule for increase()). The first point is
    the reference (0), except for a `new` series -- one that began inside the queried range, whose counter
    started at 0 (a new pod's restart count, a new container's cgroup), so its first value is all increase."""
    out = np.zeros(len(values))
    previous = 0.0 if new else None
    for index, value in enumerate(values):
        if not np.isfinite(value):
            continue
        if previous is not None:
            out[index] = value - previous if value >= previous else value
        previous = value
    return out


@dataclass(frozen=True)
class Restart:
    time: float
    key: ContainerKey
    count: float
    reason: str | None  # the last terminated reason shown with the restart; None when none was

    @property
    def oom_killed(self) -> bool:
        return self.reason == OOM_REASON


def _began_after(series: RangeSeries, since: float | None) -> bool:
    spacing = float(np.min(np.diff(series.times))) if len(series.times) > 1 else 0.0
    return since is not None and len(series.times) > 0 and float(series.times[0]) > since + spacing / 2


def restarts(
    restart_series: Iterable[RangeSeries], reason_series: Iterable[RangeSeries], since: float | None = None
) -> list[Restart]:
    """Every restart step of every container, with the last terminated reason shown at that point.

    Both series come from one pod object in one kube-state-metrics scrape, so the reason that explains a
    restart is on the same timestamp; failing that, the next point of the reason series within one step.
    When two reasons show at once (a scrape racing a second restart) OOMKilled wins: never undercount.
    A series that begins after `since` (the range's start) is a new pod, counted from 0; when it first shows
    more than one restart, only the last one's reason is known and the others have none.
    """
    reasons: dict[ContainerKey, list[tuple[NDArray[np.float64], str]]] = {}
    for series in reason_series:
        present = series.times[np.isfinite(series.values) & (series.values > 0)]
        reasons.setdefault(container_key(series.labels), []).append((present, series.labels.get("reason", "")))
    out = []
    for series in restart_series:
        key = container_key(series.labels)
        steps = increments(series.values, new=_began_after(series, since))
        spacing = float(np.min(np.diff(series.times))) if len(series.times) > 1 else 0.0
        for index in np.nonzero(steps > 0)[0]:
            at = float(series.times[index])
            shown = {reason for times, reason in reasons.get(key, []) if np.any(np.abs(times - at) <= 1e-3)}
            if not shown:
                shown = {
                    reason for times, reason in reasons.get(key, []) if np.any((times > at) & (times <= at + spacing))
                }
            reason = OOM_REASON if OOM_REASON in shown else (sorted(shown)[0] if shown else None)
            out.append(Restart(at, key, 1.0, reason))
            if steps[index] > 1:  # several restarts between two points: only the last one's reason shows
                out.append(Restart(at, key, float(steps[index]) - 1.0, None))
    return out


def cadvisor_events(series: Iterable[RangeSeries], since: float | None = None) -> list[tuple[float, float]]:
    """(time, events) of cAdvisor OOM counters, differenced per container series, never across them; a
    series that begins after `since` is a new cgroup, counted from 0."""
    out = []
    for one in series:
        steps = increments(one.values, new=_began_after(one, since))
        out += [(float(one.times[i]), float(steps[i])) for i in np.nonzero(steps > 0)[0]]
    return out


def cumulative(name: str, grid: NDArray[np.float64], events: Iterable[tuple[float, float]], query: str) -> Series:
    """A never-decreasing count on `grid`: the value at t is every event at or before t."""
    values = np.zeros(len(grid))
    for at, count in events:
        values[grid >= at - 1e-6] += count
    return Series(name, grid.copy(), values, "counter", query, "count")


def gpu_crashes(crashes: list[Restart], read_log: CrashLogReader | None) -> tuple[list[Restart], list[Restart]]:
    """(GPU OOM crashes, crashes whose cause is unread). Only a container's last crash has a readable log
    (the kubelet keeps one previous container), so earlier crashes of the same container stay unread, as
    does every crash without a known reason (it may have been an OOM kill)."""
    last: dict[ContainerKey, Restart] = {}
    for crash in sorted(crashes, key=lambda c: c.time):
        last[crash.key] = crash
    gpu, unread = [], []
    for crash in crashes:
        if crash.reason is None or read_log is None or last[crash.key] is not crash:
            unread.append(crash)
            continue
        text = read_log(crash.key[0], crash.key[1], crash.key[2])
        if text is None:
            unread.append(crash)
        elif GPU_OOM_LOG.search(text):
            gpu.append(crash)
    return gpu, unread


def queries(scope: Scope) -> dict[str, str]:
    """The raw per-series selectors behind the counts (sent as range queries; summed here, not there)."""
    selector = scope.matchers()
    return {
        "restarts": f"{RESTARTS_METRIC}{{{selector}}}",
        "reasons": f"{REASON_METRIC}{{{selector}}}",
        "cadvisor": f"{CADVISOR_METRIC}{{{selector}}}",
    }


def collect(
    source: MetricsSource,
    scope: Scope,
    start: float,
    end: float,
    step: float,
    read_log: CrashLogReader | None = None,
) -> MetricsSnapshot:
    """The OOM series over [start, end] as a snapshot (to merge into the run's): counts, or why there are none."""
    result = MetricsSnapshot(source=source.url)
    sent = queries(scope)
    found: dict[str, list[RangeSeries]] = {}
    for part, query in sent.items():
        try:
            found[part] = source.range(query, start, end, step)
        except PrometheusUnreachable as exc:
            result.unreachable = str(exc)
            return result
        except (PrometheusError, ValueError) as exc:
            found[part] = []
            result.errors[HOST_OOM if part != "cadvisor" else CADVISOR_OOM] = str(exc)
    grid = np.arange(start, end + step / 2, step, dtype=np.float64)
    described = f"{sent['restarts']} x {sent['reasons']}, increase per container series, then summed"
    if found["cadvisor"]:
        result.series[CADVISOR_OOM] = cumulative(
            CADVISOR_OOM, grid, cadvisor_events(found["cadvisor"], start), f"{sent['cadvisor']}, increase per series"
        )
    if HOST_OOM in result.errors:
        return result
    if not found["restarts"]:
        result.errors[HOST_OOM] = (
            f"no {RESTARTS_METRIC} series for {scope.matchers()}: is kube-state-metrics scraped? OOM kills cannot "
            f"be counted without it (cAdvisor's {CADVISOR_METRIC} loses the killed container's count)"
        )
        return result
    every = restarts(found["restarts"], found["reasons"], start)
    crashes = [r for r in every if not r.oom_killed]
    gpu, unread = gpu_crashes(crashes, read_log)
    log_note = "previous container logs" if read_log else "no log reader: every crash unread"

    def events(items: list[Restart]) -> list[tuple[float, float]]:
        return [(r.time, r.count) for r in items]

    result.series[HOST_OOM] = cumulative(HOST_OOM, grid, events([r for r in every if r.oom_killed]), described)
    result.series[CRASHES] = cumulative(CRASHES, grid, events(crashes), described)
    result.series[GPU_OOM] = cumulative(GPU_OOM, grid, events(gpu), f"{described}; {log_note}")
    result.series[UNREAD] = cumulative(UNREAD, grid, events(unread), f"{described}; {log_note}")
    return result


@dataclass(frozen=True)
class OomCount:
    """OOM events in one window; `missing` says why the count is incomplete (None when it is not)."""

    host: float | None  # OOM-killed restarts (kube-state-metrics)
    pending: float  # containers OOM-killed and still down at the window's end (restart not yet counted)
    cadvisor: float | None  # cAdvisor OOM events where the series survived (a lower bound)
    gpu: float  # crashes whose previous log shows CUDA out of memory
    unread: float  # crashes whose cause could not be read
    missing: str | None

    @property
    def host_kills(self) -> float:
        """Host-memory OOM kills: the larger of the two sources (they count the same kills)."""
        return max((self.host or 0.0) + self.pending, self.cadvisor or 0.0)

    @property
    def known(self) -> float:
        """Events shown for certain: host-memory OOM kills plus GPU OOM crashes."""
        return self.host_kills + self.gpu


def count(snapshot: MetricsSnapshot, start: float, end: float, grace: float) -> OomCount:
    """Events in [start, end + grace]: a kill at the end of a window shows a scrape interval later."""
    until = end + grace

    def increase(name: str) -> float | None:
        if snapshot.missing(name):
            return None
        return snapshot.series[name].increase(start, until)

    host = increase(HOST_OOM)
    missing = snapshot.missing(HOST_OOM)
    if missing is None and host is None:
        missing = f"series {HOST_OOM} has fewer than two points around the window"
    evidence = [snapshot.missing(n) for n in (GPU_OOM, UNREAD)]
    gpu, unread = increase(GPU_OOM), increase(UNREAD)
    if missing is None and (any(evidence) or gpu is None or unread is None):
        missing = next((e for e in evidence if e), None) or "crash-restart evidence has too few points"
    pending = 0.0
    if not snapshot.missing(PENDING):
        # Down at the end but not at the start: killed in this window, its restart not yet counted.
        series = snapshot.series[PENDING]
        finite = np.isfinite(series.values)
        at_end = series.values[(series.times <= until) & finite]
        at_start = series.values[(series.times <= start) & finite]
        down_end = float(at_end[-1]) if len(at_end) else 0.0
        pending = max(0.0, down_end - (float(at_start[-1]) if len(at_start) else 0.0))
    return OomCount(host, pending, increase(CADVISOR_OOM), gpu or 0.0, unread or 0.0, missing)
