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

A release can also show without a generation change a baseline capture sees (a Deployment recreated, a
controller other than a Deployment, a kube-state-metrics without the deployment collector), so two more
signals a cluster keeps are read (kubernetes/kube-state-metrics internal/store/pod.go, replicaset.go):
- a new image: `kube_pod_container_info{container, image_id}` for an `image_id` a container name had not
  run before; the release lasts until the last pod still running one of its older image ids is gone;
- a new ReplicaSet (a new pod-template-hash): `kube_replicaset_created` whose value (the creation time)
  falls in the window; the release lasts until every older ReplicaSet of the namespace is scaled to 0
  (`kube_replicaset_spec_replicas`), else to the end of the window.
Releases found by several signals overlap; each is excluded whole.
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
IMAGES = "kube_pod_container_info"
REPLICASET_CREATED = "kube_replicaset_created"
REPLICASET_SPEC = "kube_replicaset_spec_replicas"


@dataclass(frozen=True)
class Release:
    deployment: str
    start: float
    end: float
    reason: str


def queries(namespace: str) -> dict[str, str]:
    selector = f'{{namespace="{namespace}"}}'
    return {f"rollout.{part}": f"max by (deployment) ({metric}{selector})" for part, metric in PARTS.items()}


def other_queries(namespace: str) -> dict[str, str]:
    selector = f'{{namespace="{namespace}"}}'
    return {
        "release.images": f"max by (container, image_id) ({IMAGES}{selector})",
        "release.replicasets": f"max by (replicaset) ({REPLICASET_CREATED}{selector})",
        "release.replicaset_spec": f"max by (replicaset) ({REPLICASET_SPEC}{selector})",
    }


def _present(series: RangeSeries) -> NDArray[np.float64]:
    return series.times[np.isfinite(series.values)]


def image_releases(images: list[RangeSeries], start: float, end: float, step: float) -> list[Release]:
    """A container name running an image id it had not run before, from `start` on (see the module doc)."""
    by_container: dict[str, list[RangeSeries]] = {}
    for series in images:
        if len(_present(series)):
            by_container.setdefault(series.labels.get("container", "?"), []).append(series)
    out = []
    for container, versions in sorted(by_container.items()):
        versions.sort(key=lambda s: float(_present(s)[0]))
        for index, new in enumerate(versions):
            first = float(_present(new)[0])
            if index == 0 or first <= start + step / 2:
                continue  # running since the window's start: not a release inside it
            older = [float(_present(v)[-1]) for v in versions[:index]]
            gone = max(older)
            finish = end if gone >= end - step / 2 else max(first, gone)
            image = new.labels.get("image_id", "?")
            out.append(Release(container, first - step, finish, f"new image for container {container}: {image}"))
    return out


def replicaset_releases(
    created: list[RangeSeries], spec: list[RangeSeries], start: float, end: float, step: float
) -> list[Release]:
    """A ReplicaSet created inside the window (see the module doc)."""
    born = {s.labels.get("replicaset", "?"): float(np.nanmax(s.values)) for s in created if np.isfinite(s.values).any()}
    scaled = {s.labels.get("replicaset", "?"): s for s in spec}
    out = []
    for name, at in sorted(born.items(), key=lambda item: item[1]):
        if not start < at <= end:
            continue
        older = [scaled[r] for r, t in born.items() if t < at and r in scaled]
        finish = end
        if older:
            times = np.unique(np.concatenate([s.times for s in older]))
            times = times[times >= at]
            running = np.zeros(len(times), dtype=bool)
            for series in older:
                values = _on(times, series)
                running |= np.isfinite(values) & (values > 0)
            done = np.nonzero(~running)[0]
            if len(done):
                finish = float(times[done[0]])
        out.append(Release(name, at - step, max(at, finish), f"new ReplicaSet {name} created"))
    return out


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
    extra: dict[str, list[RangeSeries]] = {}
    for name, query in other_queries(namespace).items():
        sent[name] = query
        extra[name] = ranged(query, start, end, step)
    releases += image_releases(extra["release.images"], start, end, step)
    releases += replicaset_releases(extra["release.replicasets"], extra["release.replicaset_spec"], start, end, step)
    for name, metric in (("release.images", IMAGES), ("release.replicasets", REPLICASET_CREATED)):
        if not extra[name]:
            notes.append(f"no {metric} series in namespace {namespace}: releases it would show cannot be detected")
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
