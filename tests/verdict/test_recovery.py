"""Recovery time after the faults are removed, from the records' timeline."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kfchaos.verdict import Status, evaluate
from tests.verdict.builders import concat, experiment, records
from tests.verdict.fixtures import baseline, exponential, oom_snapshot

START = 1_000_000.0
SPEC = experiment("error_rate_max: 1%\nrecovery_max: 30s", stages=[10])


def run_with_recovery(bad_for: float, after: float = 120.0) -> pa.Table:
    """60 s with faults active, then `after` s of recovery records of which the first `bad_for` s fail 50 %."""
    faulty = records(10, exponential(0.05, 6000), start=START)
    n = int(after * 100)
    t = np.arange(n) / 100.0
    status = np.where((t < bad_for) & (np.arange(n) % 2 == 0), 503, 200)
    errors = [("http" if s == 503 else None) for s in status]
    recovering = records(0, exponential(0.05, n), start=START + 60, error=errors, status=status, fault_active=False)
    return concat(faulty, recovering)


def verdict_for(table: pa.Table, spec=SPEC):
    return evaluate(table, spec, baseline=baseline(), metrics=oom_snapshot(START, START + 200))


def test_recovery_time_is_measured_from_removal() -> None:
    check = verdict_for(run_with_recovery(bad_for=25)).check("recovery")
    # removal inferred as the last fault-active send (START + 59.99); errors end 25 s after START + 60
    assert check.value == pytest.approx(30.0)
    assert check.status is Status.PASS


def test_slow_recovery_fails_against_recovery_max() -> None:
    check = verdict_for(run_with_recovery(bad_for=45)).check("recovery")
    assert check.status is Status.FAIL
    assert check.value == pytest.approx(50.0)


def test_never_recovered_within_the_observation() -> None:
    check = verdict_for(run_with_recovery(bad_for=200, after=20)).check("recovery")
    assert check.value is None and "did not hold again" in check.reason
    assert check.status is Status.INCONCLUSIVE  # observed only 20 s < recovery_max: cannot tell yet


def test_recovery_max_without_post_fault_records_is_inconclusive() -> None:
    only_faulty = records(10, exponential(0.05, 6000), start=START)
    verdict = verdict_for(only_faulty)
    assert verdict.check("recovery").status is Status.INCONCLUSIVE
    assert verdict.status is Status.INCONCLUSIVE


def test_explicit_removal_time_wins() -> None:
    spec = experiment("error_rate_max: 1%", stages=[10])
    table = run_with_recovery(bad_for=25)
    verdict = evaluate(
        table, spec, baseline=baseline(), metrics=oom_snapshot(START, START + 200), faults_removed_at=START + 70
    )
    check = verdict.check("recovery")
    assert check.value == pytest.approx(20.0)
    assert not check.gating  # no recovery_max: reported, does not decide


def _recovering_in_the_stage(bad_for: float) -> pa.Table:
    """As run_with_recovery, but the records after removal are the same stage's (a traffic fault that ends mid-stage,
    as a long-context burst does)."""
    faulty = records(10, exponential(0.05, 6000), start=START)
    n = 12000
    t = np.arange(n) / 100.0
    status = np.where((t < bad_for) & (np.arange(n) % 2 == 0), 503, 200)
    errors = [("http" if s == 503 else None) for s in status]
    recovering = records(10, exponential(0.05, n), start=START + 60, error=errors, status=status, fault_active=False)
    return concat(faulty, recovering)


@pytest.mark.parametrize(
    ("valid", "status"),
    [(True, Status.FAIL), ("replayer fell behind: send lag P99 400.0ms > 250ms", Status.INCONCLUSIVE)],
)
def test_recovery_is_judged_only_on_a_replay_that_kept_its_schedule(valid: bool | str, status: Status) -> None:
    """A re-judged run folder gave FAIL on recovery where its stage, and the pipeline's verdict, were INCONCLUSIVE:
    the records after the burst came from a replay that fell behind, whose delays the windows held too."""
    verdict = evaluate(
        _recovering_in_the_stage(bad_for=45),
        SPEC,
        baseline=baseline(),
        metrics=oom_snapshot(START, START + 200),
        stage_valid={10: valid},
    )
    check = verdict.check("recovery")
    assert check.status is status, check
    if status is Status.INCONCLUSIVE:
        assert check.reason.startswith("not judged: the replay after removal was not valid (stage 10%: ")
        assert check.value is None
        assert verdict.stage(10).check("replay").status is Status.INCONCLUSIVE
