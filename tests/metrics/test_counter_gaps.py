"""Counters across a scrape gap, on a real Prometheus holding backfilled kube-state-metrics and cAdvisor history.

The series are shaped as kube-state-metrics exports them (kubernetes/kube-state-metrics internal/store/pod.go:
pod series carry namespace, pod and uid; `kube_pod_created` is the pod's creation time) and as cAdvisor does
(google/cadvisor metrics/prometheus.go: `container_oom_events_total` and `container_start_time_seconds` per
cgroup, labels namespace, pod, container, id; the pod-level cgroup has no container and counts every OOM kill in
the pod: cgroup v2 memory.events is hierarchical). Every series of a pod goes unscraped from 15 minutes before
the stage to 200 s into it (the exporters restarting): longer than the query engine's 5-minute lookback, so the
first sample in the stage's range comes after its start. Cases, one pod each, over one 10-minute stage:
- old: OOM-killed days ago (restart count 1, last terminated reason OOMKilled; its pod cgroup's OOM count 1),
  created and started days ago -> no OOM kill in the stage. Before, cAdvisor's series first seen late was taken
  as a new cgroup and its lifetime count as a kill: FAIL (exit 1) on a kill that never happened.
- bare: the same with kube-state-metrics' `kube_pod_created` not exported (a metric denylist) and three old
  restarts -> no kill either. Before, the series first seen late was taken as a new pod: its restarts new, the
  last one an OOM kill: FAIL.
- born: a pod created inside the stage whose cgroup (container_start_time_seconds inside the stage) first shows
  one OOM event -> counted (FAIL): a birth the start time proves is still counted from 0.
Neither old nor bare can PASS: what their counts did in the gap is unknown (INCONCLUSIVE, exit 2).
The vLLM request counter follows the same rule: an old server back after the gap adds its run's requests, never
its lifetime count.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from kfchaos.cli import main
from kfchaos.metrics import names
from kfchaos.metrics.collect import PROMETHEUS_ENV, snapshot_for_experiment
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.verdict.evaluate import evaluate
from kfchaos.verdict.model import Status
from tests.metrics.test_oom_live import REQUESTS, SAMPLE, STAGE, Cluster, Family
from tests.support.prometheus import PrometheusServer, backfill
from tests.verdict.builders import experiment, experiment_text, records

pytestmark = pytest.mark.integration
NS = 'namespace="serving"'
GAP = (-900.0, 200.0)  # unscraped, relative to the stage's start
LIFETIME = 1e6  # requests the old server finished before the run


def history(t0: float, end: float) -> str:
    times = np.arange(t0 - 3600, end, SAMPLE, dtype=float)
    seen = times[(times < t0 + GAP[0]) | (times >= t0 + GAP[1])]  # the gap: no sample of any of the pod's series

    def flat(value: float, shown: np.ndarray = seen) -> list[tuple[float, float]]:
        return [(float(t), value) for t in shown]

    old, bare = f'{NS},pod="old-0",uid="u-old"', f'{NS},pod="bare-0",uid="u-bare"'
    born_at = t0 + 100
    born_seen = times[times >= born_at + 20]
    born = f'{NS},pod="born-0",uid="u-born"'
    restarts = Family(
        "kube_pod_container_status_restarts_total",
        "counter",
        [
            (f'{old},container="vllm"', flat(1.0)),
            (f'{bare},container="vllm"', flat(3.0)),
            (f'{born},container="vllm"', flat(0.0, born_seen)),
        ],
    )
    reasons = Family(
        "kube_pod_container_status_last_terminated_reason",
        "gauge",
        [
            (f'{old},container="vllm",reason="OOMKilled"', flat(1.0)),
            (f'{bare},container="vllm",reason="OOMKilled"', flat(1.0)),
        ],
    )
    created = Family(
        "kube_pod_created",
        "gauge",
        [(old, flat(t0 - 86400)), (born, flat(born_at, born_seen))],  # bare-0: not exported
    )
    old_cgroup, born_cgroup = f'{NS},pod="old-0",id="/kubepods/podu-old"', f'{NS},pod="born-0",id="/kubepods/podu-born"'
    cadvisor = Family(
        "container_oom_events_total",
        "counter",
        [(old_cgroup, flat(1.0)), (born_cgroup, flat(1.0, born_seen))],
    )
    started = Family(
        "container_start_time_seconds",
        "gauge",
        [(old_cgroup, flat(t0 - 86400)), (born_cgroup, flat(born_at, born_seen))],
    )
    rate = REQUESTS / STAGE
    served = Family(
        "vllm:e2e_request_latency_seconds_count",
        "counter",
        [(f'{NS},pod="old-0"', [(t, LIFETIME + max(0.0, t - t0) * rate) for t, _ in flat(0.0)])],
    )
    families = (restarts, reasons, created, cadvisor, started, served)
    return "\n".join([line for family in families for line in family.lines()] + ["# EOF", ""])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    end = int(time.time()) // 3600 * 3600 - 3600
    t0 = float(end - 3 * 3600)
    tmp = tmp_path_factory.mktemp("prom-counter-gaps")
    backfill(tmp / "data", history(t0, end))
    with PrometheusServer(tmp / "data", scrape_interval="30s") as server:
        yield Cluster(server.url, t0)


def judged(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pod: str
) -> tuple[int, dict, MetricsSnapshot]:
    """The real `kfchaos verdict` on the stage's records and the snapshot collected from Prometheus: its exit
    code, its JSON and the snapshot."""
    monkeypatch.setenv(PROMETHEUS_ENV, cluster.url)
    window = (cluster.t0, cluster.t0 + STAGE)
    metrics = snapshot_for_experiment(
        experiment(stages=(10,)), window, step=15.0, pods=(pod,), read_log=lambda *a: None
    )
    (tmp_path / "e.yaml").write_text(experiment_text(stages=(10,)))
    pq.write_table(
        records(10, np.full(REQUESTS, 0.05), start=cluster.t0, rate=REQUESTS / STAGE), tmp_path / "r.parquet"
    )
    metrics.write(tmp_path / "m.json")
    argv = ["verdict", "--experiment", str(tmp_path / "e.yaml"), "--records", str(tmp_path / "r.parquet")]
    argv += ["--metrics", str(tmp_path / "m.json"), "--json", "--out", str(tmp_path / "verdict")]
    code = main(argv)
    return code, json.loads((tmp_path / "verdict" / "verdict.json").read_text()), metrics


def oom_of(verdict: dict) -> dict:
    return next(c for c in verdict["stages"][0]["checks"] if c["name"] == "oom_kill_rate")


@pytest.mark.parametrize("pod", ["old-0", "bare-0"])
def test_an_old_oom_kill_seen_again_after_a_gap_is_no_kill_in_the_run(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pod: str
) -> None:
    code, verdict, _ = judged(cluster, monkeypatch, tmp_path, pod)
    check = oom_of(verdict)
    # Before: 1 (old-0 through cAdvisor, bare-0 through its restarts).
    assert check["details"]["oom_kills"] == 0, check["reason"]
    assert check["status"] == Status.INCONCLUSIVE.value, check["reason"]  # the gap is unknown, never PASS
    assert "unknown, not zero" in check["reason"]
    assert verdict["status"] == "INCONCLUSIVE" and code == 2  # before: FAIL, exit 1


def test_a_cgroup_born_in_the_stage_counts_its_first_oom_event(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, verdict, _ = judged(cluster, monkeypatch, tmp_path, "born-0")
    check = oom_of(verdict)
    assert check["status"] == Status.FAIL.value, check["reason"]
    assert check["details"]["host_oom_kills_cadvisor"] == 1
    assert verdict["status"] == "FAIL" and code == 1


def test_an_old_servers_request_counter_back_after_a_gap_adds_only_what_it_served_since(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PROMETHEUS_ENV, cluster.url)
    window = (cluster.t0, cluster.t0 + STAGE)
    metrics = snapshot_for_experiment(
        experiment(stages=(10,)), window, step=15.0, pods=("old-0",), read_log=lambda *a: None
    )
    counted = metrics.series[names.SERVER_REQUESTS].increase(*window)
    assert counted is not None
    # Served after the gap: (600 - 200) s at 5 requests/s, give or take a sample; never the server's lifetime.
    assert counted == pytest.approx((STAGE - GAP[1]) * REQUESTS / STAGE, abs=2 * SAMPLE * REQUESTS / STAGE)
    check = (
        evaluate(
            records(10, np.full(REQUESTS, 0.05), start=cluster.t0, rate=REQUESTS / STAGE),
            experiment(stages=(10,)),
            metrics=metrics,
        )
        .stage(10)
        .check("metrics_window")
    )
    assert check.status is Status.INCONCLUSIVE, check.reason  # before: PASS on a million requests of its past
