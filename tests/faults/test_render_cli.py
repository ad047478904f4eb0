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


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_render_check_passes_shipped_experiments(path: Path) -> None:
    assert main(["render", str(path), "--check"]) == 0


def test_render_check_refuses_what_the_crd_schema_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kfchaos.cli.cmd_render as cmd_render

    real = cmd_render.render_experiment

    def with_unknown_field(*args: object, **kwargs: object) -> list[dict[str, object]]:
        manifests = real(*args, **kwargs)  # type: ignore[arg-type]
        manifests[0]["spec"]["latncy"] = "1s"
        return manifests

    monkeypatch.setattr(cmd_render, "render_experiment", with_unknown_field)
    assert main(["render", str(EXPERIMENTS / "vllm-network-delay.yaml"), "--check"]) == 3
    assert "latncy" in capsys.readouterr().err


def test_crds_are_vendored_inside_the_package() -> None:
    """A clone is self-contained: the CRDs come from the package, never from a folder beside the repository."""
    from kfchaos.faultspec.crdschema import CRD_DIR, load_crds

    repo = Path(__file__).resolve().parents[2]
    assert CRD_DIR.is_relative_to(repo / "src") or "site-packages" in str(CRD_DIR)
    assert {"podchaos", "networkchaos", "stresschaos", "httpchaos"} <= set(load_crds())
    assert (CRD_DIR.parent / "LICENSE").read_text().startswith(" " * 33 + "Apache License")


def test_nothing_reads_outside_the_repository() -> None:
    repo = Path(__file__).resolve().parents[2]
    offenders = [
        str(path.relative_to(repo))
        for folder in ("src", "tests", "scripts")
        for path in (repo / folder).rglob("*.py")
        if "shared/" in path.read_text(errors="replace") and path.name != "test_render_cli.py"
    ]
    assert offenders == []
