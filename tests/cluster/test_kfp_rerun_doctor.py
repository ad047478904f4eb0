"""`kfchaos rerun` and `kfchaos doctor` against KFP's own API server (issue 24; docs/kfp-backend.md)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from kfchaos import audit
from kfchaos.cli import main
from kfchaos.doctor.diagnose import backend_tag
from kfchaos.kfp.versioning import read_lock
from kfchaos.traffic.api import plan_stage
from kfchaos.validate import parse_experiment
from tests.cluster.conftest import RealCluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def _stop_this_modules_runs(runs_stopped_after: None) -> None:
    """The runs this module submits are stopped at its end (tests/cluster/conftest.py, stop_runs)."""


ROOT = Path(__file__).resolve().parents[2]
LOCK = read_lock(ROOT / "pipelines/versions.lock.yaml")
EXPERIMENT = ROOT / "experiments/vllm-network-delay.yaml"
# The release cluster/kfp-apiserver/go.mod pins (its healthz `tag_name`, set as KFP's image sets it).
RELEASE = "2.1.0"


@pytest.fixture(scope="module")
def kfp_host(real_cluster: RealCluster) -> str:
    host = real_cluster.env.kfp_host
    if not host:
        message = "the local control plane did not start KFP's API server (no KFP_HOST in .cluster/env)"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return host


@pytest.fixture(autouse=True)
def _no_kfp_context(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.delenv("KFCHAOS_IMAGE", raising=False)


def _client(host: str) -> Any:
    import kfp

    return kfp.Client(host=host)


def _run_named(client: Any, name: str) -> Any:
    flt = json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "string_value": name}]})
    (run,) = client.list_runs(page_size=10, filter=flt).runs or []
    return client.get_run(run.run_id)


def _plan_hashes(parameters: dict[str, Any]) -> dict[int, str]:
    experiment = parse_experiment(parameters["experiment"], "run parameters.experiment")
    stages = experiment.spec.traffic.stages
    return {int(stage): plan_stage(experiment, int(stage), base_dir=EXPERIMENT.parent).hash for stage in stages}


def test_rerun_of_a_run_the_server_holds_gives_the_same_parameters_and_plan_hash(
    kfp_host: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Planning reads the target credential's variable; the plan hash names the header, never the value
    # (kfchaos.audit verifies plans the same way, with a placeholder).
    monkeypatch.setenv("KFCHAOS_TARGET_TOKEN", "placeholder")
    assert main(["upload", "vllm-network-delay", "--host", kfp_host, "--root", str(ROOT)]) == 0
    name = f"kfp-rerun-{uuid.uuid4().hex[:8]}"
    code = main(["run", str(EXPERIMENT), "--host", kfp_host, "--root", str(ROOT), "--run-name", name])
    assert code == 0, capsys.readouterr().err
    client = _client(kfp_host)
    original = _run_named(client, name)
    parameters = dict(original.runtime_config.parameters)
    # The record a finished run leaves, with the parameters exactly as the server stored them.
    record = audit.build_record(
        run_id=original.run_id,
        pipeline={
            "name": "vllm-network-delay",
            "version": LOCK["vllm-network-delay"].version,
            "ir_hash": LOCK["vllm-network-delay"].ir_hash,
        },
        image="ghcr.io/kfchaos/kfchaos:test",
        git_commit="abc123",
        parameters=parameters,
        steps=[],
        recovery=None,
        verdict={"status": "FAIL", "reasons": ["stage: p99 above"]},
        started_at=1.0,
        finished_at=2.0,
    )
    path = tmp_path / "audit.json"
    audit.write_record(record, path)
    rerun_name = f"{name}-again"
    assert main(["rerun", str(path), "--host", kfp_host, "--run-name", rerun_name]) == 0, capsys.readouterr().err

    again = _run_named(client, rerun_name)
    assert again.run_id != original.run_id
    assert dict(again.runtime_config.parameters) == parameters
    assert (
        again.pipeline_version_reference.pipeline_version_id == original.pipeline_version_reference.pipeline_version_id
    )
    assert _plan_hashes(dict(again.runtime_config.parameters)) == _plan_hashes(parameters)


def test_doctor_reads_the_real_servers_version_and_refuses_what_it_lacks(
    kfp_host: str, real_cluster: RealCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert backend_tag(kfp_host, None) == RELEASE
    # The network-delay pipeline injects the target Secret as an optional env source, which needs a 2.15
    # backend (kfchaos.doctor.kfpcheck OPTIONAL_SECRET): a 2.1.0 server must be reported as lacking it.
    main(
        [
            "doctor",
            "--experiment",
            str(EXPERIMENT),
            "--host",
            kfp_host,
            "--kubeconfig",
            str(real_cluster.admin_kubeconfig),
            "--root",
            str(ROOT),
            "--json",
        ]
    )
    checks = json.loads(capsys.readouterr().out)
    items = checks["checks"] if isinstance(checks, dict) else checks
    (version,) = [c for c in items if c["name"] == "kfp backend version"]
    assert version["status"] == "FAIL", version
    assert "backend 2.1.0 lacks" in version["detail"] and "optional Secret as env" in version["detail"], version
