"""Two days of synthetic vLLM history as OpenMetrics text, for `promtool tsdb create-blocks-from openmetrics`.

Normal minutes: 600 requests, 90 % <= 0.5 s, 98 % <= 1 s, 99.5 % <= 2 s, all <= 5 s, so every 5-minute
histogram_quantile(0.99) is exactly 1 + (0.99 - 0.98) / (0.995 - 0.98) = 1.6667 s; 0.1 % of HTTP answers are
5xx. The release window (one hour around a deployment generation change) is a spike: the P99 is capped at
5 s by the +Inf bucket, 20 % errors, one OOM kill. A baseline that excludes the window must not see any of it.
"""

from __future__ import annotations

import numpy as np

STEP = 60  # one sample a minute
PER_MINUTE = 600.0
BOUNDS = ("0.5", "1", "2", "5", "+Inf")
NORMAL = (0.90, 0.98, 0.995, 1.0, 1.0)
SPIKE = (0.30, 0.50, 0.70, 0.95, 1.0)
NORMAL_P99 = 1.0 + (0.99 - 0.98) / (0.995 - 0.98)
NORMAL_ERRORS = 0.001
SPIKE_ERRORS = 0.2
LABELS = 'namespace="serving",pod="vllm-0"'


def history(start: int, end: int, release: tuple[int, int]) -> str:
    """Samples every minute in [start, end) (epoch seconds); `release` = (start, end) of the spike."""
    times = np.arange(start, end, STEP)
    spike = (times >= release[0]) & (times < release[1])
    fractions = np.where(spike[:, None], np.array(SPIKE)[None, :], np.array(NORMAL)[None, :])
    # Counters are cumulative: the value at t counts everything up to t.
    buckets = np.cumsum(fractions * PER_MINUTE, axis=0)
    errors = np.cumsum(np.where(spike, SPIKE_ERRORS, NORMAL_ERRORS) * PER_MINUTE)
    ok = np.cumsum(np.where(spike, 1 - SPIKE_ERRORS, 1 - NORMAL_ERRORS) * PER_MINUTE)
    oom = np.where(times >= release[0] + 600, 1.0, 0.0)
    # A rollout of 2 replicas over the whole release hour, as kube-state-metrics shows it: the generation
    # changes at its start, one new replica is available after 20 min, the second (and the surge's old
    # replica gone) only at its end.
    generation = np.where(times >= release[0], 2.0, 1.0)
    rolling = (times >= release[0]) & (times < release[1])
    updated = np.where(rolling, np.where(times >= release[0] + 1200, 1.0, 0.0), 2.0)
    replicas = np.where(rolling, 3.0, 2.0)
    available = np.where(rolling, 2.0, 2.0)
    lines = ["# TYPE vllm:e2e_request_latency_seconds histogram"]
    for index, le in enumerate(BOUNDS):
        lines += [
            f'vllm:e2e_request_latency_seconds_bucket{{{LABELS},le="{le}"}} {v:.3f} {t}'
            for t, v in zip(times, buckets[:, index], strict=True)
        ]
    lines += [
        f"vllm:e2e_request_latency_seconds_count{{{LABELS}}} {v:.3f} {t}"
        for t, v in zip(times, buckets[:, -1], strict=True)
    ]
    lines += [
        f"vllm:e2e_request_latency_seconds_sum{{{LABELS}}} {v * 0.3:.3f} {t}"
        for t, v in zip(times, buckets[:, -1], strict=True)
    ]
    lines.append("# TYPE http_requests counter")
    lines += [f'http_requests_total{{{LABELS},status="5xx"}} {v:.3f} {t}' for t, v in zip(times, errors, strict=True)]
    lines += [f'http_requests_total{{{LABELS},status="2xx"}} {v:.3f} {t}' for t, v in zip(times, ok, strict=True)]
    lines.append("# TYPE container_oom_events counter")
    lines += [f"container_oom_events_total{{{LABELS}}} {v:g} {t}" for t, v in zip(times, oom, strict=True)]
    # The same kill as kube-state-metrics shows it: the restart count steps up with OOMKilled as last reason.
    container = f'{LABELS},container="vllm",uid="u-1"'
    lines.append("# TYPE kube_pod_container_status_restarts counter")
    lines += [
        f"kube_pod_container_status_restarts_total{{{container}}} {v:g} {t}" for t, v in zip(times, oom, strict=True)
    ]
    lines.append("# TYPE kube_pod_container_status_last_terminated_reason gauge")
    lines += [
        f'kube_pod_container_status_last_terminated_reason{{{container},reason="OOMKilled"}} 1 {t}'
        for t, v in zip(times, oom, strict=True)
        if v > 0
    ]
    lines.append("# TYPE kube_deployment_status_observed_generation gauge")
    lines += [
        f'kube_deployment_status_observed_generation{{namespace="serving",deployment="vllm"}} {v:g} {t}'
        for t, v in zip(times, generation, strict=True)
    ]
    deployment = 'namespace="serving",deployment="vllm"'
    for name, values in (
        ("kube_deployment_spec_replicas", np.full(len(times), 2.0)),
        ("kube_deployment_status_replicas_updated", updated),
        ("kube_deployment_status_replicas", replicas),
        ("kube_deployment_status_replicas_available", available),
        ("kube_deployment_metadata_generation", generation),
    ):
        lines.append(f"# TYPE {name} gauge")
        lines += [f"{name}{{{deployment}}} {v:g} {t}" for t, v in zip(times, values, strict=True)]
    return "\n".join([*lines, "# EOF", ""])
