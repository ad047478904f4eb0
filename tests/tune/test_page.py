"""The sweep's page (kfchaos.tune.page, the frontier chart of kfchaos.tune.frontier) drawn from the JSON `kfchaos tune
--json` writes, through the command a team runs (`kfchaos tune --from-json RESULT --html PAGE`), with no run: the
outcomes are built directly and written by the real document code (kfchaos.tune.table.document); a real sweep's
JSON is tests/tune/data/demo-tune.json. What is read is the page itself: its table rows, the figure's traces as
plotly.js gets them, and what it links to."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from kfchaos.cli import main
from kfchaos.demo.runner.localtune import DEMO_GRID, DEMO_TUNE_EXPERIMENT, TuneResult
from kfchaos.tune.frontier import OOM_KILLED, RECOMMENDED
from kfchaos.tune.outcome import NOT_RUN, ConfigOutcome, StageOutcome, without_run
from kfchaos.tune.page import DATA_ID, RECOMMENDED_ROW
from kfchaos.tune.recommend import recommend
from kfchaos.tune.resultfile import load_result
from kfchaos.tune.sweep import load_sweep
from kfchaos.tune.table import document
from tests.tune.pagereader import parsed, traces

DEMO_RESULT = Path(__file__).parent / "data" / "demo-tune.json"
COST_RULE = "GPU memory reserved"


def outcomes() -> list[ConfigOutcome]:
    return [
        # Cheapest, OOM-killed at 100 %: its P99 there is infinite (requests never completed).
        ConfigOutcome("unsafe", "--max-num-seqs 256", 0.5, "FAIL",
                      [StageOutcome(30, "PASS", 500, 0.99, 0, 0.41), StageOutcome(100, "FAIL", 900, 0.6, 1, math.inf)],
                      1, "runs/unsafe"),
        # Stopped by an abort rule after 30 %: placed where it stopped, not at a stage it never reached.
        ConfigOutcome("stopped", "--max-num-seqs 192", 0.7, "FAIL",
                      [StageOutcome(30, "FAIL", 500, 0.8, 0, 1.4), StageOutcome(100, NOT_RUN)], 0, "runs/stopped"),
        ConfigOutcome("tuned", "--max-num-seqs 128", 0.85, "PASS",
                      [StageOutcome(30, "PASS", 500, 1.0, 0, 0.3), StageOutcome(100, "PASS", 900, 0.995, 0, 0.9)],
                      0, "runs/tuned"),
        ConfigOutcome("dear", "--max-num-seqs 64", 2.0, "PASS",
                      [StageOutcome(30, "PASS", 500, 1.0, 0, 0.2), StageOutcome(100, "PASS", 900, 1.0, 0, 0.5)],
                      0, "runs/dear"),
        without_run("ghost", "--max-loras 4", 0.9, [30, 100], "no run folder: the stack did not start"),
    ]  # fmt: skip


def write_result(path: Path, runs: list[ConfigOutcome]) -> Path:
    doc = document("exp.yaml", "grid.yaml", runs, recommend(runs, COST_RULE), 1.0)
    path.write_text(json.dumps(doc, indent=1))
    return path


def draw(tmp_path: Path, runs: list[ConfigOutcome]) -> tuple[int, str]:
    result = write_result(tmp_path / "result.json", runs)
    code = main(["tune", "--from-json", str(result), "--html", str(tmp_path / "tune.html")])
    return code, (tmp_path / "tune.html").read_text()


def test_the_page_names_every_configuration_rings_the_recommended_and_draws_the_oom_killed_as_such(
    tmp_path: Path,
) -> None:
    code, page = draw(tmp_path, outcomes())
    assert code == 0
    reader = parsed(page)
    assert list(reader.rows) == ["unsafe", "stopped", "tuned", "dear", "ghost"]  # every one, in grid order
    assert [name for name, cls in reader.rows.items() if cls == RECOMMENDED_ROW] == ["tuned"]

    drawn = traces(page)
    assert drawn[RECOMMENDED]["customdata"] == ["tuned"]
    oom = drawn[OOM_KILLED]
    assert oom["customdata"] == ["unsafe"] and oom["marker"]["symbol"] == "hexagram"
    assert all("unsafe" not in trace["customdata"] for name, trace in drawn.items() if name in ("FAIL", "PASS"))
    # Its infinite P99 stands in the ∞ column, right of every measured P99 and of p99_max (1000 ms).
    assert oom["x"][0] > 1400 and "requests never completed" in page
    # The run an abort rule stopped is placed at the stage it reached (30 %: P99 1400 ms), not at 100 %.
    assert (drawn["FAIL"]["customdata"], drawn["FAIL"]["x"], drawn["FAIL"]["y"]) == (["stopped"], [1400.0], [0.8])
    assert drawn["PASS (whole ramp)"]["customdata"] == ["tuned", "dear"]
    # The configuration with no run cannot be placed: said under the chart, not drawn anywhere.
    assert "not drawn (no goodput or P99 at any judged stage): ghost" in page
    assert all("ghost" not in trace["customdata"] for trace in drawn.values())

    data = json.loads(re.search(rf'id="{DATA_ID}">(.*?)</script>', page, re.S)[1])  # type: ignore[index]
    assert data["recommendation"]["recommended"] == "tuned"
    assert "unsafe: FAIL" in page and "never recommended" in page  # the evidence


def test_the_page_is_offline_one_inline_plotly_and_a_policy_that_runs_only_its_own_scripts(tmp_path: Path) -> None:
    _, page = draw(tmp_path, outcomes())
    reader = parsed(page)
    assert reader.fetches == []  # no script src, no link href, no image from anywhere
    assert "link" not in reader.tags
    assert page.count("plotly.js v") == 1 and page.count("Plotly.newPlot(") == 1
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert policy is not None and "default-src &#x27;none&#x27;" in policy[1]
    assert "http" not in policy[1]


def test_the_json_reads_back_as_written_and_the_rule_not_the_file_decides_the_pick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = outcomes()
    result = load_result(write_result(tmp_path / "r.json", runs))
    assert result.outcomes == runs  # an infinite P99 included (null and p99_infinite in the JSON)
    assert result.recommendation.chosen is result.outcomes[2] and result.disagreement is None

    edited = json.loads((tmp_path / "r.json").read_text())
    edited["recommendation"]["recommended"] = "unsafe"  # the cheapest, OOM-killed
    (tmp_path / "r.json").write_text(json.dumps(edited))
    code = main(["tune", "--from-json", str(tmp_path / "r.json"), "--html", str(tmp_path / "p.html")])
    assert code == 0
    assert "warning: the file recommends unsafe, but by the rule over its own outcomes it is tuned" in (
        capsys.readouterr().err
    )
    page = (tmp_path / "p.html").read_text()
    assert parsed(page).rows["unsafe"] == "" and traces(page)[RECOMMENDED]["customdata"] == ["tuned"]


def test_when_none_passes_the_page_rings_nothing_and_exits_1(tmp_path: Path) -> None:
    runs = [o for o in outcomes() if o.name in ("unsafe", "stopped")]
    code, page = draw(tmp_path, runs)
    assert code == 1
    assert RECOMMENDED not in traces(page)
    assert RECOMMENDED_ROW not in parsed(page).rows.values()
    assert "none of the configurations PASSes the whole ramp; closest: stopped (not recommended)" in page


def test_a_real_sweeps_json_draws_its_unsafe_settings_oom_killed_and_the_tuned_ones_recommended(
    tmp_path: Path,
) -> None:
    code = main(["tune", "--from-json", str(DEMO_RESULT), "--html", str(tmp_path / "demo.html")])
    page = (tmp_path / "demo.html").read_text()
    drawn = traces(page)
    assert code == 0
    assert drawn[OOM_KILLED]["customdata"] == ["unsafe"]
    assert drawn[RECOMMENDED]["customdata"] == ["tuned"]
    assert parsed(page).rows == {"unsafe": "", "tuned": RECOMMENDED_ROW}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["tune", "--from-json", "r.json", "exp.yaml"], "EXPERIMENT not allowed with it"),
        (["tune", "exp.yaml", "--grid", "g.yaml", "--output", "o.yaml", "--html", "p.html"], "not a compiled one"),
        (["tune", "--local", "--grid", "g.yaml"], "required: EXPERIMENT and --grid"),
    ],
)
def test_arguments_that_do_not_go_together_are_a_usage_error(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 3 and says in capsys.readouterr().err


def test_a_result_file_missing_a_field_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(write_result(tmp_path / "r.json", outcomes()).read_text())
    del doc["configurations"][1]["stages"][0]["status"]
    (tmp_path / "r.json").write_text(json.dumps(doc))
    assert main(["tune", "--from-json", str(tmp_path / "r.json")]) == 3
    assert "r.json: not a kfchaos.TuneResult document: configurations.1.stages.0.status: Field required" in (
        capsys.readouterr().err
    )


def test_demo_tune_leaves_its_page_and_the_json_it_was_drawn_from_beside_its_run_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runs are the real sweep's (tests/tune/data/demo-tune.json, from tests/demo/test_tune.py's code path); what
    # is checked here is what `demo tune` writes after them, without five minutes of runs.
    real = load_result(DEMO_RESULT)
    swept = TuneResult(load_sweep(DEMO_TUNE_EXPERIMENT, DEMO_GRID), real.outcomes, real.recommendation, 190.0)
    monkeypatch.setattr("kfchaos.demo.runner.localtune.tune_locally", lambda *args: swept)
    assert main(["demo", "tune", "--runs", str(tmp_path / "runs")]) == 0
    (page,) = (tmp_path / "runs").glob("tune-demo-settings-*.html")
    (written,) = (tmp_path / "runs").glob("tune-demo-settings-*.json")
    assert page.stem == written.stem
    again = load_result(written)
    assert again.outcomes == real.outcomes and again.p99_max == 12.0  # the demo experiment's own p99_max
    assert traces(page.read_text())[OOM_KILLED]["customdata"] == ["unsafe"]


def test_text_from_the_grid_is_shown_as_written_never_as_markup(tmp_path: Path) -> None:
    runs = outcomes()
    runs[2] = dataclasses.replace(runs[2], settings="--served-model-name <img src=x onerror=alert(1)>")
    _, page = draw(tmp_path, runs)
    reader = parsed(page)
    assert reader.fetches == [] and "img" not in reader.tags  # in the table, the chart's hover and the JSON
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
