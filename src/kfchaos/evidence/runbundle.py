"""The bundle for one run, from its experiment, verdict status and metrics: what the concluding step calls
(kfchaos.steps.seams.evidence_bundle). Where the pod API and Prometheus are found is the environment's: the
demo's supervisor under the local fault backend (chosen by kfchaos.steps.seams, which picks the backend), else
the cluster (in-cluster config or kubeconfig), and the run's Prometheus (kfchaos.metrics.collect.prometheus_url)."""

from __future__ import annotations

from typing import Any

from kfchaos.evidence.collect import Kill, Options, collect, killed_containers
from kfchaos.evidence.kube import KubeReader, Unavailable
from kfchaos.evidence.trigger import reasons
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.source import MetricsSource
from kfchaos.spec import Experiment

SCRAPE_SLACK = 60.0  # a kill at the end of the run shows a scrape or two later (kfchaos.metrics.collect)


def kube_reader() -> tuple[KubeReader | None, str]:
    """(the cluster's reader, why there is none). The demo's reader under the local fault backend is chosen
    where the backend is, kfchaos.steps.seams.kube_reader, and passed in as `kube`."""
    from kfchaos.evidence.kube import ClusterKube

    cluster = ClusterKube.from_environment()
    return cluster, "" if cluster else "no Kubernetes API configured (no in-cluster config, no kubeconfig)"


def metrics_source(experiment: Experiment) -> tuple[MetricsSource | None, str]:
    from kfchaos.metrics.collect import PROMETHEUS_ENV, prometheus_url
    from kfchaos.metrics.prometheus import PrometheusClient

    url = prometheus_url(experiment)
    if not url:
        return None, f"no Prometheus configured (set {PROMETHEUS_ENV} or spec.baseline.capture.prometheus)"
    return PrometheusClient(url, timeout=5.0, retries=1), ""


def for_run(
    experiment: Experiment,
    status: str,
    metrics: Any,
    window: tuple[float, float],
    failing: list[str] | None = None,
    *,
    kube: tuple[KubeReader | None, str] | None = None,
    source: tuple[MetricsSource | None, str] | None = None,
) -> dict[str, Any] | None:
    """The bundle's JSON, or None when the outcome does not call for one. Never raises."""
    trigger = reasons(status, metrics, window, failing or [])
    if not trigger:
        return None
    kube_reader_, kube_why = kube if kube is not None else kube_reader()
    source_, source_why = source if source is not None else metrics_source(experiment)
    namespace = experiment.spec.target.namespace
    span = (window[0], window[1] + SCRAPE_SLACK)
    kills: list[Kill] = []
    notes = []
    if source_ is not None:
        try:
            kills = killed_containers(source_, Scope(namespace), span, max(1.0, (span[1] - span[0]) / 1000))
        except Exception as exc:  # the bundle still lists what it could not read
            notes.append(f"restarts unreadable from Prometheus: {type(exc).__name__}: {str(exc)[:200]}")
    pods: list[str] = []
    if not kills and kube_reader_ is not None:
        from kfchaos.faults.render import pod_selector
        from kfchaos.faults.selectors import label_selector

        try:
            pods = kube_reader_.pods(
                namespace, label_selector(pod_selector(namespace, experiment.spec.target.selector))
            )
        except Unavailable as exc:
            notes.append(f"target pods unreadable: {exc}")
    evidence = experiment.spec.evidence
    options = Options(exec_nvidia_smi=evidence.exec_nvidia_smi, log_tail_lines=evidence.log_tail_lines)
    bundle = collect(trigger=trigger, namespace=namespace, window=span, kube=kube_reader_, kube_why_not=kube_why,
                     source=source_, source_why_not=source_why, kills=kills, pods=pods, options=options)  # fmt: skip
    bundle.notes = notes + bundle.notes
    return bundle.to_dict()
