"""The gates' history travels packed (kfchaos.steps.results): on the real node, a 2-stage run's plain history was
27.5 KiB (data/node-run-history.json: the verdict task's `history` parameter of a PASS run of
tests/cluster/node/test_pipeline_real.py), and a task's parameters reach Argo's executor as one environment variable
capped at 128 KiB: the same run's verdict task came within 1 KiB of it, and the sharded run's went over ("exec
/usr/local/bin/argoexec: argument list too long", its verdict never written). Packed, a 5-stage ramp's history fits
several times over; old plain histories still read; a damaged or inflated one is refused by name."""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from kfchaos.errors import KfchaosError
from kfchaos.steps.results import HISTORY_PACKED, MAX_HISTORY_BYTES, StepResult, dump_history, load_history

NODE_RUN = Path(__file__).parent / "data" / "node-run-history.json"


def _node_run() -> list[StepResult]:
    return [StepResult(**item) for item in json.loads(NODE_RUN.read_text())]


def _five_stage_ramp() -> list[StepResult]:
    """The node run's steady state, then its two stage results over the whole ramp, 10 to 100 %."""
    steady, *stages = _node_run()
    return [steady, *(replace(stages[i % len(stages)], stage=stage) for i, stage in enumerate((10, 30, 60, 90, 100)))]


def test_a_packed_history_reads_back_as_written_and_a_plain_one_still_reads() -> None:
    results = _node_run()
    packed = dump_history(results)
    assert packed.startswith(HISTORY_PACKED) and packed.isascii() and '"' not in packed  # nothing for JSON to escape
    assert load_history(packed) == results
    assert load_history(NODE_RUN.read_text()) == results  # a history written before it was packed
    assert load_history("") == [] and load_history(dump_history([])) == []


def test_a_five_stage_ramps_history_packs_to_a_fraction_of_the_executors_limit() -> None:
    """Plain, this history alone would be over 40 KiB, about what one task's parameters get in all before KFP's
    driver doubles and escapes them into a 128 KiB environment variable (measured on the node: 27.5 KiB of history
    made the 2-stage verdict task's variable 130,243 bytes). Packed it is under 18 KiB."""
    ramp = _five_stage_ramp()
    plain = json.dumps([r.__dict__ for r in ramp], sort_keys=True)
    packed = dump_history(ramp)
    assert len(plain) > 40_000
    assert len(packed) < 18_000, len(packed)
    assert load_history(packed) == ramp


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (HISTORY_PACKED + "not base64!", "not packed"),
        (HISTORY_PACKED + base64.b64encode(b"not zlib").decode(), "not packed"),
        (HISTORY_PACKED + base64.b64encode(zlib.compress(b"[1, 2")[:-4]).decode(), "cut short"),
        (HISTORY_PACKED + base64.b64encode(zlib.compress(b"\xff\xfe")).decode(), "not UTF-8"),
        (HISTORY_PACKED + base64.b64encode(zlib.compress(b'{"a": 1}')).decode(), "JSON list"),
    ],
)
def test_a_damaged_history_is_refused_naming_what_is_wrong(text: str, named: str) -> None:
    with pytest.raises(KfchaosError, match=named):
        load_history(text)


def test_a_history_that_inflates_past_the_bound_is_refused_before_it_is_held() -> None:
    bomb = zlib.compress(b" " * (MAX_HISTORY_BYTES + 1), 9)  # 64 MiB of blanks packs to about 64 KiB
    with pytest.raises(KfchaosError, match="more than"):
        load_history(HISTORY_PACKED + base64.b64encode(bomb).decode())
