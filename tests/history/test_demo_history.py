"""Issue 47's demo case on real run folders: four runs a side of a 200 ms -> 800 ms network delay against the demo
LLM server are claimed by `kfchaos history --compare` as a regression of p99_drift at the stages where it moved,
and four runs a side of the same 200 ms delay (1.0.0 -> 1.0.1, a bump that changed nothing) as nothing.

One demo stack (server, fault proxy, Prometheus) for the module, its control baseline recorded as `kfchaos demo`
records it; twelve runs made against it (tests/history/demo_runs.py), one at a time: two replays at once would share
two busy cores with the server and proxy, and a replayer that falls behind makes its stage INVALID. The versions
take turns (1.0.0, 1.0.1, 1.1.0, 1.0.0, ...) so that a machine growing busier or quieter during the test falls on
every version alike instead of looking like a version's effect. The A/A bump is what shows the regression claim
is the delay's doing: the same test on the same stack, with the same delay on both sides, must claim nothing."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kfchaos.demo.runner.scenarios import SCENARIOS, _capture_baseline
from kfchaos.demo.stack.demostack import DemoStack
from kfchaos.history.regression import NO_REGRESSION, REGRESSION
from tests.history.demo_runs import NAME, STAGES, DemoRun, cli, experiment_file, make_run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="the demo needs Prometheus (`make prometheus`)"),
]

RUNS_A_SIDE = 4
# version -> the network delay its runs carry
VERSIONS = {"1.0.0": "200ms", "1.0.1": "200ms", "1.1.0": "800ms"}
# The demo's tuned server (330 ms decode steps, prefix caching), with room for every request in flight at once:
# 130 req/s of ~1 s requests is more than its 128 sequences, and a queue at the server would be the server's
# latency, not the delay's.
SETTINGS = dataclasses.replace(SCENARIOS["tuned"][1], max_num_seqs=256, restart_delay_s=0.5)


@dataclasses.dataclass(frozen=True)
class DemoHistory:
    runs: Path
    made: list[DemoRun]
    seconds: float


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoHistory]:
    started = time.monotonic()
    work = tmp_path_factory.mktemp("demo-history")
    with DemoStack(SETTINGS, workdir=work / "stack") as stack:
        baseline = work / "baseline.yaml"
        # The control (a fault-free replay at each stage rate, the drift's reference) and the production figures
        # from the stack's Prometheus, as `kfchaos demo` records them for a scenario.
        control = experiment_file(work / "control", "1.0.0", "200ms", baseline)
        _capture_baseline(stack, control, baseline, seconds=4.0)
        experiments = {v: experiment_file(work / "experiments", v, delay, baseline) for v, delay in VERSIONS.items()}
        made: list[DemoRun] = []
        for _ in range(RUNS_A_SIDE):
            for version, delay in VERSIONS.items():
                run_id = f"{NAME}-{len(made):02d}-{version}"
                made.append(make_run(stack, experiments[version], work / "runs", work / "inputs", run_id, delay))
    yield DemoHistory(work / "runs", made, time.monotonic() - started)


def _compare(history: DemoHistory, old: str, new: str) -> tuple[int, dict[str, Any], str]:
    code, said = cli("history", NAME, "--runs", str(history.runs), "--compare", old, new, "--json")
    again, markdown = cli("history", NAME, "--runs", str(history.runs), "--compare", old, new)
    assert again == code, markdown
    document = json.loads(said)
    return code, document, markdown


def _show(history: DemoHistory, markdown: str, runs: bool) -> None:
    """The per-run drifts and the comparison, for docs/history.md (seen with -s)."""
    if runs:
        print(f"\n{len(history.made)} demo runs in {history.seconds:.0f} s")
        for run in history.made:
            drift = "  ".join(f"{s}%: -" if v is None else f"{s}%: {100 * v:+.1f} %" for s, v in run.drift().items())
            print(f"  {run.run_id:<22} {run.latency:>6}  exit {run.verdict_code}  p99_drift {drift}  "
                  f"{run.statuses('p99_drift')}  {run.seconds:.0f}s")  # fmt: skip
    print(markdown)


def _comparisons(document: dict[str, Any]) -> list[dict[str, Any]]:
    (bump,) = document["comparisons"]
    comparisons: list[dict[str, Any]] = bump["comparisons"]
    return comparisons


def test_the_800ms_delay_is_claimed_as_a_p99_drift_regression_where_it_moved(history: DemoHistory) -> None:
    code, document, markdown = _compare(history, "1.0.1", "1.1.0")
    _show(history, markdown, runs=True)
    assert code == 1, markdown  # a regression
    found = _comparisons(document)
    regressed = {(c["check"], c["stage"]) for c in found if c["outcome"] == REGRESSION}
    # The delay moved every stage's latency: p99_drift is claimed at each, with 4 verified runs a side.
    assert {("p99_drift", stage) for stage in STAGES} <= regressed, markdown
    for c in found:
        if c["check"] == "p99_drift":
            assert (c["old_runs"], c["new_runs"], c["worse"]) == (RUNS_A_SIDE, RUNS_A_SIDE, "higher"), c
            assert c["new_median"] > c["old_median"], c
    # Only what a longer delay moves: the latency checks (the end-to-end P99, its drift, the first token's P99).
    assert {check for check, _ in regressed} <= {"p99_drift", "p99", "ttft_p99"}, markdown
    assert "| :red_circle: regression | `p99_drift` | 75% |" in markdown
    assert "| :red_circle: regression | `p99_drift` | 100% |" in markdown


def test_the_same_delay_on_both_sides_is_claimed_as_nothing(history: DemoHistory) -> None:
    code, document, markdown = _compare(history, "1.0.0", "1.0.1")
    _show(history, markdown, runs=False)
    assert code == 0, markdown  # no regression
    found = _comparisons(document)
    assert not [c for c in found if c["outcome"] == REGRESSION], markdown
    # Not a vacuous "nothing": the same p99_drift comparisons were made and decided, 4 runs a side.
    drift = {c["stage"]: c for c in found if c["check"] == "p99_drift"}
    assert set(drift) == set(STAGES)
    assert all(c["outcome"] == NO_REGRESSION and c["p_value"] is not None for c in drift.values()), markdown
