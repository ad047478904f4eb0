"""The abort_recovery check and the client-abort-storm safety rules, on hand-made series and experiments, and
the check read through a real Prometheus (the catalog's queries, not hand-made series)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kfchaos.errors import SpecError
from kfchaos.faults.safety import FaultInputError, check_fault
from kfchaos.metrics import names
from kfchaos.metrics.collect import PROMETHEUS_ENV, snapshot_for_experiment
from kfchaos.metrics.snapshot import MetricsSnapshot, Series
from kfchaos.validate import parse_experiment
from kfchaos.verdict.abortstorm import abort_recovery_check
from kfchaos.verdict.model import Status
from kfchaos.verdict.requests import Requests
from tests.support.prometheus import PrometheusServer, backfill
from tests.verdict.builders import experiment


def storm(start: float = 100.0, end: float = 110.0) -> Requests:
    n = 2
    nan = np.full(n, np.nan)
    return Requests(
        stage=np.full(n, 100, dtype=np.int16), intended=np.array([start, start]), sent=np.array([start, start]),
        status=np.full(n, 200.0), error=np.full(n, -1, dtype=np.int8), latency=np.array([1.0, end - start]),
        ttft=nan, itl_p99=nan, tpot=nan, fault_active=np.ones(n, bool), injected=np.ones(n, bool),
    )  # fmt: skip


def snapshot(kv: list[float], running: list[float], times: list[float]) -> MetricsSnapshot:
    t = np.array(times, dtype=float)
    return MetricsSnapshot(
        series={
            names.KV_CACHE_FLOOR: Series(names.KV_CACHE_FLOOR, t, np.array(kv, dtype=float)),
            names.REQUESTS_RUNNING: Series(names.REQUESTS_RUNNING, t, np.array(running, dtype=float)),
        },
        grace=1.0,
    )


TIMES = [60.0, 90.0, 105.0, 120.0, 135.0]


def test_back_to_the_floor_passes_and_a_raised_floor_fails() -> None:
    ok = abort_recovery_check(storm(), snapshot([0.1, 0.0, 0.6, 0.05, 0.0], [3, 0, 40, 2, 0], TIMES))
    assert ok.status is Status.PASS, ok.reason
    leak = abort_recovery_check(storm(), snapshot([0.1, 0.0, 0.6, 0.2, 0.15], [3, 0, 40, 2, 0], TIMES))
    assert leak.status is Status.FAIL and "KV-cache usage" in leak.reason
    stuck = abort_recovery_check(storm(), snapshot([0.1, 0.0, 0.6, 0.0, 0.0], [3, 0, 40, 9, 8], TIMES))
    assert stuck.status is Status.FAIL and "running requests" in stuck.reason


def test_a_floor_point_whose_step_began_before_the_storm_settled_is_not_after_it() -> None:
    # A storm of 2 s (100..102) settles at 107; the point at 120 is the lowest sample of (105, 120], which began
    # before the storm settled, so its floor 0.0 says nothing about a leak. Only the point at 135 is "after".
    leak = abort_recovery_check(storm(100.0, 102.0), snapshot([0.0, 0.0, 0.6, 0.0, 0.3], [0, 0, 40, 0, 0], TIMES))
    assert leak.status is Status.FAIL and "floor 0.3" in leak.reason, leak.reason
    one_point = snapshot([0.0], [0], [135.0])
    assert "step it stands for is unknown" in abort_recovery_check(storm(), one_point).reason


def test_missing_evidence_is_inconclusive() -> None:
    assert abort_recovery_check(storm(), None).status is Status.INCONCLUSIVE
    absent = MetricsSnapshot(series={})
    assert "missing" in abort_recovery_check(storm(), absent).reason
    no_before = abort_recovery_check(storm(start=50.0), snapshot([0.0] * 5, [0] * 5, TIMES))
    assert no_before.status is Status.INCONCLUSIVE and "before the storm" in no_before.reason
    no_after = abort_recovery_check(storm(end=140.0), snapshot([0.0] * 5, [0] * 5, TIMES))
    assert no_after.status is Status.INCONCLUSIVE and "after the storm" in no_after.reason
    assert abort_recovery_check(storm().where(np.zeros(2, bool)), snapshot([0.0] * 5, [0] * 5, TIMES)).status is (
        Status.INCONCLUSIVE
    )


EXPERIMENT = """
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {{name: storm, version: 1.0.0, owner: t}}
spec:
  target:
    namespace: demo
    selector: {{labels: {{app: demo-llm}}}}
    endpoint: http://127.0.0.1:8100
    api: {api}
    model: m
    timeout: 10s
  traffic:
    synthetic: {{rate: 1}}
    stages: [100]
    stage_duration: 10s
  faults:
    - name: storm
      type: client-abort-storm
      params: {params}
  baseline: {{file: b.yaml}}
"""


@pytest.mark.parametrize(
    ("api", "params", "message"),
    [
        ("http", "{requests: 4}", "streaming API"),
        ("openai-completions", "{requests: 4, abort_after: 20s}", "below target.timeout"),
    ],
)
def test_a_storm_that_could_not_abort_is_refused(api: str, params: str, message: str) -> None:
    # Refused when the file is read (naming the field's line), and again when the fault is checked in code.
    with pytest.raises(SpecError, match=rf"storm.yaml:\d+: spec.faults\[0\].params.*{message}"):
        parse_experiment(EXPERIMENT.format(api=api, params=params), "storm.yaml")
    fine = parse_experiment(EXPERIMENT.format(api="openai-chat", params="{requests: 4, abort_after: 2s}"), "s.yaml")
    broken = fine.model_copy(
        update={"spec": fine.spec.model_copy(update={"target": fine.spec.target.model_copy(update={"api": api})})}
    )
    fault = broken.spec.faults[0].model_copy(
        update={"params": fine.spec.faults[0].params.model_copy(update=_params(params))}
    )
    with pytest.raises(FaultInputError, match=message):
        check_fault(broken, fault)


def _params(text: str) -> dict[str, object]:
    return {"abort_after": None} if "abort_after" not in text else {"abort_after": 20.0}


def test_a_storm_that_can_abort_is_accepted() -> None:
    text = EXPERIMENT.format(api="openai-completions", params="{requests: 4, slow_readers: 1, abort_after: 2s}")
    experiment = parse_experiment(text, "storm.yaml")
    check_fault(experiment, experiment.spec.faults[0])


# Two storms in one real Prometheus's history: the first frees its blocks, the second leaks a tenth of the cache.
# The base traffic moves usage between its floor and floor + 0.2 every 7 s; a storm holds 0.6 for 10 s.
FREE_STORM, LEAK_STORM = (-560.0, -550.0), (-260.0, -250.0)  # seconds relative to the history's end
BASE_FLOOR, LEAKED = 0.1, 0.1


@pytest.fixture(scope="module")
def storm_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float]]:
    tmp: Path = tmp_path_factory.mktemp("abortstorm")
    end = float(int(time.time()) - 120)
    labels = '{namespace="serving",pod="vllm-0"}'
    kv, running = ["# TYPE vllm:kv_cache_usage_perc gauge"], ["# TYPE vllm:num_requests_running gauge"]
    for t in range(int(end) - 700, int(end) + 1):
        offset = t - end
        floor = BASE_FLOOR + (LEAKED if offset >= LEAK_STORM[1] else 0.0)
        in_storm = any(a <= offset <= b for a, b in (FREE_STORM, LEAK_STORM))
        usage = 0.6 if in_storm else floor + 0.2 * ((t % 7) / 6)
        kv.append(f"vllm:kv_cache_usage_perc{labels} {usage!r} {t}")
        running.append(f"vllm:num_requests_running{labels} {40 if in_storm else 3 + t % 7} {t}")
    backfill(tmp / "data", "\n".join([*kv, *running, "# EOF", ""]))
    with PrometheusServer(tmp / "data", scrape_interval="1s") as server:
        yield server.url, end


@pytest.mark.integration
@pytest.mark.parametrize(("span", "expected"), [(FREE_STORM, Status.PASS), (LEAK_STORM, Status.FAIL)])
def test_through_a_real_prometheus_freed_blocks_pass_and_a_leak_fails(
    storm_history: tuple[str, float], monkeypatch: pytest.MonkeyPatch, span: tuple[float, float], expected: Status
) -> None:
    # The snapshot the run collects (15 s steps): its KV-cache peak series keeps the storm's 0.6 for a minute
    # after the storm, so a floor read from it would FAIL a server that freed everything.
    url, end = storm_history
    monkeypatch.setenv(PROMETHEUS_ENV, url)
    start, stop = end + span[0], end + span[1]
    metrics = snapshot_for_experiment(experiment(), (start - 130.0, stop + 110.0), step=15.0)
    check = abort_recovery_check(storm(start, stop), metrics)
    assert check.status is expected, check.reason
    floors = check.details["kv_cache_usage_floor"]
    assert floors["before"] == pytest.approx(BASE_FLOOR)  # type: ignore[index]
    leaked = LEAKED if expected is Status.FAIL else 0.0
    assert floors["after"] == pytest.approx(BASE_FLOOR + leaked)  # type: ignore[index]
