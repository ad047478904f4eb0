"""The fake KFP API (tests/support/kfpapi.py, kept for fast tests) against KFP's own API server: the same kfchaos
calls, the same outcome as kfp.Client reads it back (issue 24, item 4)."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kfchaos.cli import main
from kfchaos.kfp.versioning import read_lock
from tests.cluster.conftest import RealCluster
from tests.support.kfpapi import KfpApiServer

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def _stop_this_modules_runs(runs_stopped_after: None) -> None:
    """The runs this module submits are stopped at its end (tests/cluster/conftest.py, stop_runs)."""


ROOT = Path(__file__).resolve().parents[2]
LOCK = read_lock(ROOT / "pipelines/versions.lock.yaml")
EXPERIMENT = ROOT / "experiments/vllm-network-delay.yaml"


@pytest.fixture(autouse=True)
def _no_kfp_context(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.delenv("KFCHAOS_IMAGE", raising=False)


@pytest.fixture(params=["fake", "real"])
def host(request: pytest.FixtureRequest, real_cluster: RealCluster) -> Iterator[str]:
    if request.param == "fake":
        with KfpApiServer() as api:
            yield api.url
        return
    if not real_cluster.env.kfp_host:
        message = "the local control plane did not start KFP's API server (no KFP_HOST in .cluster/env)"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    yield real_cluster.env.kfp_host


def _checkout(root: Path, name: str, version: str) -> Path:
    entry = LOCK[name]
    target = root / "pipelines/compiled" / name / f"{version}.yaml"
    target.parent.mkdir(parents=True)
    shutil.copy(ROOT / entry.file, target)
    lock = {"version": version, "ir_hash": entry.ir_hash, "file": str(target.relative_to(root))}
    lock["version_source"] = entry.version_source
    (root / "pipelines/versions.lock.yaml").write_text(yaml.safe_dump({"pipelines": {name: lock}}))
    document = yaml.safe_load(EXPERIMENT.read_text())
    document["metadata"]["version"] = version
    experiment = root / "experiment.yaml"
    experiment.write_text(yaml.safe_dump(document, sort_keys=False))
    return experiment


def _outcome(host: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """upload twice, then run --host: what the client reads back, with the ids taken out."""
    import kfp

    version = f"1.1.0-c{uuid.uuid4().hex[:8]}"
    experiment = _checkout(tmp_path, "vllm-network-delay", version)
    first = main(["upload", "vllm-network-delay", "--host", host, "--root", str(tmp_path)])
    first_out = capsys.readouterr().out
    second = main(["upload", "vllm-network-delay", "--host", host, "--root", str(tmp_path)])
    second_out = capsys.readouterr().out
    run_name = f"contract-{uuid.uuid4().hex[:8]}"
    ran = main(["run", str(experiment), "--host", host, "--root", str(tmp_path), "--run-name", run_name])
    client = kfp.Client(host=host)
    pipeline_id = client.get_pipeline_id("vllm-network-delay")
    versions = client.list_pipeline_versions(pipeline_id, page_size=100).pipeline_versions or []
    ours = [v for v in versions if v.display_name == version]
    flt = json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "string_value": run_name}]})
    runs = client.list_runs(page_size=10, filter=flt).runs or []
    run = client.get_run(runs[0].run_id) if len(runs) == 1 else None
    return {
        "exit codes": (first, second, ran),
        "first upload created": first_out.count("created "),
        "second upload found it": second_out.count("exists "),
        "versions named ours": len(ours),
        "runs named ours": len(runs),
        "run version is ours": run is not None
        and bool(ours)
        and run.pipeline_version_reference.pipeline_version_id == ours[0].pipeline_version_id,
        "run service account": run.service_account if run else None,
        "run parameters": sorted(dict(run.runtime_config.parameters)) if run else None,
        "experiment parameter": run.runtime_config.parameters["experiment"] == experiment.read_text() if run else None,
    }


EXPECTED: dict[str, Any] = {
    "exit codes": (0, 0, 0),
    "first upload created": 1,
    "second upload found it": 1,
    "versions named ours": 1,
    "runs named ours": 1,
    "run version is ours": True,
    "run service account": "kfchaos-runner",
    "experiment parameter": True,
}


def test_upload_and_run_read_back_the_same_from_the_fake_and_the_real_server(
    host: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = _outcome(host, tmp_path, capsys)
    parameters = outcome.pop("run parameters")
    assert outcome == EXPECTED
    assert parameters and "experiment" in parameters and "target" in parameters


def _history_outcome(host: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """A run submitted into a KFP experiment of its own, then `kfchaos history --host` over that experiment: the
    experiment found by name, its runs listed by experiment_id (newest first), the run still going named and left out;
    no other experiment's run (the server holds those of earlier tests) listed."""
    version = f"1.1.0-h{uuid.uuid4().hex[:8]}"
    experiment = _checkout(tmp_path, "vllm-network-delay", version)
    kfp_experiment = f"history-{uuid.uuid4().hex[:8]}"
    uploaded = main(["upload", "vllm-network-delay", "--host", host, "--root", str(tmp_path)])
    ran = main(["run", str(experiment), "--host", host, "--root", str(tmp_path), "--kfp-experiment", kfp_experiment])
    capsys.readouterr()
    code = main(["history", str(experiment), "--host", host, "--kfp-experiment", kfp_experiment, "--json"])
    document = json.loads(capsys.readouterr().out)
    return {
        "exit codes": (uploaded, ran, code),
        "runs counted": len(document["runs"]),
        "runs still going": [line.split(": ", 1)[1] for line in document["unreadable"]],
    }


def test_history_lists_one_experiments_runs_the_same_from_the_fake_and_the_real_server(
    host: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = _history_outcome(host, tmp_path, capsys)
    going = outcome.pop("runs still going")
    assert outcome == {"exit codes": (0, 0, 0), "runs counted": 0}
    assert len(going) == 1 and going[0] in ("PENDING, no verdict yet", "RUNNING, no verdict yet"), going
