"""Whether a run's outcome calls for the OOM evidence bundle, and why: a FAIL or INCONCLUSIVE run with OOM
kills, crash restarts or KV-cache exhaustion in its series, or a failing OOM check. A PASS never does (and
the bundle never changes a verdict)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kfchaos.metrics import names, oom

KV_FULL = 0.99  # vllm:kv_cache_usage_perc at or above this is a full cache (1.0 = every block in use)

_COUNTS = (
    (oom.HOST_OOM, "OOM kill(s) (kube-state-metrics: restarts whose last terminated reason is OOMKilled)"),
    (oom.CADVISOR_OOM, "cAdvisor OOM event(s)"),
    (oom.CRASHES, "crash restart(s) (restarts for another reason)"),
    (oom.NODE_OOM, "crash restart(s) while the node's kernel OOM-killed (node_vmstat_oom_kill)"),
    (oom.PENDING, "container(s) OOM-killed and not yet restarted"),
)


def _rose(metrics: Any, name: str, start: float, end: float) -> float:
    if metrics is None or metrics.missing(name):
        return 0.0
    series = metrics.series[name]
    if series.kind == "counter":
        return series.increase(start, end) or 0.0
    return series.max_between(start, end) or 0.0  # per-interval counts and gauges: any point above 0


def reasons(status: str, metrics: Any, window: tuple[float, float], failing: Iterable[str] = ()) -> list[str]:
    """Why the bundle is collected ([] when it is not): `metrics` is the run's MetricsSnapshot (or None),
    `failing` the names of the failing checks."""
    if status not in ("FAIL", "INCONCLUSIVE"):
        return []
    start, end = window
    found = []
    for name, what in _COUNTS:
        count = _rose(metrics, name, start, end + (metrics.grace if metrics is not None else 0.0))
        if count > 0:
            found.append(f"{count:g} {what} during the run")
    restarts = _rose(metrics, names.RESTARTS, start, end)
    if restarts > 0 and not found:
        found.append(f"{restarts:g} container restart(s) during the run")
    kv = (
        metrics.series[names.KV_CACHE_USAGE].max_between(start, end)
        if metrics is not None and not metrics.missing(names.KV_CACHE_USAGE)
        else None
    )
    if kv is not None and kv >= KV_FULL:
        found.append(f"KV-cache usage reached {kv:.0%} (vllm:kv_cache_usage_perc)")
    preempted = _rose(metrics, names.PREEMPTIONS, start, end)
    if preempted > 0:
        found.append("vLLM preempted requests (vllm:num_preemptions_total rose): the KV cache ran out")
    oom_checks = sorted({c for c in failing if "oom" in c})
    if oom_checks:
        found.append(f"failing OOM check(s): {', '.join(oom_checks)}")
    return found
