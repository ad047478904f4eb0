"""The standard series for an LLM serving target, as PromQL scoped to the experiment's namespace and pods.

Names are the snapshot keys (kfchaos.metrics.names). Latency P99s follow the Prometheus docs: aggregate the
bucket rates with `sum by (le)` first, then `histogram_quantile` -- never average quantiles. Metric names
are those of vLLM V1, cAdvisor, kube-state-metrics and the DCGM exporter (research/verdict_anchors.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from kfchaos.metrics import names
from kfchaos.units import format_duration

Kind = Literal["counter", "gauge", "quantile", "rate"]


def promql_string(value: str) -> str:
    """`value` as a PromQL string literal: double-quoted, with Go's escapes for the backslash, the quote and control
    characters (Prometheus docs, querying/basics.md: string literals follow Go's escaping rules)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(c if " " <= c != "\x7f" else f"\\x{ord(c):02x}" for c in escaped)
    return f'"{escaped}"'


# Kubernetes object names (apimachinery validation: a namespace is a DNS-1123 label, a pod a DNS-1123 subdomain).
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_POD = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclass(frozen=True)
class Scope:
    """Which series belong to the target: a namespace and, optionally, the pods by name. Both reach PromQL label
    matchers, and come from outside (an experiment, `--pod`, the Kubernetes API's pod list): each must be a
    Kubernetes name, or ValueError names it, so that no quote, brace or `or` can change what a query selects."""

    namespace: str
    pods: tuple[str, ...] = ()
    # The target's model (vLLM's `model_name` label): vLLM's series are kept to it, so a namespace serving several
    # models is not read as one (kube-state-metrics' and cAdvisor's series have no model label).
    model: str | None = None

    def __post_init__(self) -> None:
        if not _NAMESPACE.fullmatch(self.namespace):
            raise ValueError(f"namespace {self.namespace!r} is not a Kubernetes namespace name (a DNS label)")
        for pod in self.pods:
            if not _POD.fullmatch(pod):
                raise ValueError(f"pod {pod!r} is not a Kubernetes pod name (a DNS subdomain)")

    def matchers(self, *extra: str) -> str:
        parts = [f'namespace="{self.namespace}"']
        if self.pods:
            # A regex inside a PromQL string literal: escape for the regex, then double every backslash
            # for the string (`a.b` -> regex `a\.b` -> PromQL "a\\.b").
            regex = "|".join(re.escape(p) for p in self.pods).replace("\\", "\\\\")
            parts.append(f'pod=~"{regex}"')
        return ",".join([*parts, *extra])

    def vllm_matchers(self, *extra: str) -> str:
        """The matchers for vLLM's own series: the scope's, and the model when the scope names one."""
        model = [f'model_name="{_promql_string(self.model)}"'] if self.model else []
        return self.matchers(*model, *extra)


def _promql_string(text: str) -> str:
    """Text inside a PromQL double-quoted string (backslash and quote escaped)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class CatalogQuery:
    name: str
    promql: str
    kind: Kind
    unit: str
    help: str


def _histogram_p99(metric: str, selector: str, window: str) -> str:
    return f"histogram_quantile(0.99, sum by (le) (rate({metric}_bucket{{{selector}}}[{window}])))"


def standard_queries(scope: Scope, window: float = 300.0, step: float | None = None) -> dict[str, CatalogQuery]:
    """Every standard query. `window` is the rate/increase range: the step of a range query, or the stage.
    `step` (default `window`) is the range query's step: a floor series reads exactly one step's range, so a
    point says nothing about the time before its own step (kfchaos.verdict.abortstorm relies on it)."""
    w = format_duration(window)
    one_step = format_duration(step if step is not None else window)
    sel = scope.vllm_matchers()  # vLLM's own series: the target's model only (Scope.model)
    pods = scope.matchers()  # kube-state-metrics', cAdvisor's, DCGM's and the HTTP server's: no model label
    errors_sel = scope.matchers('status=~"5.."')  # vLLM's instrumentator groups codes: "5xx"
    oom_sel = scope.matchers('reason="OOMKilled"')
    queries = [
        CatalogQuery(
            "latency_p99",
            _histogram_p99("vllm:e2e_request_latency_seconds", sel, w),
            "quantile",
            "s",
            "end-to-end request latency P99 (vLLM histogram)",
        ),
        CatalogQuery(
            "ttft_p99",
            _histogram_p99("vllm:time_to_first_token_seconds", sel, w),
            "quantile",
            "s",
            "time to first token P99",
        ),
        CatalogQuery(
            "itl_p99",
            _histogram_p99("vllm:inter_token_latency_seconds", sel, w),
            "quantile",
            "s",
            "inter-token latency P99 (replaces time_per_output_token, deprecated in vLLM 0.11)",
        ),
        CatalogQuery(
            "requests",
            f"sum(increase(vllm:e2e_request_latency_seconds_count{{{sel}}}[{w}]))",
            "rate",
            "count",
            "requests finished in each interval",
        ),
        CatalogQuery(
            "errors",
            f"sum(increase(http_requests_total{{{errors_sel}}}[{w}]))",
            "rate",
            "count",
            "HTTP 5xx answers of the OpenAI-compatible server in each interval",
        ),
        CatalogQuery(
            names.REQUESTS_RUNNING,
            f"sum(vllm:num_requests_running{{{sel}}})",
            "gauge",
            "count",
            "requests running on the engine",
        ),
        CatalogQuery(
            names.REQUESTS_WAITING,
            f"sum(vllm:num_requests_waiting{{{sel}}})",
            "gauge",
            "count",
            "requests queued",
        ),
        CatalogQuery(
            names.PREEMPTIONS,
            f"sum(increase(vllm:num_preemptions_total{{{sel}}}[{w}]))",
            "rate",
            "count",
            "preemptions in each interval: the KV cache was full (increase per series, then summed)",
        ),
        CatalogQuery(
            names.KV_CACHE_USAGE,
            # The highest value in each step's range, not the one sample at the step: a burst fills the cache for
            # seconds, between two steps of a run's snapshot (Prometheus docs, querying/functions.md
            # "max_over_time"). The rise still shows at the first step after it.
            f"max(max_over_time(vllm:kv_cache_usage_perc{{{sel}}}[{w}]))",
            "gauge",
            "fraction",
            "KV-cache usage 0..1 (vllm:gpu_cache_usage_perc before 0.9.2)",
        ),
        CatalogQuery(
            names.KV_CACHE_FLOOR,
            # The lowest value in each step's own range (Prometheus docs, querying/functions.md "min_over_time"):
            # the peak series above cannot give a floor (its range reaches back a minute, so a storm's peak
            # stays in it long after the blocks were freed), and a floor is what tells a leak from load.
            f"max(min_over_time(vllm:kv_cache_usage_perc{{{sel}}}[{one_step}]))",
            "gauge",
            "fraction",
            "lowest KV-cache usage 0..1 in each step (the client-abort-storm check's floor)",
        ),
        CatalogQuery(
            names.PREFIX_CACHE_HIT_RATE,
            # vLLM v1 counts prompt tokens looked up in / found in the prefix cache (vllm-project/vllm
            # docs/design/metrics.md: vllm:prefix_cache_queries, vllm:prefix_cache_hits, "in terms of number of
            # queried/cached tokens"); their ratio per interval is the hit rate, empty
            # when no prompt arrived (0/0) rather than a made-up 0 or 1.
            f"sum(increase(vllm:prefix_cache_hits_total{{{sel}}}[{w}]))"
            f" / sum(increase(vllm:prefix_cache_queries_total{{{sel}}}[{w}]))",
            "gauge",
            "fraction",
            "prefix-cache hit rate 0..1: prompt tokens found in the cache over tokens looked up, per interval",
        ),
        CatalogQuery(
            names.OOM_KILLS,
            # Restarts whose last terminated reason is OOMKilled (kube-state-metrics; see kfchaos.metrics.oom):
            # increase() per container series first, then the sum, so a pod that disappears subtracts nothing.
            f"sum(increase(kube_pod_container_status_restarts_total{{{pods}}}[{w}])"
            f" * on (namespace, pod, container) group_left()"
            f" max by (namespace, pod, container) (kube_pod_container_status_last_terminated_reason{{{oom_sel}}}))",
            "rate",
            "count",
            "OOM kills in each interval: restarts whose last terminated reason is OOMKilled (kube-state-metrics)",
        ),
        CatalogQuery(
            "oom_kills_cadvisor",
            f"sum(increase(container_oom_events_total{{{pods}}}[{w}]))",
            "rate",
            "count",
            "cAdvisor OOM events in each interval (lost when the killed container's series ends: google/cadvisor#3015)",
        ),
        CatalogQuery(
            "oom_terminated_containers",
            f"sum(kube_pod_container_status_terminated_reason{{{oom_sel}}})",
            "gauge",
            "count",
            "containers terminated by an OOM kill and not yet restarted (kube-state-metrics; the kubelet counts "
            "the restart only when it starts the next container, after its back-off)",
        ),
        CatalogQuery(
            names.RESTARTS,
            # Init containers too (native sidecars among them): kube-state-metrics exports them as a family of
            # their own (internal/store/pod.go, kube_pod_init_container_status_restarts_total).
            f'sum(increase({{__name__=~"kube_pod_container_status_restarts_total|'
            f'kube_pod_init_container_status_restarts_total",{pods}}}[{w}]))',
            "rate",
            "count",
            "container restarts in each interval, init containers included (kube-state-metrics, increase per series, "
            "then summed)",
        ),
        CatalogQuery(
            names.GPU_MEMORY_USED,
            f"sum(DCGM_FI_DEV_FB_USED{{{pods}}})",
            "gauge",
            "MiB",
            "GPU framebuffer used",
        ),
        CatalogQuery(
            names.GPU_MEMORY_FREE,
            f"sum(DCGM_FI_DEV_FB_FREE{{{pods}}})",
            "gauge",
            "MiB",
            "GPU framebuffer free",
        ),
        CatalogQuery(names.GPU_UTIL, f"avg(DCGM_FI_DEV_GPU_UTIL{{{pods}}})", "gauge", "%", "GPU utilization"),
        CatalogQuery(
            "deployment_generation",
            f'max by (deployment) (kube_deployment_status_observed_generation{{namespace="{scope.namespace}"}})',
            "gauge",
            "count",
            "observed generation per deployment: a change marks a release",
        ),
    ]
    return {q.name: q for q in queries}


_NAME = re.compile(r"^[a-z][a-z0-9_:]*$")


def with_user_queries(
    catalog: dict[str, CatalogQuery], user: dict[str, str], kind: Kind = "gauge"
) -> dict[str, CatalogQuery]:
    """The catalog plus queries the user adds (NAME=PROMQL); a user query may replace a standard one."""
    out = dict(catalog)
    for name, promql in user.items():
        if not _NAME.match(name):
            raise ValueError(f"query name {name!r}: use lower-case letters, digits, '_' and ':'")
        if not promql.strip():
            raise ValueError(f"query {name!r} is empty")
        out[name] = CatalogQuery(name, promql, kind, "", "user query")
    return out
