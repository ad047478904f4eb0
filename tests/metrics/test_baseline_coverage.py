"""Baseline coverage: a week of production unless a recorded reason says otherwise, and releases excluded
whatever signal shows them -- on a real Prometheus holding four days of backfilled history.

Two namespaces, each with a one-hour release that is a spike (the P99 capped at 5 s, 20 % errors, an OOM kill)
and shows in one signal only, as kube-state-metrics exports it (kubernetes/kube-state-metrics
internal/store/pod.go `kube_pod_container_info{container,image,image_id}`, internal/store/replicaset.go
`kube_replicaset_created` = creation time, `kube_replicaset_spec_replicas`); neither has Deployment series:
- image: the container's image id changes at the release's start; old-image pods run until its end;
- replicaset: a new ReplicaSet is created at the release's start; the old one is scaled to 0 at its end;
- unscraped: no release, but kube-state-metrics unscraped for six hours.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pytest

from kfchaos.baseline import BaselineError
from kfchaos.baselinecapture import capture
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.prometheus import PrometheusClient
from kfchaos.verdict import evaluate
from tests.metrics.history import BOUNDS, NORMAL, NORMAL_ERRORS, NORMAL_P99, PER_MINUTE, SPIKE, SPIKE_ERRORS
from tests.support.prometheus import PrometheusServer, backfill
from tests.verdict.builders import experiment, records

pytestmark = pytest.mark.integration
SAMPLE = 60
STEP = 300.0
DAYS = 4
WHY = "four days since the cluster was built"


def _series(name: str, labels: str, times: np.ndarray, values: np.ndarray) -> list[str]:
    return [f"{name}{{{labels}}} {v:.3f} {t}" for t, v in zip(times, values, strict=True)]


def namespace_history(namespace: str, times: np.ndarray, release: tuple[int, int]) -> dict[str, list[str]]:
    """Sample lines per metric family for one namespace."""
    spike = (times >= release[0]) & (times < release[1])
    fractions = np.where(spike[:, None], np.array(SPIKE)[None, :], np.array(NORMAL)[None, :])
    buckets = np.cumsum(fractions * PER_MINUTE, axis=0)
    errors = np.cumsum(np.where(spike, SPIKE_ERRORS, NORMAL_ERRORS) * PER_MINUTE)
    ok = np.cumsum(np.where(spike, 1 - SPIKE_ERRORS, 1 - NORMAL_ERRORS) * PER_MINUTE)
    labels = f'namespace="{namespace}",pod="vllm-0"'
    out: dict[str, list[str]] = {"histogram": [], "http": [], "restarts": [], "reason": [], "info": [], "rs": []}
    for index, le in enumerate(BOUNDS):
        out["histogram"] += _series("vllm:e2e_request_latency_seconds_bucket", f'{labels},le="{le}"', times,
                                    buckets[:, index])  # fmt: skip
    out["histogram"] += _series("vllm:e2e_request_latency_seconds_count", labels, times, buckets[:, -1])
    out["histogram"] += _series("vllm:e2e_request_latency_seconds_sum", labels, times, buckets[:, -1] * 0.3)
    out["http"] += _series("http_requests_total", f'{labels},status="5xx"', times, errors)
    out["http"] += _series("http_requests_total", f'{labels},status="2xx"', times, ok)
    kill = np.where(times >= release[0] + 600, 1.0, 0.0)
    container = f'{labels},container="vllm",uid="u-{namespace}"'
    # "unscraped": kube-state-metrics not scraped for six hours, three days before the end (no staleness
    # marker in backfilled blocks: the lookback repeats the count before the gap).
    seen = (times < times[-1] - 3 * 86400) | (times >= times[-1] - 3 * 86400 + 6 * 3600) | (namespace != "unscraped")
    out["restarts"] += _series("kube_pod_container_status_restarts_total", container, times[seen], kill[seen])
    out["reason"] += [
        f'kube_pod_container_status_last_terminated_reason{{{container},reason="OOMKilled"}} 1 {t}'
        for t in times[kill > 0]
    ]
    if namespace == "image":
        for image, keep in (("sha256:aaa", times < release[1]), ("sha256:bbb", times >= release[0])):
            info = f'{labels},container="vllm",image="vllm/vllm-openai",image_id="{image}"'
            out["info"] += [f"kube_pod_container_info{{{info}}} 1 {t}" for t in times[keep]]
    else:
        for name, born, replicas in (
            ("vllm-6f9c", times[0] - 10 * 86400, np.where(times < release[1], 2.0, 0.0)),
            ("vllm-7d4b", release[0], np.where(times >= release[0], 2.0, 0.0)),
        ):
            shown = times >= born
            rs = f'namespace="{namespace}",replicaset="{name}"'
            out["rs"] += [f"kube_replicaset_created{{{rs}}} {born} {t}" for t in times[shown]]
            out["rs"] += [f"kube_replicaset_spec_replicas{{{rs}}} {v:g} {t}" for t, v in
                          zip(times[shown], replicas[shown], strict=True)]  # fmt: skip
    return out


def history(start: int, end: int, releases: dict[str, tuple[int, int]]) -> str:
    times = np.arange(start, end, SAMPLE)
    parts = [namespace_history(ns, times, release) for ns, release in releases.items()]
    families = (
        ("histogram", "vllm:e2e_request_latency_seconds histogram"),
        ("http", "http_requests counter"),
        ("restarts", "kube_pod_container_status_restarts counter"),
        ("reason", "kube_pod_container_status_last_terminated_reason gauge"),
        ("info", "kube_pod_container_info gauge"),
        ("rs", "kube_replicaset_created gauge"),
    )
    lines = []
    for key, declaration in families:
        body = [line for part in parts for line in part[key]]
        if key == "rs":  # two families: each under its own TYPE line
            lines += ["# TYPE kube_replicaset_created gauge"] + [x for x in body if x.startswith("kube_replicaset_c")]
            lines += ["# TYPE kube_replicaset_spec_replicas gauge"] + [x for x in body if "spec_replicas" in x]
            continue
        lines += [f"# TYPE {declaration}", *body]
    return "\n".join([*lines, "# EOF", ""])


@dataclass
class Prom:
    client: PrometheusClient
    end: datetime


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    end = int(time.time()) // 3600 * 3600 - 3600
    release = (end - 2 * 86400, end - 2 * 86400 + 3600)
    tmp = tmp_path_factory.mktemp("prom-coverage")
    before = (end - 10 * 86400, end - 10 * 86400 + 3600)  # a release long before the window: none in it
    releases = {"image": release, "replicaset": release, "unscraped": before}
    backfill(tmp / "data", history(end - DAYS * 86400 - 600, end + 60, releases))
    with PrometheusServer(tmp / "data") as server:
        yield Prom(PrometheusClient(server.url, timeout=20), datetime.fromtimestamp(end, UTC))


def test_fewer_than_seven_days_are_refused_unless_a_reason_is_recorded_and_shown(prom: Prom) -> None:
    with pytest.raises(BaselineError, match=r"capture\.days 4: a baseline stands for at least 7 days"):
        capture("x", prom.client, Scope("image"), end=prom.end, days=DAYS, step=STEP)
    baseline = capture("x", prom.client, Scope("image"), end=prom.end, days=DAYS, step=STEP, short_history=WHY)
    assert baseline.coverage is not None and baseline.coverage.override == WHY
    assert baseline.coverage.requested_days == DAYS and baseline.coverage.covered_days == pytest.approx(DAYS, abs=0.01)
    assert baseline.summary()["coverage"]["override"] == WHY
    verdict = evaluate(records(10, np.full(3000, 0.05)), experiment(stages=[10]), baseline=baseline)
    assert any(w.startswith("baseline: SHORT BASELINE: 4.00 days") and w.endswith(WHY) for w in verdict.warnings)


def test_history_shorter_than_asked_is_refused_or_recorded_loudly(prom: Prom) -> None:
    with pytest.raises(BaselineError, match=r"covers 4\.\d\d of the 7 days asked"):
        capture("x", prom.client, Scope("image"), end=prom.end, days=7, step=STEP)
    baseline = capture("x", prom.client, Scope("image"), end=prom.end, days=7, step=STEP, short_history=WHY)
    assert baseline.coverage is not None and baseline.coverage.covered_days < 4.01
    assert baseline.warnings[0].startswith("SHORT BASELINE: 4.0") and "7 asked" in baseline.warnings[0]


@pytest.mark.parametrize("namespace", ["image", "replicaset"])
def test_a_release_seen_only_as_a_new_image_or_replicaset_is_excluded(prom: Prom, namespace: str) -> None:
    kept = capture(
        "x", prom.client, Scope(namespace), end=prom.end, days=DAYS, step=STEP, short_history=WHY, release_margin=300
    )
    assert [e.source for e in kept.provenance.exclusions] == ["detected"], kept.provenance.exclusions
    assert kept.totals.oom_kills == 0
    assert kept.totals.error_rate == pytest.approx(NORMAL_ERRORS, rel=0.02)
    assert kept.series["latency_p99"].p90 == pytest.approx(NORMAL_P99, rel=1e-6)
    # The same capture blind to releases takes the spike in: the exclusion is what kept it out.
    blind = capture(
        "x", prom.client, Scope(namespace), end=prom.end, days=DAYS, step=STEP, short_history=WHY,
        detect_releases=False,
    )  # fmt: skip
    assert blind.totals.oom_kills == 1 and blind.totals.error_rate > 2 * NORMAL_ERRORS


def test_a_gap_in_kube_state_metrics_is_a_loud_undercount_of_oom_kills(prom: Prom) -> None:
    baseline = capture("x", prom.client, Scope("unscraped"), end=prom.end, days=DAYS, step=STEP, short_history=WHY)
    (note,) = [w for w in baseline.warnings if w.startswith("OOM kills undercounted")]
    assert "series oom_kills has no sample from" in note and "unknown, not zero" in note
    clean = capture("x", prom.client, Scope("image"), end=prom.end, days=DAYS, step=STEP, short_history=WHY)
    assert not [w for w in clean.warnings if w.startswith("OOM kills undercounted")]
