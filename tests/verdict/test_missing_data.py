"""Every kind of missing or doubtful data gives INCONCLUSIVE with its reason, never PASS."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kfchaos.faults.activity import FaultActivity
from kfchaos.metrics.names import OOM_KILLS
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.verdict import RecordsError, Status, evaluate
from tests.verdict.builders import POD_KILL, experiment, records
from tests.verdict.fixtures import baseline, exponential, oom_snapshot

N = 3000
START = 1_000_000.0
END = START + N / 100.0
SPEC = experiment("p99_drift_max: 15%", stages=[10])


def healthy() -> pa.Table:
    return records(10, exponential(0.5, N), start=START)


def test_healthy_stage_with_all_data_passes() -> None:
    verdict = evaluate(healthy(), SPEC, baseline=baseline(), metrics=oom_snapshot(START, END))
    assert verdict.status is Status.PASS, verdict.reasons
    assert verdict.reasons == []


def test_no_metrics_means_oom_kills_unknown() -> None:
    verdict = evaluate(healthy(), SPEC, baseline=baseline())
    check = verdict.stage(10).check("oom_kill_rate")
    assert check.status is Status.INCONCLUSIVE and "--metrics" in check.reason
    assert verdict.status is Status.INCONCLUSIVE


def test_unreachable_prometheus() -> None:
    metrics = MetricsSnapshot(source="http://127.0.0.1:1", unreachable="connection refused")
    verdict = evaluate(healthy(), SPEC, baseline=baseline(), metrics=metrics)
    assert verdict.status is Status.INCONCLUSIVE
    assert verdict.check("metrics_source").status is Status.INCONCLUSIVE
    assert "unreachable" in verdict.stage(10).check("oom_kill_rate").reason


def test_missing_series_and_failed_query() -> None:
    missing = evaluate(healthy(), SPEC, baseline=baseline(), metrics=MetricsSnapshot(source="p"))
    assert f"series {OOM_KILLS} missing" in missing.stage(10).check("oom_kill_rate").reason
    failed = MetricsSnapshot(source="p", errors={OOM_KILLS: "bad_data: parse error"})
    verdict = evaluate(healthy(), SPEC, baseline=baseline(), metrics=failed)
    assert "parse error" in verdict.stage(10).check("oom_kill_rate").reason
    assert verdict.status is Status.INCONCLUSIVE


def test_series_that_does_not_cover_the_stage() -> None:
    early = oom_snapshot(START - 1000, START - 900)  # scraped only long before the stage
    early.series[OOM_KILLS] = early.series[OOM_KILLS].between(START - 1000, START - 990)
    verdict = evaluate(healthy(), SPEC, baseline=baseline(), metrics=early)
    assert verdict.stage(10).check("oom_kill_rate").status is Status.INCONCLUSIVE


def test_oom_kill_fails_the_stage() -> None:
    metrics = oom_snapshot(START, END, kills_at={START + 10: 1})
    check = evaluate(healthy(), SPEC, baseline=baseline(), metrics=metrics).stage(10).check("oom_kill_rate")
    assert check.status is Status.FAIL
    assert check.value == pytest.approx(1 / N)


def test_faults_not_verified() -> None:
    spec = experiment("p99_drift_max: 15%", stages=[10], faults=POD_KILL)
    metrics = oom_snapshot(START, END)
    unknown = evaluate(healthy(), spec, baseline=baseline(), metrics=metrics)
    assert unknown.check("faults_injected").status is Status.INCONCLUSIVE
    assert unknown.status is Status.INCONCLUSIVE
    denied = evaluate(healthy(), spec, baseline=baseline(), metrics=metrics, faults_verified={"kill-one": False})
    assert "kill-one" in denied.check("faults_injected").reason
    verified = evaluate(healthy(), spec, baseline=baseline(), metrics=metrics, faults_verified={"kill-one": True})
    # Injected, but never observed active in its stage: the stage is not judged as under the fault.
    assert verified.status is Status.INCONCLUSIVE
    assert "kill-one is planned for stage 10%" in verified.stage(10).check("fault_active").reason
    seen = FaultActivity("kill-one", "kill-one-x", "PodChaos", [10], START - 5, [(START - 1, True), (END + 60, True)])
    covered = evaluate(
        healthy(), spec, baseline=baseline(), metrics=metrics, faults_verified={"kill-one": True},
        fault_coverage={10: [seen]},
    )  # fmt: skip
    assert covered.status is Status.PASS, covered.reasons


def test_replayer_behind_schedule() -> None:
    late = records(10, exponential(0.5, N), start=START, send_lag=0.2)
    verdict = evaluate(late, SPEC, baseline=baseline(), metrics=oom_snapshot(START, END))
    check = verdict.stage(10).check("replay")
    assert check.status is Status.INCONCLUSIVE and "fell behind" in check.reason
    assert verdict.status is Status.INCONCLUSIVE


def test_replayer_marked_stage_invalid() -> None:
    verdict = evaluate(
        healthy(), SPEC, baseline=baseline(), metrics=oom_snapshot(START, END), stage_valid={10: "worker crashed"}
    )
    assert verdict.stage(10).check("replay").reason == "worker crashed"
    assert verdict.status is Status.INCONCLUSIVE


def test_replayer_dropped_requests() -> None:
    errors: list[str | None] = [None] * N
    for i in range(0, N, 50):
        errors[i] = "dropped"
    table = records(10, exponential(0.5, N), start=START, error=errors)
    verdict = evaluate(table, SPEC, baseline=baseline(), metrics=oom_snapshot(START, END))
    assert "dropped" in verdict.stage(10).check("replay").reason


def test_stage_without_records() -> None:
    spec = experiment("p99_drift_max: 15%", stages=[10, 30])
    verdict = evaluate(healthy(), spec, baseline=baseline(), metrics=oom_snapshot(START, END))
    assert verdict.stage(30).status is Status.INCONCLUSIVE
    assert verdict.status is Status.INCONCLUSIVE


def test_no_records_at_all() -> None:
    empty = healthy().slice(0, 0)
    verdict = evaluate(empty, SPEC, baseline=baseline())
    assert verdict.status is Status.INCONCLUSIVE
    assert verdict.check("records").status is Status.INCONCLUSIVE


def test_ttft_limit_without_ttft_in_records() -> None:
    spec = experiment("ttft_p99_max: 800ms", stages=[10])
    verdict = evaluate(healthy(), spec, baseline=baseline(), metrics=oom_snapshot(START, END))
    check = verdict.stage(10).check("ttft_p99")
    assert check.status is Status.INCONCLUSIVE and "time to first token" in check.reason


def test_ttft_limit_with_ttft() -> None:
    spec = experiment("ttft_p99_max: 800ms", stages=[10])
    table = records(10, exponential(0.5, N), start=START, ttft=exponential(0.05, N))
    verdict = evaluate(table, spec, baseline=baseline(), metrics=oom_snapshot(START, END))
    assert verdict.stage(10).check("ttft_p99").status is Status.PASS


def test_records_file_missing_a_column(tmp_path) -> None:
    path = tmp_path / "r.parquet"
    pq.write_table(healthy().drop_columns(["latency"]), path)
    with pytest.raises(RecordsError, match=r"r\.parquet: column\(s\) latency missing"):
        evaluate(path, SPEC, baseline=baseline())


def test_records_file_not_parquet(tmp_path) -> None:
    path = tmp_path / "r.parquet"
    path.write_text("not parquet")
    with pytest.raises(RecordsError, match="cannot read as Parquet"):
        evaluate(path, SPEC, baseline=baseline())


def test_rates_near_their_limits() -> None:
    spec = experiment("error_rate_max: 1%", stages=[10])
    n = 20000
    for every, expected in ((400, Status.PASS), (100, Status.INCONCLUSIVE), (60, Status.FAIL)):
        status = np.full(n, 200)
        status[::every] = 503
        errors = [("http" if s == 503 else None) for s in status]
        table = records(10, exponential(0.5, n), start=START, error=errors, status=status)
        check = evaluate(table, spec, baseline=baseline()).stage(10).check("error_rate")
        assert check.status is expected, (every, check.reason)
