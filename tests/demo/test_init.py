"""`kfchaos init`: the starter experiment the README shows, written where asked, valid as written, with the demo
stack's control baseline copied beside it when `demo-up.env` names one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kfchaos.cli import main
from kfchaos.cli.cmd_init import DEMO_BASELINE_ENV, TEMPLATE_NAME, experiment_name, template_text
from kfchaos.spec import baseline_path
from kfchaos.validate import load_experiment, load_experiment_warnings

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


def test_init_copies_the_demo_stacks_control_baseline_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = tmp_path / "runs" / ".work" / "up-tuned"
    stack.mkdir(parents=True)
    (stack / "baseline.yaml").write_text("experiment: demo-llm-chaos\ncontrol:\n  records: baseline.control.parquet\n")
    (stack / "baseline.control.parquet").write_bytes(b"PAR1 records")
    monkeypatch.setenv(DEMO_BASELINE_ENV, str(stack / "baseline.yaml"))
    monkeypatch.chdir(tmp_path)
    assert main(["init", "exp/mine.yaml"]) == 0
    experiment = load_experiment(tmp_path / "exp" / "mine.yaml")
    found = baseline_path(tmp_path / "exp" / "mine.yaml", experiment)
    assert found == tmp_path / "exp" / "mine.baseline.yaml"
    assert found.read_text() == (stack / "baseline.yaml").read_text()
    assert (tmp_path / "exp" / "baseline.control.parquet").read_bytes() == b"PAR1 records"


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
