"""OOM kills counted under real scraping, on a real Prometheus holding backfilled kube-state-metrics history.

The series are shaped as kube-state-metrics exports them (kubernetes/kube-state-metrics internal/store/pod.go:
every pod series carries namespace, pod and uid; `kube_pod_created` is the pod's creation time;
`..._terminated_reason` exists only while State is Terminated, `..._waiting_reason` only while Waiting,
`..._last_terminated_reason` while LastTerminationState is set). Backfilled blocks hold no staleness
markers, so a series that stops is repeated by the query engine's 5-minute lookback, as after a Prometheus
restart. Cases, one pod each, over one 10-minute stage:
- dup: two kube-state-metrics replicas scraped side by side (`instance` differs, one a scrape behind)
  show one kill -> 1, never 2;
- backoff: killed at t0+300, the kubelet moves it to Waiting (CrashLoopBackOff) a scrape later and the
  restart count steps only at t0+700, after the stage and its grace -> the kill is counted (issue 21, 3);
- before: killed before the stage, in back-off at its start, restarted inside it -> no kill in the stage;
- stopped: kube-state-metrics unscraped from t0+300 on; the lookback repeats the last count -> not PASS;
- gap: an old pod (created a day earlier) whose series is absent until t0+200 and then shows its 5
  lifetime restarts -> not 5 kills (not FAIL), and not PASS either: its count in the gap is unknown;
- new: a pod created inside the stage whose first sample already shows one OOM-killed restart -> 1 kill.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from kfchaos.metrics.collect import PROMETHEUS_ENV, snapshot_for_experiment
from kfchaos.verdict.evaluate import evaluate
from kfchaos.verdict.model import Check, Status
from tests.metrics.test_oom_live import REQUESTS, SAMPLE, STAGE, Cluster, Family, steps
from tests.support.prometheus import PrometheusServer, backfill
from tests.verdict.builders import experiment, records

pytestmark = pytest.mark.integration
C = 'namespace="serving",container="vllm"'


def _during(times: np.ndarray, low: float, high: float) -> list[tuple[float, float]]:
    return [(float(t), 1.0) for t in times if low <= t <= high]


def history(t0: float, end: float) -> str:
    times = np.arange(t0 - 1200, end, SAMPLE, dtype=float)
    never = end + 1e6
    dup = f'{C},pod="dup-0",uid="u-dup"'
    restarts = Family(
        "kube_pod_container_status_restarts_total",
        "counter",
        [
            (f'{dup},instance="10.0.0.1:8080"', steps(times, {t0 + 300: 1})),
            (f'{dup},instance="10.0.0.2:8080"', steps(times, {t0 + 315: 1})),  # one scrape behind
            (f'{C},pod="bo-0",uid="u-bo"', steps(times, {0: 2, t0 + 700: 3})),
            (f'{C},pod="pre-0",uid="u-pre"', steps(times, {0: 2, t0 + 100: 3})),
            (f'{C},pod="stop-0",uid="u-stop"', steps(times, {0: 1}, until=t0 + 300)),
            (f'{C},pod="gap-0",uid="u-gap"', [p for p in steps(times, {0: 5}) if p[0] >= t0 + 200]),
            (f'{C},pod="new-0",uid="u-new"', [p for p in steps(times, {0: 1}) if p[0] >= t0 + 210]),
        ],
    )
    reasons = Family(
        "kube_pod_container_status_last_terminated_reason",
        "gauge",
        [
            (f'{dup},instance="10.0.0.1:8080",reason="OOMKilled"', _during(times, t0 + 300, never)),
            (f'{dup},instance="10.0.0.2:8080",reason="OOMKilled"', _during(times, t0 + 315, never)),
            # From the earlier crashes, then (in back-off) the OOM kill moved here from State.
            (f'{C},pod="bo-0",uid="u-bo",reason="Error"', _during(times, 0, t0 + 300)),
            (f'{C},pod="bo-0",uid="u-bo",reason="OOMKilled"', _during(times, t0 + 315, never)),
            (f'{C},pod="pre-0",uid="u-pre",reason="OOMKilled"', _during(times, 0, never)),
            (f'{C},pod="stop-0",uid="u-stop",reason="OOMKilled"', _during(times, 0, t0 + 300)),
            (f'{C},pod="gap-0",uid="u-gap",reason="OOMKilled"', _during(times, t0 + 200, never)),
            (f'{C},pod="new-0",uid="u-new",reason="OOMKilled"', _during(times, t0 + 210, never)),
        ],
    )
    terminated = Family(
        "kube_pod_container_status_terminated_reason",
        "gauge",
        [(f'{C},pod="bo-0",uid="u-bo",reason="OOMKilled"', _during(times, t0 + 300, t0 + 300))],
    )
    waiting = Family(
        "kube_pod_container_status_waiting_reason",
        "gauge",
        [
            (f'{C},pod="bo-0",uid="u-bo",reason="CrashLoopBackOff"', _during(times, t0 + 315, t0 + 690)),
            (f'{C},pod="pre-0",uid="u-pre",reason="CrashLoopBackOff"', _during(times, t0 - 200, t0 + 90)),
        ],
    )
    created = Family(
        "kube_pod_created",
        "gauge",
        [
            (f'namespace="serving",pod="{pod}",uid="{uid}"', [(float(t), born) for t in times if t >= shown])
            for pod, uid, born, shown in (
                ("dup-0", "u-dup", t0 - 86400, 0),
                ("bo-0", "u-bo", t0 - 86400, 0),
                ("pre-0", "u-pre", t0 - 86400, 0),
                ("stop-0", "u-stop", t0 - 86400, 0),
                ("gap-0", "u-gap", t0 - 86400, t0 + 200),
                ("new-0", "u-new", t0 + 200, t0 + 210),
            )
        ],
    )
    families = (restarts, reasons, terminated, waiting, created)
    return "\n".join([line for family in families for line in family.lines()] + ["# EOF", ""])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    end = int(time.time()) // 3600 * 3600 - 3600
    t0 = float(end - 3 * 3600)
    tmp = tmp_path_factory.mktemp("prom-oom-scraping")
    backfill(tmp / "data", history(t0, end))
    with PrometheusServer(tmp / "data", scrape_interval="30s") as server:
        yield Cluster(server.url, t0)


def oom_check(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, pod: str) -> Check:
    monkeypatch.setenv(PROMETHEUS_ENV, cluster.url)
    spec = experiment(stages=(10,))
    window = (cluster.t0, cluster.t0 + STAGE)
    metrics = snapshot_for_experiment(spec, window, step=15.0, pods=(pod,), read_log=lambda *a: None)
    table = records(10, np.full(REQUESTS, 0.05), start=cluster.t0, rate=REQUESTS / STAGE)
    return evaluate(table, spec, metrics=metrics).stage(10).check("oom_kill_rate")


def test_two_kube_state_metrics_replicas_count_one_kill_once(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    check = oom_check(cluster, monkeypatch, "dup-0")
    assert check.status is Status.FAIL, check.reason
    assert check.details["host_oom_kills"] == 1


def test_a_kill_whose_restart_waits_in_back_off_is_counted(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    check = oom_check(cluster, monkeypatch, "bo-0")
    assert check.status is Status.FAIL, check.reason
    assert check.details["host_oom_kills_kube_state_metrics"] == 1


def test_a_kill_before_the_stage_restarted_inside_it_is_not_the_stages(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = oom_check(cluster, monkeypatch, "pre-0")
    assert check.status is Status.PASS, check.reason
    assert check.details["oom_kills"] == 0


def test_a_count_that_stopped_being_scraped_is_not_zero(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    check = oom_check(cluster, monkeypatch, "stop-0")
    assert check.status is Status.INCONCLUSIVE, check.reason
    assert "no sample" in check.reason and "unknown, not zero" in check.reason


def test_an_old_pod_back_after_a_gap_is_not_a_new_pod(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    check = oom_check(cluster, monkeypatch, "gap-0")
    assert check.status is Status.INCONCLUSIVE, check.reason  # not 5 kills: its lifetime restarts are history
    assert check.details["host_oom_kills"] == 0


def test_a_new_pods_first_restart_is_counted(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    check = oom_check(cluster, monkeypatch, "new-0")
    assert check.status is Status.FAIL, check.reason
    assert check.details["host_oom_kills"] == 1
