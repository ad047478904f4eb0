"""Stage sampling, shards, looping, speed and the plan hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfchaos.errors import KfchaosError
from kfchaos.faultspec.params import LongContextBurstParams
from kfchaos.spec import Synthetic
from kfchaos.traffic.plan import plan_stage
from kfchaos.traffic.sampling import select, unit
from kfchaos.traffic.settings import ReplaySettings, TrafficFault


def recording(tmp_path: Path, n: int = 2000, gap: float = 0.01) -> str:
    path = tmp_path / "rec.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"r{i}", "timestamp": 500 + i * gap, "path": "/"}) + "\n" for i in range(n))
    )
    return str(path)


def ids(settings: ReplaySettings) -> list[str]:
    return [p.record_id for p in plan_stage(settings).schedule()]


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=30), st.integers(0, 2**31), st.floats(0, 1), st.floats(0, 1))
def test_a_request_in_a_smaller_stage_is_in_every_larger_one(request_id: str, seed: int, a: float, b: float) -> None:
    small, large = sorted((a, b))
    if select(request_id, seed, small):
        assert select(request_id, seed, large)


def test_stages_nest_and_have_the_right_size(tmp_path: Path) -> None:
    source = recording(tmp_path)
    subsets = {p: set(ids(ReplaySettings(stage=p, source=source, seed=42))) for p in (10, 30, 60, 90, 100)}
    assert subsets[10] <= subsets[30] <= subsets[60] <= subsets[90] <= subsets[100]
    assert len(subsets[100]) == 2000
    for p in (10, 30, 60, 90):
        assert len(subsets[p]) == pytest.approx(2000 * p / 100, abs=80)


def test_same_seed_same_requests_other_seed_other_requests(tmp_path: Path) -> None:
    source = recording(tmp_path)
    first = ids(ReplaySettings(stage=30, source=source, seed=7))
    assert first == ids(ReplaySettings(stage=30, source=source, seed=7))
    assert first != ids(ReplaySettings(stage=30, source=source, seed=8))


def test_recorded_timestamps_are_kept_relative_to_the_first(tmp_path: Path) -> None:
    source = recording(tmp_path, n=100)
    planned = list(plan_stage(ReplaySettings(stage=100, source=source)).schedule())
    assert [p.offset for p in planned[:3]] == pytest.approx([0.0, 0.01, 0.02])
    fast = list(plan_stage(ReplaySettings(stage=100, source=source, speed=2.0)).schedule())
    assert fast[-1].offset == pytest.approx(planned[-1].offset / 2)


def test_shards_are_disjoint_and_complete(tmp_path: Path) -> None:
    source = recording(tmp_path)
    whole = ids(ReplaySettings(stage=60, source=source, seed=3))
    parts = [set(ids(ReplaySettings(stage=60, source=source, seed=3, shard=i, shards=4))) for i in range(4)]
    assert sum(len(p) for p in parts) == len(whole)
    assert set().union(*parts) == set(whole)
    assert all(len(p) > len(whole) / 8 for p in parts)  # an even split, not one shard taking all


def test_loop_restarts_the_recording_and_marks_the_lap(tmp_path: Path) -> None:
    source = recording(tmp_path, n=100, gap=0.01)  # 1 s of traffic
    planned = list(plan_stage(ReplaySettings(stage=100, source=source, duration=2.5)).schedule())
    assert len(planned) == 250
    assert planned[100].record_id == "r0~1" and planned[100].offset == pytest.approx(1.0)
    offsets = [p.offset for p in planned]
    assert offsets == sorted(offsets) and offsets[-1] < 2.5
    once = list(plan_stage(ReplaySettings(stage=100, source=source, duration=2.5, loop=False)).schedule())
    assert len(once) == 100


def test_out_of_order_records_are_reordered(tmp_path: Path) -> None:
    path = tmp_path / "shuffled.jsonl"
    order = [3, 0, 2, 1, 4]
    path.write_text("".join(json.dumps({"id": f"r{i}", "timestamp": i}) + "\n" for i in order))
    planned = list(plan_stage(ReplaySettings(stage=100, source=str(path))).schedule())
    assert [p.record_id for p in planned] == ["r0", "r1", "r2", "r3", "r4"]


def test_plan_hash_is_stable_and_tracks_settings_and_content(tmp_path: Path) -> None:
    source = recording(tmp_path, n=50)
    base = ReplaySettings(stage=30, source=source, seed=1)
    assert plan_stage(base).hash == plan_stage(base).hash
    assert plan_stage(base).hash != plan_stage(base, seed=2).hash
    before = plan_stage(base).hash
    Path(source).write_text(Path(source).read_text().replace('"r3"', '"r3x"'))
    assert plan_stage(base).hash != before


def test_synthetic_rate_lengths_and_determinism() -> None:
    synthetic = Synthetic.model_validate(
        {"rate": 200, "arrival": "gamma", "burstiness": 0.5, "prompt_tokens": {"mean": 100, "stddev": 50, "max": 300},
         "long_context_share": "10%", "long_context_tokens": 5000}
    )  # fmt: skip
    settings = ReplaySettings(stage=100, synthetic=synthetic, duration=20.0, seed=5)
    planned = list(plan_stage(settings).schedule())
    assert len(planned) == pytest.approx(4000, rel=0.15)
    lengths = [p.request.prompt_tokens for p in planned]
    long_share = sum(1 for n in lengths if n == 5000) / len(lengths)
    assert long_share == pytest.approx(0.10, abs=0.03)
    assert all(1 <= n <= 300 for n in lengths if n != 5000)
    assert [p.request.prompt_tokens for p in plan_stage(settings).schedule()] == lengths
    assert all(unit(p.request.id, 5) < 0.3 for p in plan_stage(settings, stage=30).schedule())


def test_bursts_are_scheduled_in_the_stage_and_split_over_shards(tmp_path: Path) -> None:
    params = LongContextBurstParams(requests=6, context_tokens=1000, max_tokens=8, start="1s", every="2s")
    base = ReplaySettings(
        stage=100, source=recording(tmp_path, n=100), duration=5.0, traffic_faults=(TrafficFault("kv", params),)
    )
    bursts = [p for p in plan_stage(base).schedule() if p.request.long_context]
    assert sorted({p.offset for p in bursts}) == [1.0, 3.0]
    assert len(bursts) == 12
    shards = [{p.record_id for p in plan_stage(base, shard=i, shards=4).schedule() if p.request.long_context}
              for i in range(4)]  # fmt: skip
    assert sum(map(len, shards)) == 12 and set().union(*shards) == {p.record_id for p in bursts}


def test_bad_settings_are_refused() -> None:
    with pytest.raises(KfchaosError, match="exactly one traffic source"):
        ReplaySettings(stage=10)
    with pytest.raises(KfchaosError, match="shard 4/4"):
        ReplaySettings(stage=10, source="x", shard=4, shards=4)
    with pytest.raises(KfchaosError, match="not found"):
        plan_stage(ReplaySettings(stage=10, source="/nonexistent/file.jsonl"))


def test_constant_and_daily_shaped_arrivals() -> None:
    constant = Synthetic.model_validate({"rate": 100, "arrival": "constant"})
    offsets = [p.offset for p in plan_stage(ReplaySettings(stage=100, synthetic=constant, duration=1.0)).schedule()]
    assert offsets[:3] == pytest.approx([0.0, 0.01, 0.02]) and len(offsets) == 100  # relative to the first
    # The synthetic clock starts at 12:00; 12 hours on is 00:00, near the trough of the daily curve.
    daily = Synthetic.model_validate({"rate": 2, "daily_shape": True})
    planned = plan_stage(ReplaySettings(stage=100, synthetic=daily, duration=86400.0, speed=1.0)).schedule()
    per_hour = [0] * 24
    for p in planned:
        per_hour[int(p.offset // 3600)] += 1
    noon, three_am = per_hour[0], per_hour[15]
    assert noon > 3 * three_am  # 12:00 vs 03:00 of the curve
    assert max(range(24), key=per_hour.__getitem__) in (2, 3, 4)  # the peak, 15:00, is 3 h after the start


def test_plan_hash_ignores_where_the_file_lies(tmp_path: Path) -> None:
    source = recording(tmp_path, n=20)
    (tmp_path / "elsewhere").mkdir()
    copy = tmp_path / "elsewhere" / "rec.jsonl"
    copy.write_bytes(Path(source).read_bytes())
    assert (
        plan_stage(ReplaySettings(stage=10, source=source)).hash
        == plan_stage(ReplaySettings(stage=10, source=str(copy))).hash
    )
