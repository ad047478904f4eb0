"""What the P99 drift is measured against: a control baseline where there is one, else the Prometheus
histogram P99 only where its buckets can resolve the drift tested (kfchaos.verdict.drift).

The case measured in issue 11: with vLLM's default E2E buckets (vllm/v1/metrics/loggers.py
request_latency_buckets: 0.3, 0.5, 0.8, ...) a true 212 ms P99 is interpolated inside the 0..300 ms bucket
as 297 ms, and a true +20.7 % regression (256 ms) then passes a 15 % drift test.
"""

from __future__ import annotations

import numpy as np
import pytest

from kfchaos.baseline import ControlBaseline, ControlStage
from kfchaos.verdict import Status, evaluate
from kfchaos.verdict.model import Check
from tests.verdict.builders import experiment, records
from tests.verdict.fixtures import LN100, baseline, exponential

VLLM_E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]
TRUE_P99 = 0.212
HISTOGRAM_P99 = 0.297  # the same traffic's P99 as histogram_quantile reads it from the first bucket
REGRESSED = TRUE_P99 * 1.207
N = 20000


def control(p99: float = TRUE_P99, interval: tuple[float, float] = (0.209, 0.215), stage: int = 10) -> ControlBaseline:
    return ControlBaseline(
        captured_at="2026-12-01T00:00:00Z",
        target="http://127.0.0.1:8000",
        stage_duration=600.0,
        confidence=0.95,
        records="verdict-test.control.parquet",
        records_sha256="0" * 64,
        stages=[
            ControlStage(
                stage=stage,
                rate=100.0,
                sent=N,
                succeeded=N,
                errors=0,
                timeouts=0,
                samples=N,
                latency_p50=p99 / 6.6,
                latency_p99=p99,
                latency_p99_interval=list(interval),
            )
        ],
    )


def drift(p99_true: float, **base: object) -> Check:
    spec = experiment("p99_drift_max: 15%", stages=[10])
    latencies = exponential(p99_true / LN100, N)  # an exact sample: its P99 is p99_true
    verdict = evaluate(records(10, latencies), spec, baseline=baseline(**base))  # type: ignore[arg-type]
    return verdict.stage(10).check("p99_drift")


def test_a_histogram_that_cannot_resolve_the_drift_is_inconclusive_not_a_pass() -> None:
    check = drift(REGRESSED, p99=HISTOGRAM_P99, buckets=VLLM_E2E_BUCKETS)
    assert check.status is Status.INCONCLUSIVE, check.reason
    assert "bucket 0..0.3s" in check.reason and "baseline P99" in check.reason


def test_the_drift_limit_in_a_wide_bucket_is_inconclusive() -> None:
    # P99 0.45 s sits in 0.3..0.5 (44 % wide); even a 0.2 s request stream cannot pass against it.
    check = drift(0.2, p99=0.45, buckets=VLLM_E2E_BUCKETS)
    assert check.status is Status.INCONCLUSIVE, check.reason
    assert "bucket 0.3..0.5s" in check.reason


def test_a_baseline_without_recorded_buckets_is_inconclusive() -> None:
    check = drift(1.0, p99=1.0, buckets=None)
    assert check.status is Status.INCONCLUSIVE
    assert "no latency bucket bounds" in check.reason and "kfchaos baseline control" in check.reason


def test_fine_buckets_still_decide_from_the_histogram() -> None:
    assert drift(1.0, p99=1.0).status is Status.PASS
    assert drift(1.3, p99=1.0).status is Status.FAIL


def test_the_control_baseline_catches_the_regression_the_histogram_hid() -> None:
    check = drift(REGRESSED, p99=HISTOGRAM_P99, buckets=VLLM_E2E_BUCKETS, control=control())
    assert check.status is Status.FAIL, check.reason
    assert check.details["reference"] == "control baseline at 10%"
    assert check.value == pytest.approx(0.207, abs=0.01)


def test_the_control_baseline_passes_the_same_traffic() -> None:
    check = drift(TRUE_P99, p99=HISTOGRAM_P99, buckets=VLLM_E2E_BUCKETS, control=control())
    assert check.status is Status.PASS, check.reason


def test_a_control_p99_interval_wider_than_the_margin_is_inconclusive() -> None:
    # 17 % above the control's point P99 but inside 15 % of its interval's high end: not decidable.
    check = drift(TRUE_P99 * 1.17, control=control(interval=(0.20, 0.23)))
    assert check.status is Status.INCONCLUSIVE, check.reason


def test_a_control_slower_than_production_is_not_used() -> None:
    # Production's interval P99s were at most ~1.05 x 0.3 s; a control P99 of at least 0.9 s was no normal run.
    check = drift(1.0, p99=0.3, control=control(p99=1.0, interval=(0.95, 1.05)))
    assert check.status is Status.INCONCLUSIVE
    assert "above production's normal band" in check.reason


def test_a_control_without_this_stage_falls_back_to_the_histogram() -> None:
    check = drift(REGRESSED, p99=HISTOGRAM_P99, buckets=VLLM_E2E_BUCKETS, control=control(stage=100))
    assert check.status is Status.INCONCLUSIVE
    assert "no 10% stage" in check.reason


def test_the_control_shape_is_in_the_verdict_summary() -> None:
    summary = baseline(control=control()).summary()
    assert summary["control"]["stages"][0]["latency_p99"] == TRUE_P99
    assert summary["latency_buckets"] is not None
    assert np.isfinite(summary["latency_p99"])
