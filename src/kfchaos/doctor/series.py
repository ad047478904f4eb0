"""Does Prometheus hold each catalog series for the target, with the labels the queries select on?

Each catalog query (kfchaos.metrics.catalog) is reduced to its series selectors, keeping only the
namespace/pod matchers: a healthy target has no 5xx answers or OOM kills, but it must have the series
those are counted from. Series that exist only after an event are left out:
`kube_pod_container_status_last_terminated_reason` appears only for a container that has terminated before,
and `kube_pod_container_status_terminated_reason` only while one is terminated (kube-state-metrics
docs/metrics/workload/pod-metrics.md; internal/store/pod.go emits them from the container's state); the
restart counter they are read with is checked instead.

DCGM: the exporter's own `namespace`/`pod` labels name the GPU's pod, but Prometheus renames them to
`exported_namespace`/`exported_pod` when the scrape's target labels clash (honor_labels false: Prometheus
docs, scrape_config `honor_labels`), so the catalog's `pod=~...` finds nothing. That case gets its own fix.
GPU series are only required when a target pod requests `nvidia.com/gpu`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kfchaos.doctor.model import Report, Status
from kfchaos.metrics.catalog import Scope, standard_queries
from kfchaos.metrics.prometheus import PrometheusClient
from kfchaos.metrics.source import Sample

EVENT_ONLY = {"kube_pod_container_status_last_terminated_reason", "kube_pod_container_status_terminated_reason"}
EVENT_MATCHERS = {"reason"}  # any other series the catalog selects by a termination reason: also event-only
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Series:
    metric: str
    selector: str  # namespace/pod matchers only
    gpu: bool

    @property
    def query(self) -> str:
        return f"count({self.metric}{{{self.selector}}})"


def catalog_series(scope: Scope) -> list[Series]:
    """The distinct (metric, scope matchers) pairs the standard queries read."""
    seen: dict[tuple[str, str], Series] = {}
    for query in standard_queries(scope).values():
        for metric, matchers in _SELECTOR.findall(query.promql):
            found = _MATCHER.findall(matchers)
            if metric in EVENT_ONLY or any(m[0] in EVENT_MATCHERS for m in found):
                continue
            kept = [m for m in found if m[0] in ("namespace", "pod")]
            selector = ",".join(f'{k}{op}"{v}"' for k, op, v in kept)
            seen.setdefault((metric, selector), Series(metric, selector, metric.startswith("DCGM_")))
    return sorted(seen.values(), key=lambda s: s.metric)


def _exported(selector: str) -> str:
    return re.sub(r"\b(namespace|pod)(=~|=)", r"exported_\1\2", selector)


def _count(found: list[Sample]) -> int:
    """The value of a `count(...)` answer: a whole number >= 0 (none: 0). Anything else (-7, 2.5, NaN, +Inf) is
    not what PromQL's count returns, so the server is not to be believed: ValueError, and the check is UNKNOWN."""
    if not found:
        return 0
    value = found[0].value
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise ValueError(f"count answered {value!r}, not a whole number >= 0: not a Prometheus count")
    return int(value)


def check_series(report: Report, client: PrometheusClient, scope: Scope, gpu_pods: bool) -> None:
    for series in catalog_series(scope):
        name = f"series {series.metric}"
        if series.gpu and not gpu_pods:
            continue  # no target pod requests a GPU: DCGM has nothing to report for it
        try:
            count = _count(client.instant(series.query))
            relabelled = 0
            if not count and series.gpu:
                relabelled = _count(client.instant(f"count({series.metric}{{{_exported(series.selector)}}})"))
        except Exception as exc:
            report.add(name, Status.UNKNOWN, f"Prometheus {client.url}: {str(exc)[:200]}",
                       "check spec.baseline.capture.prometheus / --prometheus")  # fmt: skip
            return
        if count:
            report.add(name, Status.PASS, f"{count} series for {{{series.selector}}}")
        elif relabelled:
            report.add(
                name,
                Status.FAIL,
                f"found only as exported_pod/exported_namespace ({relabelled} series): the queries select pod=",
                "scrape the DCGM exporter with honorLabels: true (ServiceMonitor) or relabel exported_pod to pod",
            )
        else:
            report.add(name, Status.FAIL, f"no series {series.metric}{{{series.selector}}}",
                       _source_fix(series.metric))  # fmt: skip


def _source_fix(metric: str) -> str:
    if metric.startswith("vllm:") or metric == "http_requests_total":
        return "scrape the model server's /metrics (vLLM) with namespace and pod labels"
    if metric.startswith("container_"):
        return "scrape cAdvisor (kubelet /metrics/cadvisor)"
    if metric.startswith("kube_"):
        return "install kube-state-metrics and scrape it"
    return "install the DCGM exporter and scrape it"
