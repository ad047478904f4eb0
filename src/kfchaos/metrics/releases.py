"""Releases found in the baseline window, each excluded whole: from its start to the end of its rollout.

How a rollout shows in kube-state-metrics' Deployment series (kubernetes/kube-state-metrics
internal/store/deployment.go), read with kubectl's own rule for "successfully rolled out" (kubernetes/kubectl
pkg/polymorphichelpers/rollout_status.go, DeploymentStatusViewer):
- it starts when `kube_deployment_status_observed_generation` changes (a new spec seen by the controller);
- it is complete when the controller has seen the latest generation (`kube_deployment_metadata_generation`
  <= observed), `kube_deployment_status_replicas_updated` >= `kube_deployment_spec_replicas`, no old replica
  is left (`kube_deployment_status_replicas` <= updated) and every updated replica is available
  (`kube_deployment_status_replicas_available` >= updated).
A vLLM replica is available only after its readiness probe passes, i.e. after it has loaded its weights, so
a rollout of large models lasts as long as those loads: hours, in which old and new replicas share the
traffic. The release window is [last sample before the generation change, first complete sample after it];
a rollout not seen completing runs to the end of the window. Where the completion series are missing, only
the generation change is known: the window is that change alone and a warning says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kfchaos.metrics.source import MetricsSource, RangeSeries

PARTS = {
    "observed": "kube_deployment_status_observed_generation",
    "generation": "kube_deployment_metadata_generation",
    "spec": "kube_deployment_spec_replicas",
    "updated": "kube_deployment_status_replicas_updated",
    "replicas": "kube_deployment_status_replicas",
    "available": "kube_deployment_status_replicas_available",
}
COMPLETION = ("spec", "updated", "replicas", "available")


@dataclass(frozen=True)
class Release:
    deployment: str
    start: float
    end: float
    reason: str


def queries(namespace: str) -> dict[str, str]:
    selector = f'{{namespace="{namespace}"}}'
    return {f"rollout.{part}": f"max by (deployment) ({metric}{selector})" for part, metric in PARTS.items()}


def _on(grid: NDArray[np.float64], series: RangeSeries | None) -> NDArray[np.float64]:
    """The series' values on `grid` (NaN where it has no point)."""
    out = np.full(len(grid), np.nan)
    if series is None:
        return out
    index = {round(float(t), 3): float(v) for t, v in zip(series.times, series.values, strict=True)}
    return np.array([index.get(round(float(t), 3), np.nan) for t in grid])


def complete(values: dict[str, NDArray[np.float64]]) -> NDArray[np.bool_]:
    """kubectl's rolled-out rule at each point (False where a series has no point)."""
    spec, updated, replicas, available = (values[p] for p in COMPLETION)
    done = (updated >= spec) & (replicas <= updated) & (available >= updated)
    generation = values.get("generation")
    if generation is not None:
        done &= ~(generation > values["observed"])  # NaN (not exported) does not hold a rollout open
    return np.asarray(done & np.all([np.isfinite(values[p]) for p in COMPLETION], axis=0))


def detect(
    source: MetricsSource, namespace: str, start: float, end: float, step: float
) -> tuple[list[Release], list[str], dict[str, str]]:
    """Releases in [start, end], warnings, and the queries sent."""
    sent = queries(namespace)
    found: dict[str, dict[str, RangeSeries]] = {}
    # A week at a short step is more than one range query may return: in pieces where the client can.
    ranged = getattr(source, "range_chunked", source.range)
    for name, query in sent.items():
        for series in ranged(query, start, end, step):
            found.setdefault(series.labels.get("deployment", "?"), {})[name.removeprefix("rollout.")] = series
    releases, notes = [], []
    for deployment, parts in sorted(found.items()):
        observed = parts.get("observed")
        if observed is None or len(observed.times) < 2:
            continue
        grid = observed.times
        values = {part: _on(grid, parts.get(part)) for part in PARTS}
        known = all(part in parts for part in COMPLETION)
        done = complete(values) if known else np.zeros(len(grid), dtype=bool)
        finite = np.isfinite(values["observed"])
        observed_values = values["observed"]
        changes = [
            i
            for i in range(1, len(grid))
            if finite[i] and finite[i - 1] and observed_values[i] != observed_values[i - 1]
        ]
        absent = ", ".join(PARTS[p] for p in COMPLETION if p not in parts)
        for i in changes:
            before, after = float(grid[i - 1]), float(grid[i])
            if not known:
                notes.append(
                    f"release of {deployment} at {after:.0f}: rollout completion unknown (no {absent}); "
                    "only the generation change is excluded"
                )
                releases.append(Release(deployment, before, after, f"generation of {deployment} changed"))
                continue
            later = np.nonzero(done[i:])[0]
            if len(later):
                finish = float(grid[i + int(later[0])])
                reason = f"rollout of {deployment}: generation changed, complete at {finish:.0f}"
            else:
                finish = end
                reason = f"rollout of {deployment}: generation changed, not seen completing before the window's end"
            releases.append(Release(deployment, before, max(after, finish), reason))
    return releases, notes, sent
