"""OOM kills counted end to end on the real components (issue 21 §3.7): KWOK's Stages in
scripts/cluster/stages/pod-oom-kill.yaml OOM-kill a pod's container as the kubelet reports it (State Terminated
OOMKilled, exit 137; then Waiting CrashLoopBackOff with the kill in lastState; then Running with restartCount + 1),
the real kube-state-metrics exports the pod, a real Prometheus scrapes it, and kfchaos counts the kills through
the path the verdict reads (kfchaos.metrics.collect.snapshot_for_experiment, then kfchaos.metrics.oom.count).

Every wait is on an outcome (the pod's status, a sample in Prometheus), bounded; nothing asserts a duration.
"""

from __future__ import annotations

import itertools
import json
import math
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kfchaos.metrics import oom
from kfchaos.metrics.collect import PROMETHEUS_ENV, snapshot_for_experiment
from kfchaos.metrics.snapshot import MetricsSnapshot
from tests.cluster.conftest import RealCluster
from tests.cluster.test_smoke import eventually
from tests.support.prometheus import PrometheusServer
from tests.verdict.builders import experiment

pytestmark = pytest.mark.cluster

SPEC = experiment(stages=(10,))
NAMESPACE = SPEC.spec.target.namespace
UNTIL = "oom-kill.stage.kfchaos.io/until-restarts"
TERMINATED_FOR = "oom-kill.stage.kfchaos.io/terminated-for"
BACK_OFF = "oom-kill.stage.kfchaos.io/back-off"
WAIT = 60.0
SLOW_SCRAPE = "5s"  # the second Prometheus: long enough that two kill cycles fit between two scrapes


@pytest.fixture(scope="module")
def core(real_cluster: RealCluster) -> Iterator[k8s.CoreV1Api]:
    """The admin's CoreV1Api; the pods made with `running_pod` are deleted after the module."""
    api = k8s.CoreV1Api(real_cluster.api_client())
    try:
        api.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE)))
    except ApiException as error:
        if error.status != 409:
            raise
    yield api
    for name in MADE:
        try:
            api.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        except ApiException as error:
            if error.status != 404:
                raise


MADE: list[str] = []
# Fresh names each run: a reused cluster's Prometheus still holds an earlier run's pods of the same name.
RUN = uuid.uuid4().hex[:6]
OOM_THREE, OOM_TWICE, OOM_BACKOFF = (f"oom-{case}-{RUN}" for case in ("three", "twice", "backoff"))


def running_pod(api: k8s.CoreV1Api, name: str) -> k8s.V1ContainerStatus:
    """A one-container pod bound to a KWOK node (KWOK's pod-ready stage makes it Running)."""
    body = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, labels={"app": "oom-real"}),
        spec=k8s.V1PodSpec(node_name="kwok-node-0", containers=[k8s.V1Container(name="vllm", image="vllm/vllm")]),
    )
    api.create_namespaced_pod(NAMESPACE, body)
    MADE.append(name)
    return eventually(f"pod {name} Running", lambda: _state(api, name, "running"))


def _first(api: k8s.CoreV1Api, name: str) -> k8s.V1ContainerStatus | None:
    statuses = api.read_namespaced_pod(name, NAMESPACE).status.container_statuses
    return statuses[0] if statuses else None


def _state(api: k8s.CoreV1Api, name: str, state: str, restarts: int | None = None) -> k8s.V1ContainerStatus | None:
    status = _first(api, name)
    if status is None or getattr(status.state, state) is None:
        return None
    return status if restarts is None or status.restart_count == restarts else None


def oom_kill(api: k8s.CoreV1Api, name: str, until: int, *, terminated_for: str, back_off: str) -> None:
    """Ask the pod-oom-kill Stage for kills until the container's restartCount is `until`."""
    annotations = {UNTIL: str(until), TERMINATED_FOR: terminated_for, BACK_OFF: back_off}
    api.patch_namespaced_pod(name, NAMESPACE, {"metadata": {"annotations": annotations}})


def query(url: str, promql: str) -> list[dict[str, Any]]:
    encoded = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{encoded}", timeout=5) as response:
        return list(json.loads(response.read())["data"]["result"])


def samples(url: str, metric: str, pod: str, labels: str = "") -> list[tuple[float, float]]:
    """The raw samples Prometheus holds for the pod's first container (a range selector: no lookback repeats)."""
    found = query(url, f'{metric}{{namespace="{NAMESPACE}",pod="{pod}"{labels}}}[10m]')
    return [(float(t), float(v)) for t, v in found[0]["values"]] if found else []


def scraped(url: str, metric: str, pod: str, value: float, labels: str = "") -> Callable[[], bool]:
    return lambda: any(v == value for _, v in samples(url, metric, pod, labels))


def counted(
    url: str, pod: str, start: float, end: float, step: float, monkeypatch: pytest.MonkeyPatch
) -> tuple[oom.OomCount, MetricsSnapshot]:
    """What the verdict reads for the pod over [start, end]."""
    monkeypatch.setenv(PROMETHEUS_ENV, url)
    metrics = snapshot_for_experiment(SPEC, (start, end), step=step, pods=(pod,), read_log=lambda *_: None)
    return oom.count(metrics, start, end, metrics.grace), metrics


def test_three_kills_are_counted_three_times(
    real_cluster: RealCluster, core: k8s.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = real_cluster.prometheus_url
    running_pod(core, OOM_THREE)
    eventually("the pod's restart count scraped", scraped(url, oom.RESTARTS_METRIC, OOM_THREE, 0))
    start = time.time()
    # Each state held long enough (2 s, the cluster's Prometheus scrapes every 1 s) to be scraped.
    oom_kill(core, OOM_THREE, 3, terminated_for="2s", back_off="2s")
    eventually("three kills and Running again", lambda: _state(core, OOM_THREE, "running", restarts=3), WAIT)
    eventually("restart count 3 scraped", scraped(url, oom.RESTARTS_METRIC, OOM_THREE, 3), WAIT)

    # What the real series showed, as kfchaos.metrics.oom reads them: each kill as State Terminated
    # (terminated_reason OOMKilled), then Waiting in CrashLoopBackOff, and the last terminated reason OOMKilled.
    reason = samples(url, oom.REASON_METRIC, OOM_THREE, ',reason="OOMKilled"')
    assert reason and all(v == 1 for _, v in reason)
    assert samples(url, oom.TERMINATED_METRIC, OOM_THREE, ',reason="OOMKilled"')
    assert samples(url, oom.WAITING_METRIC, OOM_THREE, f',reason="{oom.BACK_OFF}"')
    exit_codes = samples(url, "kube_pod_container_status_last_terminated_exitcode", OOM_THREE)
    assert exit_codes and {v for _, v in exit_codes} == {137}

    count, _ = counted(url, OOM_THREE, start, time.time(), 1.0, monkeypatch)
    assert count.missing is None, count.missing
    assert count.host == 3
    assert (count.gpu, count.unread) == (0, 0)


def _scraped_since(url: str, pod: str, seen: int) -> bool:
    return len(samples(url, oom.RESTARTS_METRIC, pod)) > seen


def test_two_kills_within_one_scrape_interval_are_two_events(
    real_cluster: RealCluster, core: k8s.CoreV1Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """restartCount + 2 between two scrapes: both kills counted. kube-state-metrics shows only the last
    termination's reason, so one is an OOM kill for certain and the other a restart of unread cause (which the
    OOM check cannot PASS on), never one kill and nothing else."""
    ksm = real_cluster.env.env_file.read_text().split("KUBE_STATE_METRICS_URL=http://")[1].split()[0]
    running_pod(core, OOM_TWICE)
    with PrometheusServer(tmp_path / "prom", scrape_targets=[ksm], scrape_interval=SLOW_SCRAPE) as server:
        url = server.url
        eventually("the pod's restart count scraped", scraped(url, oom.RESTARTS_METRIC, OOM_TWICE, 0), WAIT)
        wanted = 0
        for _ in range(4):  # a scrape can land between the two kills; then the pair is made again
            scrapes = len(samples(url, oom.RESTARTS_METRIC, OOM_TWICE))
            eventually("a fresh scrape", partial(_scraped_since, url, OOM_TWICE, scrapes))
            wanted += 2
            oom_kill(core, OOM_TWICE, wanted, terminated_for="0s", back_off="0s")
            eventually("two kills", partial(_state, core, OOM_TWICE, "running", restarts=wanted), WAIT)
            eventually("the count scraped", scraped(url, oom.RESTARTS_METRIC, OOM_TWICE, wanted), WAIT)
            values = [v for _, v in samples(url, oom.RESTARTS_METRIC, OOM_TWICE)]
            if any(b - a == 2 for a, b in itertools.pairwise(values) if b == wanted):
                break
        else:
            pytest.fail(f"no +2 step between two scrapes in {values}")
        # The window ends just before the grid point where the +2 step shows, so the kills count only when
        # they land on that point (with its grace). Its start has a sub-millisecond part that Prometheus rounds
        # up (web/api/v1/api.go parseTime): its points lie 0.4 ms after the window's grid, as happens by chance.
        before, shown = next(
            (a, b) for a, b in itertools.pairwise(samples(url, oom.RESTARTS_METRIC, OOM_TWICE)) if b[1] - a[1] == 2
        )
        start = math.floor((before[0] + 0.1) * 1000) / 1000 + 0.0006
        step = float(SLOW_SCRAPE.removesuffix("s"))
        assert before[0] <= start and shown[0] < start + step - 0.01, (before, shown)  # consecutive scrapes
        count, _ = counted(url, OOM_TWICE, start, start + step - 0.01, step, monkeypatch)
    assert count.missing is None, count.missing
    # Both kills are events: the last one's reason shows (OOMKilled), the first one's never does.
    assert (count.host, count.unread, count.gpu) == (1, 1, 0)


def test_a_kill_in_back_off_at_the_windows_end_is_counted_once(
    real_cluster: RealCluster, core: k8s.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed near the window's end and still in CrashLoopBackOff when it ends: the restart count has not moved,
    State Terminated is gone, and the kill is counted (from the Waiting state and the last terminated reason);
    the restart that ends the back-off later is not counted again."""
    url = real_cluster.prometheus_url
    running_pod(core, OOM_BACKOFF)
    eventually("the pod's restart count scraped", scraped(url, oom.RESTARTS_METRIC, OOM_BACKOFF, 0))
    start = time.time()
    oom_kill(core, OOM_BACKOFF, 1, terminated_for="2s", back_off="1h")
    eventually("in CrashLoopBackOff", lambda: _state(core, OOM_BACKOFF, "waiting", restarts=0), WAIT)
    waiting = f',reason="{oom.BACK_OFF}"'
    eventually("the back-off scraped", scraped(url, oom.WAITING_METRIC, OOM_BACKOFF, 1, waiting), WAIT)
    end = time.time()
    assert all(v == 0 for _, v in samples(url, oom.RESTARTS_METRIC, OOM_BACKOFF))  # not counted by restarts

    count, _ = counted(url, OOM_BACKOFF, start, end, 1.0, monkeypatch)
    assert count.missing is None, count.missing
    assert count.host == 1

    # The back-off ends: Running with restartCount 1. The kill belongs to the first window only.
    core.patch_namespaced_pod(OOM_BACKOFF, NAMESPACE, {"metadata": {"annotations": {BACK_OFF: "0s"}}})
    eventually("Running again", lambda: _state(core, OOM_BACKOFF, "running", restarts=1), WAIT)
    eventually("restart count 1 scraped", scraped(url, oom.RESTARTS_METRIC, OOM_BACKOFF, 1), WAIT)
    later = time.time()
    after, _ = counted(url, OOM_BACKOFF, end, later, 1.0, monkeypatch)
    assert after.missing is None, after.missing
    assert after.host == 0
    whole, _ = counted(url, OOM_BACKOFF, start, later, 1.0, monkeypatch)
    assert whole.host == 1
