"""`kfchaos doctor` with no cluster: one line that says so, and exit 5 (not 1, FAIL's code), instead of a row per
check each failing with its own connection error and its own fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kfchaos.cli import main
from kfchaos.demo.stack.ports import free_port
from kfchaos.doctor.model import EXIT_NO_CLUSTER
from tests.conftest import ROOT

EXPERIMENT = ROOT / "experiments/vllm-network-delay.yaml"


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gone", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
                "current-context": "gone",
            }
        )
    )
    return path


def test_an_api_server_that_does_not_answer_is_one_line_and_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", server)
    args = ["doctor", "--experiment", str(EXPERIMENT), "--root", str(ROOT), "--kubeconfig", str(kubeconfig)]
    assert main(args) == EXIT_NO_CLUSTER != 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out
    assert out[0].startswith(f"kfchaos doctor: cannot reach the API server at {server}")
    assert "MaxRetryError" not in out[0]
    assert main([*args, "--json"]) == EXIT_NO_CLUSTER
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is False and document["no_cluster"].startswith("cannot reach the API server")


def test_no_cluster_configured_is_one_line_and_exit_5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    args = ["doctor", "--experiment", str(EXPERIMENT), "--root", str(ROOT)]
    assert main(args) == EXIT_NO_CLUSTER
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("kfchaos doctor: no cluster configured"), out
