"""Issue 25 classes 4, 6 and 7: every request scheduled is accounted for, by one rule (docs/verdict.md,
"Accounting"): dropped and cancelled requests stay in the denominator (dropped as errors, cancelled as unknown,
counted against a PASS); refusals (429, 503, any status >= 400) are errors whose latencies never enter a
quantile, unless the experiment excludes their status; an empty completion is an error."""

from __future__ import annotations

import numpy as np
import pytest

from kfchaos.errors import KfchaosError
from kfchaos.verdict import evaluate
from kfchaos.verdict.model import Status
from kfchaos.verdict.requests import from_table

from .builders import concat, experiment, records

SLO = "p99_drift_max: 15%\np99_max: 1s\nerror_rate_max: 0.5%\ntimeout_rate_max: 1%\nmin_samples: 300"


def _stage(n: int, *, errors: list[str | None] | None = None, status: np.ndarray | None = None, latency: float = 0.1):
    return records(100, np.full(n, latency), error=errors, status=status)


def _judge(table, slo: str = SLO):  # type: ignore[no-untyped-def]
    return evaluate(table, experiment(slo, stages=[100])).stage(100)


def test_cancelled_in_flight_requests_stay_in_the_denominator_as_unknown() -> None:
    # 1000 fast successes and 30 requests cancelled when the stage stopped: if all 30 failed, 2.9 % errors.
    table = _stage(1030, errors=[None] * 1000 + ["cancelled"] * 30)
    table = table.set_column(
        table.schema.get_field_index("latency"),
        "latency",
        records(100, np.concatenate([np.full(1000, 0.1), np.full(30, np.nan)])).column("latency"),
    )
    check = _judge(table).check("error_rate")
    assert check.samples == 1030
    assert check.details["unknown"] == 30
    assert check.status is Status.INCONCLUSIVE  # the old accounting left them out: 0/1000, PASS
    assert check.interval is not None and check.interval[1] > 30 / 1030 * 0.9


def test_unknowns_do_not_hide_a_failure_the_known_requests_show() -> None:
    errors: list[str | None] = [None] * 800 + ["connect"] * 200 + ["cancelled"] * 50
    check = _judge(_stage(1050, errors=errors)).check("error_rate")
    assert check.status is Status.FAIL and check.details["unknown"] == 50


def test_unknowns_count_against_a_latency_pass() -> None:
    # 1000 answered well under the 1 s limit; 40 cancelled: the P99 cannot be shown under 1 s.
    latency = np.concatenate([np.full(1000, 0.1), np.full(40, np.nan)])
    table = records(100, latency, error=[None] * 1000 + ["cancelled"] * 40)
    check = _judge(table).check("p99")
    assert check.status is Status.INCONCLUSIVE and check.details["unknown"] == 40


def test_dropped_requests_are_errors_in_the_error_rate() -> None:
    # 2000 successes, 40 dropped at the concurrency limit (2 %): the users of those 40 got no answer.
    latency = np.concatenate([np.full(2000, 0.1), np.full(40, np.nan)])
    table = records(100, latency, error=[None] * 2000 + ["dropped"] * 40)
    stage = _judge(table)
    error_rate = stage.check("error_rate")
    assert error_rate.status is Status.FAIL
    assert error_rate.samples == 2040 and error_rate.details["dropped"] == 40
    replay = stage.check("replay")
    assert replay.details["dropped"] == 40 and "error_rate" in replay.reason


def test_a_few_dropped_requests_below_the_old_tolerance_still_count() -> None:
    # 0.8 % dropped: under the old 1 % tolerance, and taken out of the denominator (error rate 0/1000: PASS).
    latency = np.concatenate([np.full(1000, 0.1), np.full(8, np.nan)])
    table = records(100, latency, error=[None] * 1000 + ["dropped"] * 8)
    check = _judge(table).check("error_rate")
    assert check.details["count"] == 8 and check.status is not Status.PASS


@pytest.mark.parametrize("code", [429, 503, 400])
def test_refusals_are_errors_by_default(code: int) -> None:
    status = np.concatenate([np.full(950, 200), np.full(50, code)])
    errors: list[str | None] = [None] * 950 + (["http"] * 50 if code >= 500 else [None] * 50)
    stage = _judge(_stage(1000, errors=errors, status=status))
    assert stage.check("error_rate").status is Status.FAIL
    assert stage.check("error_rate").details["count"] == 50


def test_refusal_latencies_never_enter_the_latency_sample() -> None:
    # 500 slow successes (2 s, above the 1 s limit) hidden among 49500 instant 429s: the P99 of everything
    # would be 1 ms. Only successes are a latency sample.
    latency = np.concatenate([np.full(500, 2.0), np.full(49500, 0.001)])
    status = np.concatenate([np.full(500, 200), np.full(49500, 429)])
    stage = _judge(records(100, latency, status=status))
    p99 = stage.check("p99")
    assert p99.samples == 500 and p99.status is Status.FAIL
    assert stage.status is Status.FAIL


def test_an_experiment_may_exclude_statuses_and_the_verdict_says_so() -> None:
    status = np.concatenate([np.full(2000, 200), np.full(100, 429)])
    table = _stage(2100, status=status)
    exp = experiment(SLO + "\nexcluded_statuses: [429]", stages=[100])
    verdict = evaluate(table, exp)
    check = verdict.stage(100).check("error_rate")
    assert check.status is Status.PASS
    assert check.samples == 2000 and check.details["excluded"] == 100 and check.details["excluded_statuses"] == [429]
    assert any("429" in w and "excluded" in w for w in verdict.warnings)


def test_excluded_statuses_are_checked_when_the_experiment_is_read() -> None:
    with pytest.raises(KfchaosError):
        experiment(SLO + "\nexcluded_statuses: [200]", stages=[100])


def test_an_empty_completion_is_an_error() -> None:
    errors: list[str | None] = [None] * 900 + ["empty_completion"] * 100
    status = np.full(1000, 200)
    stage = _judge(_stage(1000, errors=errors, status=status))
    assert stage.check("error_rate").status is Status.FAIL
    assert stage.check("error_rate").details["count"] == 100


def test_one_accounting_every_request_lands_in_exactly_one_class() -> None:
    kinds: list[str | None] = [
        None,
        "timeout",
        "connect",
        "http",
        "protocol",
        "dropped",
        "cancelled",
        "empty_completion",
    ]
    errors = [kinds[i % len(kinds)] for i in range(800)]
    status = np.array([200 if e in (None, "empty_completion") else 503 if e == "http" else 0 for e in errors])
    status[::16] = np.where(np.array(errors)[::16] == None, 429, status[::16])  # noqa: E711
    requests = from_table(concat(_stage(800, errors=errors, status=status)))
    classes = np.vstack([requests.succeeded(), requests.failed(), requests.timed_out(), requests.unknown()])
    assert bool(np.all(classes.sum(axis=0) == requests.counted().astype(int)))
    assert int(requests.counted().sum()) == 800


def test_a_traffic_row_marked_client_abort_stays_counted_as_unknown() -> None:
    # Only a client-abort-storm request (fault_request set) is the client's own designed abort; a records file
    # that marks traffic rows so cannot take them out of the denominator.
    errors: list[str | None] = [None] * 1000 + ["client_abort"] * 40
    check = _judge(_stage(1040, errors=errors)).check("error_rate")
    assert check.samples == 1040 and check.details["unknown"] == 40
    assert check.status is Status.INCONCLUSIVE
