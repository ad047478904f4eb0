"""A stage split into shards is the same stage (issue 15 §4): the shards' plans are the unsharded plan, every
shard counts from one start time, and their records merge into one file in a stable order, refusing overlaps."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kfchaos.faultspec.params import LongContextBurstParams
from kfchaos.records import RecordsError
from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.merge import merge_records, stage_plan_hash
from kfchaos.traffic.recorder import Recorder, write_parquet
from kfchaos.traffic.settings import ReplaySettings, TrafficFault
from kfchaos.validate import load_experiment

from .loopback_server import LoopbackServer


def _recording(tmp_path: Path, n: int = 3000, gap: float = 0.004) -> str:
    path = tmp_path / "rec.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"r{i}", "timestamp": 9 + i * gap, "path": "/"}) + "\n" for i in range(n))
    )
    return str(path)


def _settings(tmp_path: Path) -> ReplaySettings:
    burst = TrafficFault("ctx", LongContextBurstParams(context_tokens=4000, requests=7, start="1s", every="3s"))
    # Looped twice over (the recording lasts 12 s), with bursts: every part of a plan the shards must split.
    return ReplaySettings(stage=60, source=_recording(tmp_path), seed=5, duration=30.0, traffic_faults=(burst,))


@pytest.mark.parametrize("shards", [2, 3, 7])
def test_the_union_of_the_shards_plans_is_the_unsharded_plan_with_its_hash(tmp_path: Path, shards: int) -> None:
    whole = plan_stage(_settings(tmp_path))
    planned = [(p.record_id, p.offset) for p in whole.schedule()]
    assert (
        len(planned) == len(set(planned))
        and any("~2" in r for r, _ in planned)
        and any("burst" in r for r, _ in planned)
    )
    parts = [plan_stage(whole.settings, shard=i, shards=shards) for i in range(shards)]
    pieces = [[(p.record_id, p.offset) for p in part.schedule()] for part in parts]
    assert sum(map(len, pieces)) == len(planned)  # disjoint ...
    assert sorted(x for piece in pieces for x in piece) == sorted(planned)  # ... and complete, offsets included
    assert all(piece for piece in pieces)
    # Each shard's own plan hash names its share; all name the same whole plan, the unsharded one's hash.
    assert len({part.hash for part in parts}) == shards and whole.hash not in {part.hash for part in parts}
    assert {stage_plan_hash(part.settings) for part in parts} == {whole.hash}
    assert stage_plan_hash(whole.settings) == whole.hash


def _with_traffic_faults() -> list[Path]:
    """Every shipped experiment with a traffic-side fault (each new fault type ships a demo scenario)."""
    from kfchaos.faultspec.kinds import TRAFFIC_SIDE_TYPES
    from tests.conftest import ROOT

    files = [
        *sorted((ROOT / "experiments").glob("*.yaml")),
        *sorted((ROOT / "src/kfchaos/demo/experiments").glob("*.yaml")),
    ]
    return [
        p for p in files if p.name != "schema.json" and any(f"type: {t}" in p.read_text() for t in TRAFFIC_SIDE_TYPES)
    ]


@pytest.mark.parametrize("path", _with_traffic_faults(), ids=lambda p: p.name)
def test_every_traffic_side_fault_splits_over_shards_into_its_unsharded_requests(path: Path) -> None:
    """kfchaos.traffic.trafficfaults: a generator must be a function of (fault, settings) only, the same in every shard
    pod, or the shards would send another plan than the one their hash names."""
    experiment = load_experiment(path)
    for stage in experiment.spec.traffic.stages:
        # A short stage: the generators' requests, not the recording, are what this checks.
        whole = plan_stage(
            experiment, stage, base_dir=path.parent, duration=min(60.0, experiment.spec.traffic.stage_duration)
        )
        faulty = sorted((p.record_id, p.offset) for p in whole.schedule() if p.request.fault is not None)
        pieces = [
            (p.record_id, p.offset)
            for i in range(3)
            for p in plan_stage(whole.settings, shard=i, shards=3).schedule()
            if p.request.fault is not None
        ]
        assert sorted(pieces) == faulty, (path.name, stage)


def _records(shard: int, rows: list[tuple[str, float]]) -> Recorder:
    recorder = Recorder(stage=30, shard=shard)
    for request_id, intended in rows:
        recorder.add(request_id, b"\x01" * 16, intended, intended + 0.001, 200, None, 0.1)
    return recorder


def test_merged_records_are_in_a_stable_order_whatever_order_the_files_come_in(tmp_path: Path) -> None:
    files = []
    rows = {0: [("a", 1.0), ("c", 2.0), ("e", 2.0)], 1: [("b", 1.0), ("d", 2.0)], 2: [("f", 0.5)]}
    for shard, items in rows.items():
        files.append(write_parquet(_records(shard, items).table(), tmp_path / f"s{shard}.parquet"))
    first = merge_records(files, tmp_path / "merged.parquet")
    second = merge_records(list(reversed(files)))
    assert first.column("request_id").to_pylist() == ["f", "a", "b", "c", "e", "d"]  # time, then shard, then id
    assert first.drop_columns(["trace_id"]).equals(second.drop_columns(["trace_id"]))
    assert pq.read_table(tmp_path / "merged.parquet").num_rows == 6
    assert merge_records([]).num_rows == 0


def test_a_request_in_two_shards_or_a_shard_twice_is_refused(tmp_path: Path) -> None:
    zero = write_parquet(_records(0, [("a", 1.0), ("x", 2.0)]).table(), tmp_path / "s0.parquet")
    one = write_parquet(_records(1, [("b", 1.0), ("x", 3.0)]).table(), tmp_path / "s1.parquet")
    with pytest.raises(RecordsError, match=r"1 request id\(s\) appear in more than one shard's file, e.g. 'x' in .*s0"):
        merge_records([zero, one])
    again = write_parquet(_records(0, [("c", 1.0)]).table(), tmp_path / "again.parquet")
    with pytest.raises(RecordsError, match="shard 0 is also in"):
        merge_records([zero, again])
    # A recording may repeat an id at another time: one shard sends both, as an unsharded replay would.
    repeat = write_parquet(_records(1, [("b", 1.0), ("b", 4.0)]).table(), tmp_path / "repeat.parquet")
    assert merge_records([repeat]).num_rows == 2


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as running:
        yield running


@pytest.mark.integration
def test_shards_send_on_one_schedule_from_the_common_start_time(server: LoopbackServer, tmp_path: Path) -> None:
    source = _recording(tmp_path, n=60, gap=0.01)
    whole = ReplaySettings(stage=100, source=source, duration=1.0, loop=False)
    start_at = time.time() + 1.0
    tables = [
        run_stage(plan_stage(whole, shard=i, shards=2), server.url, start_at=start_at).table for i in range(2)
    ]  # one after the other: the second shard starts late, and its lag says so
    offsets = {p.record_id: p.offset for p in plan_stage(whole).schedule()}
    for table in tables:
        ids, intended = table.column("request_id").to_pylist(), table.column("intended").to_pylist()
        assert [t - start_at for t in intended] == pytest.approx([offsets[i] for i in ids], abs=1e-6)
    sent = tables[0].column("sent").to_pylist()
    assert min(sent) >= start_at  # the first shard waited for the start time
    second = tables[1]
    late = [
        s - i for s, i in zip(second.column("sent").to_pylist(), second.column("intended").to_pylist(), strict=True)
    ]
    assert max(late) > 0.5  # it started after the first shard's second of traffic: visible as send lag
    assert sorted(seen.at >= start_at for seen in server.seen) == [True] * 60
