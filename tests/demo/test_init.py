"""`kfchaos init`: the starter experiment the README shows, written where asked, valid as written, with the demo
stack's control baseline copied beside it when `demo-up.env` names one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kfchaos.baseline import BaselineError, load_baseline
from kfchaos.cli import main
from kfchaos.cli.cmd_init import DEMO_BASELINE_ENV, TEMPLATE_NAME, experiment_name, template_text
from kfchaos.spec import baseline_path
from kfchaos.validate import load_experiment, load_experiment_warnings
from tests.report.sample import write_sample

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_shows_the_starter_that_init_writes() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", readme, flags=re.S)
    assert template_text() in blocks


def test_init_writes_a_valid_experiment_named_after_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DEMO_BASELINE_ENV, raising=False)
    assert main(["init", "team/Latency_Check.yaml"]) == 0
    path = tmp_path / "team" / "Latency_Check.yaml"
    experiment = load_experiment(path)
    assert experiment.metadata.name == "latency-check" and TEMPLATE_NAME not in path.read_text()
    # Only the missing baseline is worth a warning, and init says how to get one.
    assert [w.path for w in load_experiment_warnings(path)] == [("spec", "baseline", "file")]
    assert "baseline capture" in capsys.readouterr().out
    # A second init does not overwrite the user's edits.
    assert main(["init", "team/Latency_Check.yaml"]) == 3
    assert main(["init", "team/Latency_Check.yaml", "--force"]) == 0


def test_init_makes_the_demo_stacks_control_baseline_the_new_experiments_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Named after the experiment, its control's records in a file of their own: a second init leaves the first
    experiment's records alone, and records written over are refused by name wherever the baseline is read."""
    stack = write_sample(tmp_path / "runs" / ".work" / "up-tuned", with_control=True)
    demo_records = stack.baseline.parent / "baseline.control.parquet"
    monkeypatch.setenv(DEMO_BASELINE_ENV, str(stack.baseline))
    monkeypatch.chdir(tmp_path)
    assert main(["init", "exp/mine.yaml"]) == 0
    assert main(["init", "exp/other.yaml"]) == 0
    experiment = load_experiment(tmp_path / "exp" / "mine.yaml")
    found = baseline_path(tmp_path / "exp" / "mine.yaml", experiment)
    assert found == tmp_path / "exp" / "mine.baseline.yaml"
    mine, _ = load_baseline(found)  # sealed again: content_hash and records_sha256 hold
    demo, _ = load_baseline(stack.baseline)
    assert mine.experiment == "mine" and mine.control is not None and demo.control is not None
    assert mine.control.records == "mine.baseline.control.parquet"
    assert mine.control.records_sha256 == demo.control.records_sha256 and mine.series == demo.series
    assert (tmp_path / "exp" / "mine.baseline.control.parquet").read_bytes() == demo_records.read_bytes()
    other, _ = load_baseline(tmp_path / "exp" / "other.baseline.yaml")
    assert other.experiment == "other" and other.control is not None
    assert other.control.records == "other.baseline.control.parquet"
    # Records written over (another control's) no longer match records_sha256: refused, the file named.
    (tmp_path / "exp" / "mine.baseline.control.parquet").write_bytes(b"PAR1 another control's records")
    with pytest.raises(
        BaselineError, match=r"mine\.baseline\.control\.parquet: sha256 .* is not control\.records_sha256"
    ):
        load_baseline(found)
    assert main(["validate", "exp/mine.yaml"]) == 3


def test_init_refuses_a_demo_baseline_whose_records_were_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = write_sample(tmp_path / "stack", with_control=True)
    (stack.baseline.parent / "baseline.control.parquet").write_bytes(b"PAR1 not the control's")
    monkeypatch.setenv(DEMO_BASELINE_ENV, str(stack.baseline))
    monkeypatch.chdir(tmp_path)
    assert main(["init", "mine.yaml"]) == 3
    assert not (tmp_path / "mine.baseline.yaml").exists()


def test_a_gone_demo_baseline_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEMO_BASELINE_ENV, str(tmp_path / "gone.yaml"))
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 3
    assert not (tmp_path / "my-experiment.yaml").exists()


@pytest.mark.parametrize(
    ("file", "name"), [("a.yaml", "a"), ("__.yaml", "my-experiment"), ("X" * 80 + ".yaml", "x" * 63)]
)
def test_names_are_dns_labels(file: str, name: str) -> None:
    assert experiment_name(Path(file)) == name


def test_init_repo_lays_out_a_team_repository_and_keeps_what_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DEMO_BASELINE_ENV, raising=False)
    (tmp_path / "README.md").write_text("our serving repository\n")
    assert main(["init", "--repo"]) == 0
    out = capsys.readouterr().out
    assert "kept README.md" in out and (tmp_path / "README.md").read_text() == "our serving repository\n"
    experiment = load_experiment(tmp_path / "experiments" / "my-experiment.yaml")
    assert experiment.spec.baseline.file == "../baselines/my-experiment.baseline.yaml"
    assert (tmp_path / "pipelines" / "compiled" / "my-experiment" / "0.1.0.yaml").is_file()
    assert (tmp_path / ".github" / "workflows" / "kfchaos.yml").is_file() and (tmp_path / ".gitlab-ci.yml").is_file()
    assert "runs/" in (tmp_path / ".gitignore").read_text().split()
    assert "no baseline yet (baselines/my-experiment.baseline.yaml)" in out
    # Again: everything kept, nothing compiled anew, still exit 0.
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main(["init", "--repo"]) == 0
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert main(["init", "--repo", "../elsewhere.yaml"]) == 3
