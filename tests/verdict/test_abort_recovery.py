"""The abort_recovery check and the client-abort-storm safety rules, on hand-made series and experiments."""

from __future__ import annotations

import numpy as np
import pytest

from kfchaos.errors import SpecError
from kfchaos.faults.safety import FaultInputError, check_fault
from kfchaos.metrics import names
from kfchaos.metrics.snapshot import MetricsSnapshot, Series
from kfchaos.validate import parse_experiment
from kfchaos.verdict.abortstorm import abort_recovery_check
from kfchaos.verdict.model import Status
from kfchaos.verdict.requests import Requests


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
            names.KV_CACHE_USAGE: Series(names.KV_CACHE_USAGE, t, np.array(kv, dtype=float)),
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
