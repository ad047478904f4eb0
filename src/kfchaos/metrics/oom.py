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

Counting is per series, then summed: each container's counter is differenced on its own by the one rule for
counters (kfchaos.metrics.counters: a drop is a reset, its new value all increase; a first sample sets the
level unless the pod's or cgroup's own start time puts its birth inside the range) and only then are the
increments added up, so a pod that disappears (its series ends) subtracts nothing, and an old pod seen again
after a gap adds nothing. The counts go into the snapshot as cumulative, never-decreasing series on
the query grid, so `Series.increase` over any window is the number of events in it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kfchaos.metrics import counters, names, nodeoom
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.prometheus import PrometheusError, PrometheusUnreachable
from kfchaos.metrics.snapshot import MetricsSnapshot, Series
from kfchaos.metrics.source import MetricsSource, RangeSeries

RESTARTS_METRIC = "kube_pod_container_status_restarts_total"
REASON_METRIC = "kube_pod_container_status_last_terminated_reason"
# Every container of a pod counts: kube-state-metrics exports the init containers' statuses as a family of their
# own (internal/store/pod.go: kube_pod_init_container_status_restarts_total, ..._last_terminated_reason,
# ..._terminated_reason, ..._waiting_reason, over p.Status.InitContainerStatuses, same labels). A native sidecar
# (an init container with restartPolicy Always, kube_pod_init_container_info{restart_policy="Always"}) is one of
# them: restarted as a container is, its OOM kills show there. Container names are unique across a pod's init and
# regular containers (the API server validates it), so one key (namespace, pod, container, uid) holds for both.
INIT_RESTARTS_METRIC = "kube_pod_init_container_status_restarts_total"
INIT_REASON_METRIC = "kube_pod_init_container_status_last_terminated_reason"
INIT_TERMINATED_METRIC = "kube_pod_init_container_status_terminated_reason"
INIT_WAITING_METRIC = "kube_pod_init_container_status_waiting_reason"
# A run-to-completion init container stays Terminated with reason Completed for its pod's life: that is not down.
COMPLETED = "Completed"
CADVISOR_METRIC = "container_oom_events_total"
# cAdvisor's start time of each container cgroup (google/cadvisor metrics/prometheus.go,
# container_start_time_seconds; labels as container_oom_events_total's): the only proof that a cgroup series
# first seen inside the range is a new cgroup, not an old one back after a gap.
CADVISOR_STARTED_METRIC = "container_start_time_seconds"
OOM_REASON = "OOMKilled"

# Snapshot series (cumulative event counts on the query grid).
HOST_OOM = names.OOM_KILLS  # restarts whose last terminated reason is OOMKilled (kube-state-metrics)
CADVISOR_OOM = "oom_kills_cadvisor"  # cAdvisor OOM events, per container series (a lower bound)
CRASHES = "crash_restarts"  # restarts for any other reason (or an unknown one)
GPU_OOM = "gpu_oom_crashes"  # crashes whose previous container log shows CUDA out of memory
UNREAD = "crash_restarts_unread"  # crashes whose cause could not be read: could be either kind of OOM
NODE_OOM = "oom_kills_node"  # crashes while their node's kernel OOM-killed (kfchaos.metrics.nodeoom)
NODE_UNKNOWN = "crash_restarts_node_unknown"  # crashes on a node whose kernel OOM counter was not sampled
NODE_UNEXPLAINED = "oom_kills_node_unexplained"  # the target's nodes' kernel OOM kills no death of the target took
NODE_CGROUP = "node_cgroup_version:"  # + a node of the pods in scope: its kubelet's cgroup version, 0 where unknown
PENDING = "oom_terminated_containers"  # gauge: containers terminated by OOM, restart not yet counted
OOM_SERIES = (HOST_OOM, CADVISOR_OOM, CRASHES, GPU_OOM, UNREAD, NODE_OOM, NODE_UNKNOWN)

# torch raises torch.OutOfMemoryError ("CUDA out of memory. Tried to allocate ..."; torch.cuda.OutOfMemoryError
# before torch 2.5); a failed CUDA runtime allocation outside the caching allocator reads "CUDA error: out of memory".
GPU_OOM_LOG = re.compile(r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUDA error: out of memory")

ContainerKey = tuple[str, str, str, str]  # namespace, pod, container, pod uid ("" where not exported)
CrashLogReader = Callable[[str, str, str], "str | None"]
"""(namespace, pod, container) -> the previous container's log tail, or None when it cannot be read."""

# The series behind "killed, restart not counted yet" (kube-state-metrics internal/store/pod.go):
# `..._terminated_reason{reason}` exists only while the container's State is Terminated; once the kubelet has
# a back-off cached for it, convertToAPIContainerStatuses (kubernetes pkg/kubelet/kubelet_pods.go) moves the
# Terminated state into LastTerminationState and reports State Waiting (reason CrashLoopBackOff), so the kill
# then shows only as `..._waiting_reason{reason="CrashLoopBackOff"}` with `..._last_terminated_reason`. The
# restart count steps up only when the next container is created (kuberuntime gives it the dead one's
# count + 1), after the back-off: a kill near a window's end shows in neither restart count nor terminated
# gauge, only in the waiting + last-terminated pair.
TERMINATED_METRIC = "kube_pod_container_status_terminated_reason"
WAITING_METRIC = "kube_pod_container_status_waiting_reason"
BACK_OFF = "CrashLoopBackOff"
# kube_pod_created{namespace,pod,uid}: the pod's creation time. It tells a new pod (counted from 0) from an
# old one whose series was absent for a while (a scrape gap), which absence alone cannot.
CREATED_METRIC = "kube_pod_created"


def container_key(labels: dict[str, str]) -> ContainerKey:
    """A container's identity: namespace, pod, container and pod uid. Every other label (instance, job, a
    kube-state-metrics replica's pod) names the scrape target, not the container, so two replicas of
    kube-state-metrics scraped side by side give the same key and are one container."""
    return (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""), labels.get("uid", ""))


@dataclass(frozen=True)
class Restart:
    time: float
    key: ContainerKey
    count: float
    reason: str | None  # the last terminated reason shown with the restart; None when none was

    @property
    def oom_killed(self) -> bool:
        return self.reason == OOM_REASON


IDENTITY = ("namespace", "pod", "container", "uid")  # kube-state-metrics' container series
CGROUP_IDENTITY = ("namespace", "pod", "container", "id")  # cAdvisor's: one series per container cgroup


def merged(series: Iterable[RangeSeries], identity: tuple[str, ...] = IDENTITY) -> list[RangeSeries]:
    """One series per container (the `identity` labels; container_key for kube-state-metrics): the copies
    of one container's series that several scrape targets export (kube-state-metrics replicas, a kubelet
    scraped by two jobs: `instance` or `job` differs) joined point by point, the highest value at each time
    (the freshest copy of a count that only grows)."""
    groups: dict[tuple[str, ...], list[RangeSeries]] = {}
    for one in series:
        groups.setdefault(tuple(one.labels.get(k, "") for k in identity), []).append(one)
    out = []
    for key, copies in groups.items():
        if len(copies) == 1:
            out.append(copies[0])
            continue
        times = np.unique(np.concatenate([c.times for c in copies]))
        values = np.full(len(times), np.nan)
        for copy in copies:
            at = np.searchsorted(times, copy.times)
            values[at] = np.fmax(values[at], copy.values)
        out.append(RangeSeries(dict(zip(identity, key, strict=True)), times, values))
    return out


def _present(series: RangeSeries) -> NDArray[np.float64]:
    return series.times[np.isfinite(series.values) & (series.values > 0)]


def _fresh(stamps: RangeSeries) -> NDArray[np.float64]:
    """The points of a `timestamp(...)` range series whose sample was taken less than one step before them.

    The query engine repeats a series' last sample for up to 5 minutes (promql/engine.go lookbackDelta)
    where no staleness marker ended it, so a container that left State Terminated can still look terminated
    minutes later; only the sample's own time says it was still so (each sample is fresh at one point)."""
    # One point cannot repeat itself: it is fresh whatever its age.
    spacing = float(np.min(np.diff(stamps.times))) if len(stamps.times) > 1 else math.inf
    age = stamps.times - stamps.values
    return stamps.times[np.isfinite(age) & (age < spacing - 1e-3)]


def _shown_at(found: list[tuple[NDArray[np.float64], str]], at: float) -> set[str]:
    return {label for times, label in found if np.any(np.abs(times - at) <= 1e-3)}


def _pick(shown: set[str]) -> str | None:
    """When two reasons show at once (a scrape racing a second restart) OOMKilled wins: never undercount."""
    return OOM_REASON if OOM_REASON in shown else (sorted(shown)[0] if shown else None)


def restarts(
    restart_series: Iterable[RangeSeries],
    reason_series: Iterable[RangeSeries],
    since: float | None = None,
    *,
    down_series: Iterable[RangeSeries] = (),
    created: dict[str, float] | None = None,
) -> list[Restart]:
    """Every termination of every container (one Restart each), with the reason shown for it.

    A termination shows either as a step of the restart count, with the last terminated reason on the same
    timestamp (both come from one pod object in one kube-state-metrics scrape; failing that, the next point
    of the reason series within one step), or earlier, as the container being *down*: `down_series` are
    `timestamp()` of kube-state-metrics' terminated_reason (State Terminated) and
    waiting_reason{reason="CrashLoopBackOff"} (State Waiting after the kill, LastTerminationState holding
    it) series: down where a sample was taken within one step (`_fresh`). A termination seen down is
    counted when first seen down, and the restart step that later counts it adds nothing: each kill once.

    Series are joined per container first (`merged`: several kube-state-metrics replicas are one source).
    Where the pod uid is known the restart count never resets. Whether the pod is new is read from its creation
    time alone (`created`: kube_pod_created by uid, or by namespace and pod where the series carry no uid;
    kfchaos.metrics.counters): a new pod is counted from 0, any other series from its first sample, however late
    it shows (`unseen` says where its count is unknown). When a new pod first shows more than one restart, only
    the last one's reason is known and the others have none.
    """
    reasons: dict[ContainerKey, list[tuple[NDArray[np.float64], str]]] = {}
    for series in reason_series:
        reasons.setdefault(container_key(series.labels), []).append((_present(series), series.labels.get("reason", "")))
    down: dict[ContainerKey, list[tuple[NDArray[np.float64], str]]] = {}
    for series in down_series:
        state = series.labels.get("reason", "")
        down.setdefault(container_key(series.labels), []).append((_fresh(series), state))
    out = []
    for series in merged(restart_series):
        key = container_key(series.labels)
        uid = key[3]
        new = counters.born_inside(pod_born(created or {}, key), since)
        steps = counters.increments(series.values, born=new, monotone=bool(uid))
        spacing = float(np.min(np.diff(series.times))) if len(series.times) > 1 else 0.0
        open_kill = False  # a termination seen down whose restart the count has not shown yet
        for index, at in enumerate(series.times.tolist()):
            if not np.isfinite(series.values[index]):
                continue
            shown = _shown_at(reasons.get(key, []), at)
            if not shown:
                later = [(t[(t > at) & (t <= at + spacing)], r) for t, r in reasons.get(key, [])]
                shown = {r for t, r in later if len(t)}
            step = float(steps[index])
            if step > 0 and open_kill:
                step -= 1.0  # the restart of a kill already counted when it was seen down
                open_kill = False
            if step > 0:
                out.append(Restart(at, key, 1.0, _pick(shown)))
                if step > 1:  # several restarts between two points: only the last one's reason shows
                    out.append(Restart(at, key, step - 1.0, None))
            # A point not shown down does not close an open kill: the count step and the Running state come in
            # one pod update, so only a step does; a missing point is a gap in the data, not a restart.
            states = _shown_at(down.get(key, []), at)
            if states and not open_kill:
                open_kill = True
                if index > 0 or new:  # down at the range's first point of an old pod: killed before it
                    # Terminated: its own reason; Waiting in back-off: the last terminated reason beside it.
                    reason = _pick(states - {BACK_OFF}) or _pick(shown)
                    out.append(Restart(at, key, 1.0, reason))
    return out


def pod_born(created: dict[str, float], key: ContainerKey) -> float | None:
    """The pod's creation time (kube_pod_created, `creation_times`) for a container's key, None where unknown."""
    namespace, pod, _, uid = key
    return created.get(uid) if uid else created.get(f"{namespace}/{pod}")


def creation_times(found: list[RangeSeries]) -> dict[str, float]:
    """kube_pod_created per pod: by uid, and by "namespace/pod" for series that carry no uid."""
    by_uid = counters.start_times([s for s in found if s.labels.get("uid")], ("uid",))
    by_name = counters.start_times(found, ("namespace", "pod"))
    return {key[0]: born for key, born in by_uid.items()} | {"/".join(key): born for key, born in by_name.items()}


def unseen(restart_series: Iterable[RangeSeries], since: float, created: dict[str, float]) -> list[tuple[float, float]]:
    """Spans where a pod's restart count is unknown: a series first seen after `since` whose pod is not shown
    to be created after it (kube_pod_created) was not scraped meanwhile -- a gap, not a new pod, and what its
    count did in the gap is unknown (the freshness rule of kfchaos.metrics.snapshot then holds the count
    incomplete)."""
    out = []
    for series in merged(restart_series):
        span = counters.unseen_span(series, since, pod_born(created, container_key(series.labels)))
        if span is not None:
            out.append(span)
    return out


def cadvisor_events(
    series: Iterable[RangeSeries], since: float | None = None, started: dict[tuple[str, ...], float] | None = None
) -> list[tuple[float, float]]:
    """(time, events) of cAdvisor OOM counters, differenced per container series, never across them. Only a
    cgroup whose own start time (`started`: container_start_time_seconds by CGROUP_IDENTITY) lies after `since`
    is new, counted from 0; any other series' first sample is its level (kfchaos.metrics.counters), however late
    it shows: a pod-level cgroup's count holds every OOM kill of the pod's life. Copies of one cgroup's series
    from several scrape targets are one (`merged`); a cgroup's count never resets (a new container is a new
    `id`)."""
    out = []
    for one in merged(series, CGROUP_IDENTITY):
        born = (started or {}).get(tuple(one.labels.get(k, "") for k in CGROUP_IDENTITY))
        out += counters.events(one, since, born, monotone=bool(one.labels.get("id")))
    return out


def cumulative(
    name: str,
    grid: NDArray[np.float64],
    events: Iterable[tuple[float, float]],
    query: str,
    sampled: NDArray[np.float64] | None = None,
) -> Series:
    """A never-decreasing count on `grid`: the value at t is every event at or before t. `sampled`: when the
    source series behind the count were last sampled at each grid point (kfchaos.metrics.snapshot freshness)."""
    values = np.zeros(len(grid))
    for at, count in events:
        # An event's time is a point of a range query: Prometheus's copy of a grid point, which can lie a little
        # after it (see _grid_index). It counts from that grid point, never from the next: the next can be past
        # a window's end plus its grace, and a kill at the end of a window would be lost.
        values[int(_grid_index(grid, np.array([at]))[0]) :] += count
    return Series(name, grid.copy(), values, "counter", query, "count", sampled)


def _grid_index(grid: NDArray[np.float64], times: NDArray[np.float64]) -> NDArray[np.int64]:
    """For each time, the grid point it stands for: the nearest within half a step, else the first after it.

    Prometheus evaluates a range query at whole milliseconds: it rounds `start` to the millisecond
    (prometheus/prometheus web/api/v1/api.go parseTime, `math.Round(ns*1000) / 1000`) and steps by a
    millisecond count, so its points drift from a grid of float seconds by up to half a millisecond at the
    start, more over a long range with a fractional step."""
    if not len(grid):
        return np.zeros(len(times), dtype=np.int64)
    half = (float(grid[1] - grid[0]) if len(grid) > 1 else 1.0) / 2
    after = np.clip(np.searchsorted(grid, times), 0, len(grid) - 1)
    before = np.maximum(after - 1, 0)
    nearest = np.where(np.abs(grid[before] - times) <= np.abs(grid[after] - times), before, after)
    later = np.searchsorted(grid, times - 1e-6)  # no grid point near: the first one after the time
    return np.where(np.abs(grid[nearest] - times) < half, nearest, later).astype(np.int64)


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
    back_off = scope.matchers(f'reason="{BACK_OFF}"')
    not_completed = scope.matchers(f'reason!="{COMPLETED}"')
    return {
        "restarts": f"{RESTARTS_METRIC}{{{selector}}}",
        "reasons": f"{REASON_METRIC}{{{selector}}}",
        "cadvisor": f"{CADVISOR_METRIC}{{{selector}}}",
        "cadvisor_started": f"{CADVISOR_STARTED_METRIC}{{{selector}}}",
        # timestamp(): the down states are read by their samples' own times (`_fresh`), never by a lookback.
        "terminated": f"timestamp({TERMINATED_METRIC}{{{selector}}})",
        "waiting": f"timestamp({WAITING_METRIC}{{{back_off}}})",
        # The same four for init containers, native sidecars among them (see INIT_RESTARTS_METRIC).
        "init_restarts": f"{INIT_RESTARTS_METRIC}{{{selector}}}",
        "init_reasons": f"{INIT_REASON_METRIC}{{{selector}}}",
        "init_terminated": f"timestamp({INIT_TERMINATED_METRIC}{{{not_completed}}})",
        "init_waiting": f"timestamp({INIT_WAITING_METRIC}{{{back_off}}})",
        "created": f"{CREATED_METRIC}{{{selector}}}",
        # The newest restart-count sample at each step (PromQL timestamp(): the sample's own time, not the
        # step's): where kube-state-metrics went unscraped, which the lookback would hide.
        "sampled": f"max(timestamp({RESTARTS_METRIC}{{{selector}}}))",
        # The node kernel's OOM counter, for the kills that show as a plain crash (kfchaos.metrics.nodeoom).
        **nodeoom.queries(scope),
    }


def _on_grid(grid: NDArray[np.float64], found: list[RangeSeries]) -> NDArray[np.float64]:
    """The one series of an aggregated query on `grid` (NaN where it has no point): each point at the nearest
    grid time within half a step (Prometheus evaluates at whole milliseconds, the grid need not)."""
    out = np.full(len(grid), np.nan)
    half = (float(grid[1] - grid[0]) if len(grid) > 1 else 1.0) / 2
    for one in found[:1]:
        nearest = _grid_index(grid, one.times)
        inside = np.abs(grid[np.minimum(nearest, len(grid) - 1)] - one.times) < half
        out[nearest[inside]] = one.values[inside]
    return out


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
            # Every part but cAdvisor's decides the kube-state-metrics count: without the down states a kill in
            # back-off is missed, without the sample times a gap is read as no kill.
            found[part] = []
            if part in nodeoom.PARTS:  # without them every crash stays unexplained (NODE_UNKNOWN): never a PASS
                continue
            result.errors[CADVISOR_OOM if part.startswith("cadvisor") else HOST_OOM] = f"{part}: {exc}"
    grid = np.arange(start, end + step / 2, step, dtype=np.float64)
    # Init containers (native sidecars among them) are containers of the pod: their series join the others.
    for part in ("restarts", "reasons", "terminated", "waiting"):
        found[part] = found[part] + found.pop(f"init_{part}")
    described = (
        f"{sent['restarts']} x {sent['reasons']} (and the init containers' {INIT_RESTARTS_METRIC} x "
        f"{INIT_REASON_METRIC}), increase per container series, then summed"
    )
    if found["cadvisor"]:
        started = counters.start_times(found["cadvisor_started"], CGROUP_IDENTITY)
        result.series[CADVISOR_OOM] = cumulative(
            CADVISOR_OOM,
            grid,
            cadvisor_events(found["cadvisor"], start, started),
            f"{sent['cadvisor']}, increase per series (new cgroups by {sent['cadvisor_started']})",
        )
    if HOST_OOM in result.errors:
        return result
    if not found["restarts"]:
        result.errors[HOST_OOM] = (
            f"no {RESTARTS_METRIC} series for {scope.matchers()}: is kube-state-metrics scraped? OOM kills cannot "
            f"be counted without it (cAdvisor's {CADVISOR_METRIC} loses the killed container's count)"
        )
        return result
    created = creation_times(found["created"])
    every = restarts(
        found["restarts"],
        found["reasons"],
        start,
        down_series=found["terminated"] + found["waiting"],
        created=created,
    )
    nodes = nodeoom.node_ooms(found["node_oom"], found["pod_nodes"], start, found["cgroup_version"])
    node_killed, crashes = node_crashes(every, nodes, step)
    gpu, unread = gpu_crashes(crashes, read_log)
    node_unknown = [c for c in crashes if c not in gpu and c not in unread and watched_node(c, nodes) is None]
    log_note = "previous container logs" if read_log else "no log reader: every crash unread"
    sampled = _on_grid(grid, found["sampled"])
    for low, high in unseen(found["restarts"], start, created):
        sampled[(grid > low) & (grid < high)] = np.nan  # one container unseen: the scope's count is unknown

    def events(items: list[Restart]) -> list[tuple[float, float]]:
        return [(r.time, r.count) for r in items]

    def count_of(name: str, items: list[Restart], note: str) -> Series:
        return cumulative(name, grid, events(items), note, sampled)

    result.series[HOST_OOM] = count_of(HOST_OOM, [r for r in every if r.oom_killed], described)
    result.series[CRASHES] = count_of(CRASHES, crashes, described)
    result.series[GPU_OOM] = count_of(GPU_OOM, gpu, f"{described}; {log_note}")
    result.series[UNREAD] = count_of(UNREAD, unread, f"{described}; {log_note}")
    node_note = f"{described}; crashes against {sent['node_oom']} on the node of {sent['pod_nodes']}"
    result.series[NODE_OOM] = count_of(NODE_OOM, node_killed, node_note)
    result.series[NODE_UNKNOWN] = count_of(NODE_UNKNOWN, node_unknown, node_note)
    # Left over once every death took its kill: another pod's, or a worker killed while its server lives on
    # (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH: no restart at all). Reported, never judged: the node is shared.
    left = [(t, n) for node in nodes.nodes() for t, n in nodes.rose.get(node, []) if n > 0]
    result.series[NODE_UNEXPLAINED] = cumulative(NODE_UNEXPLAINED, grid, left, f"{sent['node_oom']}, not taken")
    for node in nodes.nodes():  # recorded with the run: how a kill looks on the nodes it ran on
        version = float(nodes.cgroup.get(node, 0))
        result.series[NODE_CGROUP + node] = Series(
            NODE_CGROUP + node, grid[-1:], np.array([version]), query=sent["cgroup_version"]
        )
    return result


def watched_node(crash: Restart, nodes: nodeoom.NodeOoms) -> str | None:
    """The crash's node where its kernel OOM counter was sampled around the crash, else None."""
    namespace, pod, _, uid = crash.key
    node = nodes.node_of(namespace, pod, uid)
    return node if node is not None and nodes.covers(node, crash.time) else None


def node_crashes(every: list[Restart], nodes: nodeoom.NodeOoms, step: float) -> tuple[list[Restart], list[Restart]]:
    """(crashes that their node's kernel OOM counter explains, the other crashes): an OOM kill that reached
    kube-state-metrics without the reason OOMKilled (a global OOM, a lost TaskOOM event) is one of the first. The
    OOMKilled restarts take their kills first, in time order (each kill explains one death)."""
    killed: list[Restart] = []
    others: list[Restart] = []
    for death in sorted(every, key=lambda r: (not r.oom_killed, r.time)):
        node = watched_node(death, nodes)
        explained = node is not None and nodes.explain(node, death.time, step, death.count)
        if death.oom_killed:
            continue
        (killed if explained else others).append(death)
    return killed, others


@dataclass(frozen=True)
class OomCount:
    """OOM events in one window; `missing` says why the count is incomplete (None when it is not)."""

    host: float | None  # OOM kills (kube-state-metrics), counted when first seen: down or restarted
    cadvisor: float | None  # cAdvisor OOM events where the series survived (a lower bound)
    gpu: float  # crashes whose previous log shows CUDA out of memory
    unread: float  # crashes whose cause could not be read
    missing: str | None
    node: float = 0.0  # crashes while their node's kernel OOM-killed: a global OOM or a lost OOM event
    node_unknown: float = 0.0  # crashes on a node whose kernel OOM counter was not sampled
    node_unexplained: float = 0.0  # the kernel's kills on those nodes that no death of the target took

    @property
    def host_kills(self) -> float:
        """Host-memory OOM kills: the larger of the two sources (they count the same kills), kube-state-metrics'
        with the crashes the node's kernel counter explains (which cAdvisor may count too, never twice)."""
        return max((self.host or 0.0) + self.node, self.cadvisor or 0.0)

    @property
    def known(self) -> float:
        """Events shown for certain: host-memory OOM kills plus GPU OOM crashes."""
        return self.host_kills + self.gpu


def count(snapshot: MetricsSnapshot, start: float, end: float, grace: float) -> OomCount:
    """Events in [start, end + grace]: a kill at the end of a window shows a scrape interval later. A count
    whose source went unsampled for a while inside that span is incomplete (`missing` says where): a kill in
    the gap may never show (kfchaos.metrics.snapshot, freshness)."""
    until = end + grace

    def increase(name: str) -> float | None:
        if snapshot.missing(name):
            return None
        return snapshot.series[name].increase(start, until)

    host = increase(HOST_OOM)
    missing = snapshot.missing(HOST_OOM)
    if missing is None and host is None:
        missing = f"series {HOST_OOM} has fewer than two points around the window"
    if missing is None:
        missing = snapshot.stale(HOST_OOM, start, until)
    evidence = [snapshot.missing(n) for n in (GPU_OOM, UNREAD)]
    gpu, unread = increase(GPU_OOM), increase(UNREAD)
    if missing is None and (any(evidence) or gpu is None or unread is None):
        missing = next((e for e in evidence if e), None) or "crash-restart evidence has too few points"
    # Snapshots kept from before the node rule have neither series: their crashes were judged without it.
    node, node_unknown = increase(NODE_OOM), increase(NODE_UNKNOWN)
    unexplained = increase(NODE_UNEXPLAINED) or 0.0
    return OomCount(
        host,
        increase(CADVISOR_OOM),
        gpu or 0.0,
        unread or 0.0,
        missing,
        node or 0.0,
        node_unknown or 0.0,
        unexplained,
    )


def node_shapes(snapshot: MetricsSnapshot) -> dict[str, dict[str, object]]:
    """Per node the target's pods ran on (the NODE_CGROUP series `collect` writes): its cgroup version and what an
    OOM kill takes there, for the run's record. Read once per check, apart from `count`, which the abort rules call
    once per window."""
    return {
        name.removeprefix(NODE_CGROUP): nodeoom.kill_shape(int(series.values[-1]) or None)
        for name, series in snapshot.series.items()
        if name.startswith(NODE_CGROUP) and len(series.values)
    }
