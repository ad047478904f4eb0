"""Which kfp.local run is a local run's own (kfchaos.kfp.runs): its own pipeline root, never "the newest" run folder
of a root that other runs write into too (issue 35 §4)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kfchaos.errors import KfchaosError
from kfchaos.kfp.runs import RUN_ROOT_MARK, read_local_outcome, run_root


def _kfp_run(root: Path, name: str, status: str) -> Path:
    """A kfp.local run folder as the pipeline leaves it: <run>/verdict-report/audit."""
    run = root / name
    (run / "verdict-report").mkdir(parents=True)
    record = {"verdict": {"status": status, "reasons": [f"{status.lower()} reason"]}}
    (run / "verdict-report" / "audit").write_text(json.dumps(record))
    return run


def test_two_runs_started_in_one_second_get_roots_and_ids_of_their_own(tmp_path: Path) -> None:
    first, second = run_root(tmp_path, "demo"), run_root(tmp_path, "demo")
    assert first != second and (first / RUN_ROOT_MARK).is_file() and (second / RUN_ROOT_MARK).is_file()
    _kfp_run(first, "demo-2026-12-06-07-00-00-000001", "PASS")
    _kfp_run(second, "demo-2026-12-06-07-00-00-000002", "FAIL")
    one = read_local_outcome(first, "demo", since=time.time())
    two = read_local_outcome(second, "demo", since=time.time())
    assert (one.status, two.status) == ("PASS", "FAIL")  # each its own, whichever was written last
    assert (one.run_id, two.run_id) == (first.name, second.name)
    assert one.run_id.startswith("demo-") and one.run_id != two.run_id


def test_a_shared_root_with_several_runs_is_refused_never_the_newest_taken(tmp_path: Path) -> None:
    _kfp_run(tmp_path, "demo-2026-12-06-07-00-00-000001", "PASS")
    _kfp_run(tmp_path, "demo-2026-12-06-07-00-00-000002", "FAIL")
    with pytest.raises(KfchaosError, match=r"holds 2 kfp\.local runs of demo"):
        read_local_outcome(tmp_path, "demo", since=time.time() - 60)
