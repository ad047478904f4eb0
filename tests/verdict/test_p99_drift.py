"""P99 drift against the baseline at the boundaries, with exact samples of exponential latencies.

With scale s, P(latency > 1.15 x baseline P99) = 100^(-1.15/s): s = 1.15 puts exactly 1 % of requests above
the limit (drift exactly 15 %), s = 1.05 about 0.65 %, s = 1.25 about 1.45 %.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kfchaos.verdict import Status, evaluate
from tests.verdict.builders import concat, experiment, records
from tests.verdict.fixtures import LN100, baseline, exponential

EXPERIMENT = experiment("p99_drift_max: 15%", stages=[10])


def drift(scale: float, n: int, **slo: str):
    spec = experiment("\n".join(["p99_drift_max: 15%", *(f"{k}: {v}" for k, v in slo.items())]), stages=[10])
    verdict = evaluate(records(10, exponential(scale, n)), spec, baseline=baseline())
    return verdict.stage(10).check("p99_drift")


def test_no_drift_passes_with_enough_samples() -> None:
    check = drift(1.0, 5000)
    assert check.status is Status.PASS
    assert check.interval is not None and check.interval[0] < 0 < check.interval[1]
    assert check.details["share_interval"][1] <= 0.01


def test_just_below_the_limit_passes() -> None:
    check = drift(1.05, 20000)
    assert check.status is Status.PASS, check.reason
    assert check.value == pytest.approx(0.05, abs=0.01)


def test_exactly_fifteen_percent_is_inconclusive_however_many_samples() -> None:
    for n in (1000, 20000, 200000):
        check = drift(1.15, n)
        assert check.status is Status.INCONCLUSIVE, (n, check.reason)
        low, high = check.details["share_interval"]
        assert low <= 0.01 <= high


def test_just_above_the_limit_fails() -> None:
    check = drift(1.25, 20000)
    assert check.status is Status.FAIL, check.reason
    assert check.details["share_interval"][0] > 0.01
    assert check.value == pytest.approx(0.25, abs=0.02)


def test_same_drift_with_fewer_samples_is_inconclusive_not_fail() -> None:
    # 1.45 % above the limit is a FAIL at 20000 requests but within the noise at 1000.
    check = drift(1.25, 1000)
    assert check.status is Status.INCONCLUSIVE


def test_too_few_samples_is_inconclusive_even_when_clearly_fine() -> None:
    check = drift(0.5, 299)
    assert check.status is Status.INCONCLUSIVE
    assert "need at least 300" in check.reason


def test_min_samples_is_configurable() -> None:
    assert drift(0.5, 1000, min_samples="2000").status is Status.INCONCLUSIVE
    assert drift(0.5, 1000, min_samples="500").status is Status.PASS


def test_without_a_baseline_drift_is_inconclusive_and_so_is_the_verdict() -> None:
    verdict = evaluate(records(10, exponential(1.0, 5000)), EXPERIMENT, baseline=None)
    assert verdict.stage(10).check("p99_drift").status is Status.INCONCLUSIVE
    assert verdict.status is not Status.PASS


def test_timeouts_count_as_slower_than_the_limit() -> None:
    # 0.5 % slow tail plus 1 % timeouts (no latency recorded) is above the 1 % allowed.
    latencies = exponential(1.0, 20000)
    errors = [None] * 20000
    for i in range(0, 20000, 100):
        errors[i] = "timeout"
        latencies[i] = float("nan")
    verdict = evaluate(records(10, latencies, error=errors), EXPERIMENT, baseline=baseline())
    check = verdict.stage(10).check("p99_drift")
    assert check.status is Status.FAIL, check.reason


def test_absolute_p99_limit_uses_the_same_rule() -> None:
    spec = experiment("p99_max: 4605ms", stages=[10])  # the exponential's P99 is 4.605 s
    at_limit = evaluate(records(10, exponential(1.0, 50000)), spec, baseline=baseline())
    assert at_limit.stage(10).check("p99").status is Status.INCONCLUSIVE
    spec = experiment("p99_max: 6s", stages=[10])
    clear = evaluate(records(10, exponential(1.0, 50000)), spec, baseline=baseline())
    assert clear.stage(10).check("p99").status is Status.PASS
    assert clear.stage(10).check("p99").value == pytest.approx(LN100, rel=0.01)


@pytest.mark.parametrize(
    "marker",
    [{"long_context": True}, {"fault_request": "abort-storm"}],
    ids=["long-context-burst", "any-traffic-side-fault"],
)
def test_fault_requests_are_left_out_of_the_slo_checks(marker: dict[str, Any]) -> None:
    table = records(10, exponential(1.0, 5000))
    burst = records(10, np.full(200, 60.0), start=1_100_000.0, **marker)  # 200 requests of 60 s
    verdict = evaluate(concat(table, burst), EXPERIMENT, baseline=baseline())
    stage = verdict.stage(10)
    assert stage.check("p99_drift").status is Status.PASS
    assert stage.requests == 5000 and stage.check("fault_requests").samples == 200
    as_traffic = evaluate(concat(table, records(10, np.full(200, 60.0), start=1.1e6)), EXPERIMENT, baseline=baseline())
    assert as_traffic.stage(10).check("p99_drift").status is Status.FAIL
