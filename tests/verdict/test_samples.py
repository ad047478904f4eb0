"""Sample sizes before the run (kfchaos.verdict.samples, `kfchaos validate`): the fewest requests that can PASS
come from the verdict's own checks, and a stage planned too small is named before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kfchaos.cli import main
from kfchaos.validate import load_experiment
from kfchaos.verdict.checks import rate_check, tail_check
from kfchaos.verdict.model import Status
from kfchaos.verdict.samples import requests_to_pass, stage_support
from kfchaos.verdict.stats import TAIL
from tests.conftest import ROOT

STARTER = ROOT / "src/kfchaos/data/starter-experiment.yaml"


@pytest.mark.parametrize(
    ("limit", "above", "figure"), [(TAIL, 0, 368), (TAIL, 1, 555), (TAIL, 2, 720), (0.005, 0, 736)]
)
def test_the_figures_are_where_the_verdicts_own_checks_turn_to_pass(limit: float, above: int, figure: int) -> None:
    """Cross-checked against tail_check / rate_check themselves: PASS at the figure, not one request below."""
    assert requests_to_pass(limit, 0.95, above) == figure
    for n, expected in ((figure, Status.PASS), (figure - 1, Status.INCONCLUSIVE)):
        if limit == TAIL:
            values = np.concatenate([np.full(n - above, 1.0), np.full(above, 9.0)])
            check = tail_check("p99", values, 0, 5.0, min_samples=1, confidence=0.95, what="latency")
        else:
            check = rate_check("error_rate", above, n, limit, min_samples=1, confidence=0.95)
        assert check.status is expected, (n, check.reason)


def test_a_zero_limit_can_never_pass() -> None:
    assert requests_to_pass(0.0, 0.95) is None


def test_the_starter_plans_enough_for_every_check() -> None:
    support = stage_support(load_experiment(STARTER), STARTER.parent)
    assert [(s.stage, s.planned) for s in support] == [(75, 456), (100, 607)]
    assert all(not s.short for s in support)


def test_validate_names_a_stage_too_small_for_its_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "small.yaml"
    text = STARTER.read_text().replace("stages: [75, 100]", "stages: [10, 100]")
    path.write_text(text.replace("error_rate_max: 1%", "error_rate_max: 0.5%"))
    assert main(["validate", str(path)]) == 0  # a warning: an INCONCLUSIVE run is allowed, never a silent one
    captured = capsys.readouterr()
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "stages: [10, 100]" in t)
    planned = stage_support(load_experiment(path), tmp_path)[0].planned
    assert planned < 368  # 10 % of 30 requests/s for 20 s
    warning = next(w for w in captured.err.splitlines() if "spec.traffic.stages" in w)
    assert warning.startswith(f"{path}:{line}: spec.traffic.stages: warning: stage 10%: {planned} requests planned")
    assert "error_rate (needs >= 736 with none above its limit)" in warning
    assert "stage 100%: 607 requests planned" in captured.out
    assert main(["validate", "--json", str(path)]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["files"]
    small, full = entry["stages"]
    assert small["planned"] == planned and "error_rate" in small["too_few_for"]
    assert full["too_few_for"] == ["error_rate"]  # 607 requests cannot show <= 0.5 % (736 needed)
