"""`kfchaos render`: the shipped experiments render valid manifests; bad input exits 3 with FILE:LINE."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kfchaos.cli import main
from tests.conftest import EXPERIMENTS
from tests.support.kubeapi import validate_chaos_object

SHIPPED = sorted(EXPERIMENTS.glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_experiments_render(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(path), "--run-id", "ci-1"]) == 0
    documents = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    for manifest in documents:
        assert validate_chaos_object(manifest) == []
        assert manifest["metadata"]["labels"]["kfchaos.io/run-id"] == "ci-1"


def test_shipped_experiments_exist() -> None:
    assert len(SHIPPED) >= 3


def test_bad_experiment_exits_3_with_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (EXPERIMENTS / "vllm-network-delay.yaml").read_text().replace("latency: 200ms", "latency: 200")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "latency: 200" in row)
    assert main(["render", str(bad)]) == 3
    assert f"{bad}:{line}: spec.faults[0].params.latency" in capsys.readouterr().err


def test_refusal_names_rule_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        (EXPERIMENTS / "vllm-replica-kill.yaml")
        .read_text()
        .replace("      mode: one\n", "      mode: one\n      containers: []\n      type: container-kill\n", 1)
    )
    text = text.replace("      type: pod-kill\n", "", 1)
    bad = tmp_path / "ck.yaml"
    bad.write_text(text)
    assert main(["render", str(bad)]) == 3
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "spec.faults[0].containers" in err and "container-kill needs containers" in err


def test_run_id_and_pipeline_version_options(capsys: pytest.CaptureFixture[str]) -> None:
    path = EXPERIMENTS / "vllm-network-delay.yaml"
    assert main(["render", str(path), "--run-id", "nightly-7", "--pipeline-version", "3.1.0"]) == 0
    (manifest,) = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert manifest["metadata"]["labels"]["kfchaos.io/run-id"] == "nightly-7"
    assert manifest["metadata"]["labels"]["kfchaos.io/pipeline-version"] == "3.1.0"
