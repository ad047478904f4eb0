"""A traffic-side fault whose requests never reached the server, or that the server refused, did nothing: the
stage is INCONCLUSIVE, not PASS (kfchaos.verdict.delivery)."""

from __future__ import annotations

import numpy as np
import pytest

from kfchaos.verdict import Status, evaluate
from tests.verdict.builders import concat, experiment, records
from tests.verdict.fixtures import baseline, exponential

THRASH = (
    "[{name: rotation, type: prefix-cache-thrash, stages: [10], params: {prefixes: 64, prefix_tokens: 1024, rate: 5}}]"
)
TOKENIZER = "[{name: odd, type: tokenizer-stress, stages: [10], params: {max_model_len: 4096, requests: 3}}]"


def fault_rows(name: str, n: int, status: float, error: str | None = None, start: float = 1_000_010.0):
    return records(10, np.full(n, 0.05), start=start, fault_request=name, status=np.full(n, status), error=[error] * n)


def judge(faults: str, n: int, status: float, error: str | None = None):
    spec = experiment("p99_drift_max: 15%", stages=[10], faults=faults)
    table = records(10, exponential(1.0, 3000))  # the plan: 30 s at 100/s
    if n:
        table = concat(table, fault_rows("rotation" if "rotation" in faults else "odd", n, status, error))
    return evaluate(table, spec, baseline=baseline()).stage(10)


def test_a_load_fault_the_server_served_passes_and_is_left_out_of_the_slos() -> None:
    stage = judge(THRASH, 100, 200.0)
    check = stage.check("fault_requests")
    assert check.status is Status.PASS and not check.gating
    assert stage.gate is not None and stage.gate.proceed  # the ramp goes on
    assert "100 planned, 100 sent, 100 answered (100 2xx)" in check.reason


def test_a_load_fault_the_server_refused_every_time_is_inconclusive_not_pass() -> None:
    # vLLM answers a prompt over --max-model-len with 400 before scheduling it: no KV cache, no prefix cache.
    stage = judge(THRASH, 100, 400.0, "http")
    check = stage.check("fault_requests")
    assert check.status is Status.INCONCLUSIVE and "accepted none" in check.reason
    assert stage.gate is not None and not stage.gate.proceed  # the ramp stops: the fault was never in effect


@pytest.mark.parametrize("faults", [THRASH, TOKENIZER])
def test_a_planned_fault_that_sent_nothing_or_reached_nobody_is_inconclusive(faults: str) -> None:
    assert judge(faults, 0, 200.0).check("fault_requests").status is Status.INCONCLUSIVE
    unreachable = judge(faults, 50, float("nan"), "connect").check("fault_requests")
    assert unreachable.status is Status.INCONCLUSIVE and "none of its requests reached the server" in unreachable.reason


def test_tokenizer_stress_is_answered_by_400s_by_design_and_passes() -> None:
    # Over-limit prompts get vLLM's 400: the tokenizer did the work, which is the fault.
    assert judge(TOKENIZER, 30, 400.0, "http").check("fault_requests").status is Status.PASS


def test_the_steady_state_probe_is_judged_without_the_faults_it_leaves_out(tmp_path) -> None:
    """The probe before injection replays no fault (seams.replay_stage drops them from its plan), so it must not
    be asked for fault requests: found by the prefix-cache-thrash demo, whose probe stopped the run."""
    import pyarrow.parquet as pq

    from kfchaos.steps.context import experiment_from_text
    from kfchaos.steps.stages import _judge
    from tests.verdict.builders import experiment_text

    parsed = experiment_from_text(experiment_text("p99_drift_max: 15%", stages=[10], faults=THRASH))
    path = tmp_path / "probe.parquet"
    pq.write_table(records(10, exponential(1.0, 500)), path)
    _, probe_gate = _judge(parsed, 10, str(path), "", None, fault_free=True, duration=5.0)  # a 5 s probe
    assert probe_gate.proceed
    _, stage_gate = _judge(parsed, 10, str(path), "", None)  # the same records as a stage under the fault: not proven
    assert not stage_gate.proceed


def test_each_fault_is_judged_on_its_own_requests() -> None:
    both = THRASH[:-1] + ", " + TOKENIZER[1:]
    spec = experiment("p99_drift_max: 15%", stages=[10], faults=both)
    # The tokenizer stress sent nothing: the thrash's answered requests do not stand in for it.
    table = concat(records(10, exponential(1.0, 5000)), fault_rows("rotation", 50, 200.0))
    check = evaluate(table, spec, baseline=baseline()).stage(10).check("fault_requests")
    assert check.status is Status.INCONCLUSIVE
    assert check.reason.startswith("odd (tokenizer-stress): none of its requests reached the server: 0 planned")
    assert "rotation" not in check.reason
    table = concat(table, fault_rows("odd", 7, 400.0, "http", start=1_000_020.0))
    check = evaluate(table, spec, baseline=baseline()).stage(10).check("fault_requests")
    assert check.status is Status.PASS and "rotation (prefix-cache-thrash): 50 planned" in check.reason


def test_fault_names_are_read_across_chunks_with_different_dictionaries() -> None:
    from kfchaos.verdict.requests import from_table

    # Each shard's (or stage's) file has its own dictionary; concatenated, the chunks disagree on codes.
    table = concat(
        records(10, exponential(1.0, 5)), fault_rows("a", 3, 200.0), fault_rows("b", 2, 200.0, start=1_000_020.0)
    )
    requests = from_table(table)
    assert set(requests.fault_names) == {"a", "b"}
    assert requests.sent_by("a").sum() == 3 and requests.sent_by("b").sum() == 2 and not requests.sent_by("c").any()
    assert requests.where(requests.injected).sent_by("b").sum() == 2


def test_records_naming_more_faults_than_the_schema_holds_are_refused() -> None:
    import pyarrow as pa

    from kfchaos.records import RecordsError
    from kfchaos.verdict.requests import MAX_FAULT_NAMES, from_table

    table = records(10, exponential(1.0, MAX_FAULT_NAMES + 1))
    names = pa.array([f"f{i}" for i in range(table.num_rows)]).dictionary_encode()  # a hand-made file
    table = table.set_column(table.column_names.index("fault_request"), "fault_request", names)
    with pytest.raises(RecordsError, match="fault_request names over 32767 distinct faults"):
        from_table(table)
