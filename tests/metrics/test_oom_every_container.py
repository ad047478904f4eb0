"""Issue 31 class 5: OOM kills count for every container of the target's pods, read from kube-state-metrics'
series (kubernetes/kube-state-metrics internal/store/pod.go) backfilled into a real Prometheus with promtool and
judged through `snapshot_for_experiment` + `evaluate` over one 10-minute stage:

- init: an init container OOM-killed and restarted (kube_pod_init_container_status_restarts_total with
  ..._last_terminated_reason OOMKilled) -> FAIL;
- sidecar: a native sidecar (an init container with restartPolicy Always, kube_pod_init_container_info
  restart_policy="Always") OOM-killed and restarted -> FAIL;
- down: a native sidecar killed near the stage's end, still in back-off (init waiting_reason CrashLoopBackOff
  with the last terminated reason OOMKilled, its restart not counted yet) -> FAIL;
- classic: a classic sidecar (a second regular container) OOM-killed -> FAIL;
- replica: a replica created during the run (kube_pod_created inside the stage) whose init container was
  OOM-killed -> FAIL;
- settled: a pod whose init container ran to completion (terminated reason Completed for the pod's whole life,
  no restart), old or created during the run -> PASS, not a kill and not a crash.

What a real cluster test would add (tests/cluster): the kubelet and kube-state-metrics producing these series
from a real pod spec (restartPolicy Always on an init container, the back-off timing), not the series as
kube-state-metrics documents them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from kfchaos.metrics.collect import PROMETHEUS_ENV, snapshot_for_experiment
from kfchaos.verdict.evaluate import evaluate
from kfchaos.verdict.model import Status
from tests.metrics.test_oom_live import REQUESTS, SAMPLE, STAGE, Cluster, Family, steps
from tests.support.prometheus import PrometheusServer, backfill
from tests.verdict.builders import experiment, records

pytestmark = pytest.mark.integration


def _on(times: np.ndarray, since: float, until: float | None = None) -> list[tuple[float, float]]:
    return [(float(t), 1.0) for t in times if t >= since and (until is None or t <= until)]


def history(t0: float, end: float) -> str:
    times = np.arange(t0 - 1200, end, SAMPLE, dtype=float)
    ns = 'namespace="serving"'
    kill = t0 + 300
    late = t0 + STAGE - 20  # killed 20 s before the stage's end, restart after a back-off past it
    born = t0 + 120  # the replica created during the run
    new_times = times[times >= born]

    def pod(name: str, uid: str, container: str) -> str:
        return f'{ns},pod="{name}",uid="{uid}",container="{container}"'

    restarts = Family(
        "kube_pod_container_status_restarts_total",
        "counter",
        [
            (pod("init-0", "u-init", "vllm"), steps(times, {})),
            (pod("side-0", "u-side", "vllm"), steps(times, {})),
            (pod("down-0", "u-down", "vllm"), steps(times, {})),
            (pod("classic-0", "u-classic", "vllm"), steps(times, {})),
            (pod("classic-0", "u-classic", "envoy"), steps(times, {kill: 1})),
            (pod("replica-1", "u-replica", "vllm"), [(float(t), 0.0) for t in new_times]),
            (pod("settled-0", "u-settled", "vllm"), steps(times, {})),
            (pod("settled-1", "u-settled1", "vllm"), [(float(t), 0.0) for t in new_times]),
        ],
    )
    init_restarts = Family(
        "kube_pod_init_container_status_restarts_total",
        "counter",
        [
            (pod("init-0", "u-init", "download"), steps(times, {kill: 1})),
            (pod("side-0", "u-side", "proxy"), steps(times, {kill: 1})),
            (pod("down-0", "u-down", "proxy"), steps(times, {})),
            (pod("replica-1", "u-replica", "download"), [(float(t), 1.0 if t >= kill else 0.0) for t in new_times]),
            (pod("settled-0", "u-settled", "setup"), steps(times, {})),
            (pod("settled-1", "u-settled1", "setup"), [(float(t), 0.0) for t in new_times]),
        ],
    )
    init_reasons = Family(
        "kube_pod_init_container_status_last_terminated_reason",
        "gauge",
        [
            (pod("init-0", "u-init", "download") + ',reason="OOMKilled"', _on(times, kill)),
            (pod("side-0", "u-side", "proxy") + ',reason="OOMKilled"', _on(times, kill)),
            (pod("down-0", "u-down", "proxy") + ',reason="OOMKilled"', _on(times, late)),
            (pod("replica-1", "u-replica", "download") + ',reason="OOMKilled"', _on(times, kill)),
        ],
    )
    reasons = Family(
        "kube_pod_container_status_last_terminated_reason",
        "gauge",
        [(pod("classic-0", "u-classic", "envoy") + ',reason="OOMKilled"', _on(times, kill))],
    )
    init_terminated = Family(
        "kube_pod_init_container_status_terminated_reason",
        "gauge",
        # A normal init container: Terminated, reason Completed, for its pod's whole life (and the replica's before
        # its kill: it had not run yet, so nothing).
        [
            (pod("settled-0", "u-settled", "setup") + ',reason="Completed"', _on(times, times[0])),
            (pod("settled-1", "u-settled1", "setup") + ',reason="Completed"', _on(times, born)),
        ],
    )
    init_waiting = Family(
        "kube_pod_init_container_status_waiting_reason",
        "gauge",
        [(pod("down-0", "u-down", "proxy") + ',reason="CrashLoopBackOff"', _on(times, late))],
    )
    info = Family(
        "kube_pod_init_container_info",
        "gauge",
        [
            (pod("side-0", "u-side", "proxy") + ',restart_policy="Always"', _on(times, times[0])),
            (pod("down-0", "u-down", "proxy") + ',restart_policy="Always"', _on(times, times[0])),
            (pod("init-0", "u-init", "download") + ',restart_policy=""', _on(times, times[0])),
        ],
    )
    created = Family(
        "kube_pod_created",
        "gauge",
        [(f'{ns},pod="replica-1",uid="u-replica"', [(float(t), float(born)) for t in new_times])]
        + [(f'{ns},pod="settled-1",uid="u-settled1"', [(float(t), float(born)) for t in new_times])]
        + [
            (f'{ns},pod="{name}",uid="{uid}"', [(float(t), float(t0 - 86400)) for t in times])
            for name, uid in (
                ("init-0", "u-init"),
                ("side-0", "u-side"),
                ("down-0", "u-down"),
                ("classic-0", "u-classic"),
                ("settled-0", "u-settled"),
            )
        ],
    )
    families = (restarts, init_restarts, init_reasons, reasons, init_terminated, init_waiting, info, created)
    return "\n".join([line for family in families for line in family.lines()] + ["# EOF", ""])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    end = int(time.time()) // 3600 * 3600 - 3600
    t0 = float(end - 3 * 3600)
    tmp = tmp_path_factory.mktemp("prom-containers")
    backfill(tmp / "data", history(t0, end))
    with PrometheusServer(tmp / "data", scrape_interval="30s") as server:
        yield Cluster(server.url, t0)


def _judge(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, *pods: str) -> tuple[Status, str]:
    monkeypatch.setenv(PROMETHEUS_ENV, cluster.url)
    spec = experiment(stages=(10,))
    metrics = snapshot_for_experiment(spec, (cluster.t0, cluster.t0 + STAGE), step=15.0, pods=pods,
                                      read_log=lambda *a: None)  # fmt: skip
    table = records(10, np.full(REQUESTS, 0.05), start=cluster.t0, rate=REQUESTS / STAGE)
    verdict = evaluate(table, spec, metrics=metrics)
    check = verdict.stage(10).check("oom_kill_rate")
    return check.status, check.reason


@pytest.mark.parametrize("pod", ["init-0", "side-0", "down-0", "classic-0", "replica-1"])
def test_an_oom_kill_of_any_container_of_the_pods_fails(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, pod: str
) -> None:
    # Before: only kube_pod_container_* was read, so the init container and the native sidecar's kills were none.
    status, reason = _judge(cluster, monkeypatch, pod)
    assert status is Status.FAIL, reason


# The replica created during the run is judged with an older pod beside it, as in a namespace: alone, its scope has
# no kube-state-metrics sample before it existed, which the freshness rule reads as a gap.
@pytest.mark.parametrize("pods", [("settled-0",), ("settled-0", "settled-1")])
def test_an_init_container_that_ran_to_completion_is_no_kill(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, pods: tuple[str, ...]
) -> None:
    status, reason = _judge(cluster, monkeypatch, *pods)
    assert status is Status.PASS, reason
