"""The Prometheus side of the bundle, around the kill: the container's memory working set against its limit,
its cgroup's OOM events, the GPU memory of its pod, and vLLM's KV-cache usage and preemptions.

Series and where they come from:
- cAdvisor (google/cadvisor metrics/prometheus.go): container_memory_working_set_bytes (what the kubelet
  compares with the limit for eviction and what the OOM killer is near), container_spec_memory_limit_bytes
  (0 without a limit), container_oom_events_total (the cgroup's memory.events oom_kill count; its series
  ends with the killed container, google/cadvisor#3015, so 0 here does not mean no kill).
- kube-state-metrics (internal/store/pod.go): kube_pod_container_resource_limits{resource="memory"}.
- dcgm-exporter: DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_FREE in MiB, per GPU; the pod using the GPU is in its
  own `pod`/`namespace` labels, which Prometheus renames to exported_pod/exported_namespace when the scrape
  target has those labels too (honor_labels false, the usual setup); both spellings are asked for.
- vLLM (vllm/v1/metrics/loggers.py): vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc before v0.9.2),
  vllm:num_preemptions_total (docs/configuration/optimization.md "Preemption": the KV cache ran out and
  running requests were preempted, recomputed later).
Every query is bounded: one range query each, at most MAX_POINTS kept per series in the bundle.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kfchaos.evidence.model import Item
from kfchaos.metrics import counters, nodeoom, oom
from kfchaos.metrics.catalog import Scope, promql_string
from kfchaos.metrics.source import MetricsSource, RangeSeries

MAX_POINTS = 240  # per series kept in the bundle (the plot needs no more; the file stays small)
NEAR_LIMIT = 0.9
GPU_FULL = 0.95
KV_FULL = 0.99
GIB = float(1 << 30)


def _selector(namespace: str, pod: str, container: str | None = None, prefix: str = "") -> str:
    # The pod and container come from the API server's and Prometheus' answers: quoted as PromQL strings, so that
    # no value can end its string and add to the query.
    parts = [f"{prefix}namespace={promql_string(namespace)}", f"{prefix}pod={promql_string(pod)}"]
    if container:
        parts.append(f"{prefix}container={promql_string(container)}")
    return ",".join(parts)


def _points(series: RangeSeries) -> list[list[float]]:
    """[time, value] pairs, thinned evenly to MAX_POINTS, non-finite values dropped."""
    keep = np.isfinite(series.values)
    times, values = series.times[keep], series.values[keep]
    if len(times) > MAX_POINTS:
        index = np.linspace(0, len(times) - 1, MAX_POINTS).round().astype(int)
        times, values = times[index], values[index]
    return [[float(t), float(v)] for t, v in zip(times, values, strict=True)]


def _peak(series: list[RangeSeries]) -> tuple[float, float] | None:
    """(time, value) of the highest finite point over the series."""
    best: tuple[float, float] | None = None
    for one in series:
        keep = np.isfinite(one.values)
        if not keep.any():
            continue
        index = int(np.argmax(np.where(keep, one.values, -np.inf)))
        if best is None or one.values[index] > best[1]:
            best = (float(one.times[index]), float(one.values[index]))
    return best


def _at(kill: float | None, t: float) -> str:
    # The kill's time is when kube-state-metrics showed the restart: a restart delay and a scrape after it.
    return f" ({t - kill:+.0f} s from the restart)" if kill is not None else ""


def memory(source: MetricsSource, namespace: str, pod: str, container: str, window: tuple[float, float],
           step: float, kill: float | None) -> Item:  # fmt: skip
    item = Item("memory", "Container memory working set against its limit", f"{namespace}/{pod}/{container}")
    sel = _selector(namespace, pod, container)
    working = f"max(container_memory_working_set_bytes{{{sel}}})"
    limits = (
        f'max(kube_pod_container_resource_limits{{{sel},resource="memory"}})',
        f"max(container_spec_memory_limit_bytes{{{sel}}} > 0)",
    )
    used = source.range(working, *window, step)
    if not used:
        return item.skipped(f"series absent: no container_memory_working_set_bytes for {sel} (is cAdvisor scraped?)",
                            f"Prometheus {source.url}: {working}")  # fmt: skip
    limit_query, limit = limits[0], None
    for query in limits:
        found = _peak(source.range(query, *window, step))
        if found is not None:
            limit_query, limit = query, found[1]
            break
    peak = _peak(used)
    if peak is None:
        return item.skipped(f"series {working} has no finite points in the window", f"Prometheus {source.url}")
    data: dict[str, Any] = {
        "working_set_bytes": _points(used[0]),
        "limit_bytes": limit,
        "queries": [working, limit_query],
    }
    shows = f"peak working set {peak[1] / GIB:.2f} GiB{_at(kill, peak[0])}"
    findings: dict[str, bool] = {}
    if limit:
        ratio = peak[1] / limit
        data["peak_ratio"] = ratio
        shows += f" = {ratio:.0%} of the {limit / GIB:.2f} GiB limit"
        findings["working_set_near_limit"] = ratio >= NEAR_LIMIT
    else:
        shows += "; no memory limit series (kube_pod_container_resource_limits / container_spec_memory_limit_bytes)"
    if kill is not None:
        shows += "; scrapes can miss the peak that triggered a kill (memory can pass the limit between two)"
    return item.got(f"Prometheus {source.url}: {working} vs {limit_query}", shows, data, findings)


def cgroup_oom_events(source: MetricsSource, namespace: str, pod: str, container: str,
                      window: tuple[float, float], step: float) -> Item:  # fmt: skip
    item = Item("cgroup-oom-events", "cgroup OOM events (cAdvisor, memory.events oom_kill)",
                f"{namespace}/{pod}/{container}")  # fmt: skip
    query = f"{oom.CADVISOR_METRIC}{{{_selector(namespace, pod, container)}}}"
    series = source.range(query, *window, step)
    if not series:
        return item.skipped(f"series absent: no {oom.CADVISOR_METRIC} for this container (is cAdvisor scraped?)",
                            f"Prometheus {source.url}: {query}")  # fmt: skip
    started_query = f"{oom.CADVISOR_STARTED_METRIC}{{{_selector(namespace, pod, container)}}}"
    started = counters.start_times(source.range(started_query, *window, step), oom.CGROUP_IDENTITY)
    events = oom.cadvisor_events(series, window[0], started)
    count = sum(n for _, n in events)
    shows = f"{count:g} OOM event(s) in {len(series)} cgroup series"
    if not count:
        shows += " (a killed container's series ends with its cgroup, google/cadvisor#3015: 0 is not proof of none)"
    data = {"events": [[t, n] for t, n in events], "series": len(series), "query": query}
    return item.got(f"Prometheus {source.url}: {query}", shows, data, {"cgroup_oom_events": count > 0})


def node_oom_kills(source: MetricsSource, namespace: str, pod: str, window: tuple[float, float],
                   step: float) -> Item:  # fmt: skip
    """The kills the kernel of the pod's node counted around the kill (kfchaos.metrics.nodeoom): a global OOM or a
    lost OOM event shows only here, and the node's cgroup version says what a kill takes there."""
    title = "The node kernel's OOM kills (node-exporter node_vmstat_oom_kill)"
    item = Item("node-oom-kills", title, f"{namespace}/{pod}")
    queries = nodeoom.queries(Scope(namespace, (pod,)))
    found = {part: source.range(query, *window, step) for part, query in queries.items()}
    nodes = nodeoom.node_ooms(found["node_oom"], found["pod_nodes"], window[0], found["cgroup_version"])
    where = f"Prometheus {source.url}: {queries['node_oom']}"
    node = next(iter(nodes.nodes()), None)
    if node is None:
        return item.skipped(f"no {nodeoom.POD_INFO_METRIC}{{node}} for the pod (is kube-state-metrics scraped?)", where)
    if node not in nodes.sampled:
        return item.skipped(f"no {nodeoom.NODE_OOM_METRIC} for node {node} (is node-exporter scraped?)", where)
    kills = [[t, n] for t, n in nodes.rose.get(node, [])]
    count = sum(n for _, n in kills)
    shape = nodeoom.kill_shape(nodes.cgroup.get(node))
    shows = f"node {node}: {count:g} OOM kill(s) by its kernel; a kill there takes {shape['oom_kill_takes']}"
    data = {"node": node, "kills": kills, **shape, "query": queries["node_oom"]}
    return item.got(where, shows, data, {"node_oom_kills": count > 0})


def gpu_memory(source: MetricsSource, namespace: str, pod: str, window: tuple[float, float], step: float,
               kill: float | None) -> Item:  # fmt: skip
    item = Item("gpu-memory", "GPU framebuffer used and free (DCGM)", f"{namespace}/{pod}")
    tried = []
    for prefix in ("exported_", ""):
        sel = _selector(namespace, pod, prefix=prefix)
        used_q, free_q = f"sum(DCGM_FI_DEV_FB_USED{{{sel}}})", f"sum(DCGM_FI_DEV_FB_FREE{{{sel}}})"
        tried.append(used_q)
        used = source.range(used_q, *window, step)
        if not used:
            continue
        free = source.range(free_q, *window, step)
        peak = _peak(used)
        if peak is None:
            continue
        data: dict[str, Any] = {"fb_used_mib": _points(used[0]), "fb_free_mib": _points(free[0]) if free else None}
        shows = f"peak {peak[1]:.0f} MiB used{_at(kill, peak[0])}"
        findings: dict[str, bool] = {}
        if free:
            at = np.argmin(np.abs(free[0].times - peak[0]))
            total = peak[1] + float(free[0].values[at])
            if total > 0 and np.isfinite(total):
                findings["gpu_memory_full"] = peak[1] / total >= GPU_FULL
                shows += f" of {total:.0f} MiB ({peak[1] / total:.0%})"
        shows += "; vLLM preallocates --gpu-memory-utilization, so a flat high line is normal"
        return item.got(f"Prometheus {source.url}: {used_q}, {free_q}", shows, data, findings)
    return item.skipped(f"series absent: no DCGM_FI_DEV_FB_USED for pod {pod} (is dcgm-exporter scraped, with its "
                        "Kubernetes pod mapping on?)", f"Prometheus {source.url}: {' or '.join(tried)}")  # fmt: skip


def kv_cache(source: MetricsSource, namespace: str, pod: str, window: tuple[float, float], step: float,
             kill: float | None) -> Item:  # fmt: skip
    item = Item("kv-cache", "vLLM KV-cache usage and preemptions", f"{namespace}/{pod}")
    sel = _selector(namespace, pod)
    usage_q = f"max(vllm:kv_cache_usage_perc{{{sel}}})"
    usage = source.range(usage_q, *window, step)
    if not usage:
        usage_q = f"max(vllm:gpu_cache_usage_perc{{{sel}}})"  # the name before vLLM v0.9.2
        usage = source.range(usage_q, *window, step)
    preempt_q = f"vllm:num_preemptions_total{{{sel}}}"
    preemptions = source.range(preempt_q, *window, step)
    if not usage and not preemptions:
        return item.skipped("series absent: neither vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc) nor "
                            f"vllm:num_preemptions_total for pod {pod} (is vLLM's /metrics scraped?)",
                            f"Prometheus {source.url}: {usage_q}, {preempt_q}")  # fmt: skip
    data: dict[str, Any] = {"queries": [usage_q, preempt_q]}
    parts, findings = [], {}
    peak = _peak(usage)
    if usage and peak is not None:
        data["usage"] = _points(usage[0])
        parts.append(f"peak KV-cache usage {peak[1]:.0%}{_at(kill, peak[0])}")
        findings["kv_cache_full"] = peak[1] >= KV_FULL
    if preemptions:
        count = sum(n for one in preemptions for _, n in counters.events(one, window[0]))  # per series, then summed
        data["preemptions"] = count
        parts.append(f"{count:g} preemption(s)")
        findings["preemptions"] = count > 0
    return item.got(f"Prometheus {source.url}: {usage_q}, {preempt_q}", "; ".join(parts), data, findings)
