"""upload, run --host, schedule sync and rerun, driven through the real kfp.Client against the loopback KFP API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfchaos import audit
from kfchaos.cli import main
from kfchaos.kfp.versioning import read_lock
from tests.conftest import ROOT
from tests.support.kfpapi import KfpApiServer

LOCK = read_lock(ROOT / "pipelines/versions.lock.yaml")
EXPERIMENT = ROOT / "experiments/vllm-network-delay.yaml"


def _versions(api: KfpApiServer, pipeline: str) -> list[str]:
    pipeline_id = next(p["pipeline_id"] for p in api.state.pipelines.values() if p["display_name"] == pipeline)
    return sorted(v["display_name"] for v in api.state.versions.values() if v["pipeline_id"] == pipeline_id)


def _upload(api: KfpApiServer, *names: str) -> int:
    return main(["upload", *names, "--host", api.url, "--root", str(ROOT)])


def test_upload_names_the_first_version_after_our_version_and_is_idempotent(
    kfp_api: KfpApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _upload(kfp_api) == 0
    out = capsys.readouterr().out
    assert out.count("created ") == len(LOCK)
    # KFP names a new pipeline's first version after the pipeline; upload leaves only the version it asked for.
    assert _versions(kfp_api, "vllm-network-delay") == ["1.2.1"]
    assert _versions(kfp_api, "kfchaos-experiment") == [LOCK["kfchaos-experiment"].version]
    uploaded = next(v for v in kfp_api.state.versions.values() if v["display_name"] == "1.2.1")
    assert uploaded["pipeline_spec"]["pipelineInfo"]["name"] in LOCK

    assert _upload(kfp_api) == 0
    assert capsys.readouterr().out.count("exists ") == len(LOCK)
    assert _versions(kfp_api, "vllm-network-delay") == ["1.2.1"]


def test_upload_adds_a_new_version_to_an_existing_pipeline(kfp_api: KfpApiServer, tmp_path: Path) -> None:
    assert _upload(kfp_api, "vllm-network-delay") == 0
    # A bumped version in another checkout: same pipeline, new version file and lock entry.
    root = tmp_path / "repo"
    (root / "pipelines/compiled/vllm-network-delay").mkdir(parents=True)
    source = ROOT / LOCK["vllm-network-delay"].file
    (root / "pipelines/compiled/vllm-network-delay/1.2.2.yaml").write_bytes(source.read_bytes())
    entry = LOCK["vllm-network-delay"]
    (root / "pipelines/versions.lock.yaml").write_text(
        "pipelines:\n  vllm-network-delay:\n    version: 1.2.2\n    ir_hash: x\n"
        f"    file: pipelines/compiled/vllm-network-delay/1.2.2.yaml\n    version_source: {entry.version_source}\n"
    )
    assert main(["upload", "--host", kfp_api.url, "--root", str(root)]) == 0
    assert _versions(kfp_api, "vllm-network-delay") == ["1.2.1", "1.2.2"]
    assert len(kfp_api.state.pipelines) == 1


def test_run_submits_the_experiments_version_with_its_parameters_and_token(kfp_api: KfpApiServer) -> None:
    assert _upload(kfp_api, "vllm-network-delay") == 0
    code = main(
        ["run", str(EXPERIMENT), "--host", kfp_api.url, "--token", "s3cret", "--target", "http://10.0.0.7:8000"]
    )
    assert code == 0
    (run,) = kfp_api.state.runs.values()
    version_id = next(v for v, d in kfp_api.state.versions.items() if d["display_name"] == "1.2.1")
    assert run["pipeline_version_reference"]["pipeline_version_id"] == version_id
    parameters = run["runtime_config"]["parameters"]
    assert parameters["experiment"] == EXPERIMENT.read_text()
    assert parameters["target"] == "http://10.0.0.7:8000"
    assert run["display_name"] == "vllm-network-delay-1.2.1"
    # The token authenticates the request and never becomes a run parameter.
    posted = next(r for r in kfp_api.requests if r.method == "POST" and r.path.endswith("/runs"))
    assert posted.headers.get("authorization") == "Bearer s3cret"
    assert "s3cret" not in json.dumps(run)


def test_run_passes_the_service_account_the_pods_run_as(kfp_api: KfpApiServer) -> None:
    assert _upload(kfp_api, "vllm-network-delay") == 0
    # Default: the run identity manifests/base sets up; without it KFP would run it as pipeline-runner.
    assert main(["run", str(EXPERIMENT), "--host", kfp_api.url]) == 0
    assert main(["run", str(EXPERIMENT), "--host", kfp_api.url, "--service-account", "other-runner"]) == 0
    accounts = sorted(r["service_account"] for r in kfp_api.state.runs.values())
    assert accounts == ["kfchaos-runner", "other-runner"]


def test_run_of_a_version_not_uploaded_is_an_input_error(
    kfp_api: KfpApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(EXPERIMENT), "--host", kfp_api.url]) == 3
    assert "vllm-network-delay version 1.2.1 is not uploaded" in capsys.readouterr().err
    assert not kfp_api.state.runs


def _schedules(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


SCHEDULES = """\
experiment: chaos-nightly
schedules:
  - name: network-delay-nightly
    pipeline: vllm-network-delay
    cron: "0 0 2 * * *"
    parameters: {target: "http://vllm:8000"}
  - name: replica-kill-weekly
    pipeline: vllm-replica-kill
    version: 1.2.1
    cron: "0 30 3 * * 1"
"""


def test_schedule_sync_creates_replaces_and_disables(kfp_api: KfpApiServer, tmp_path: Path) -> None:
    assert _upload(kfp_api, "vllm-network-delay", "vllm-replica-kill") == 0
    file = _schedules(tmp_path / "schedules.yaml", SCHEDULES)
    sync = ["schedule", "sync", str(file), "--host", kfp_api.url, "--root", str(ROOT)]
    assert main(sync) == 0
    runs = {r["display_name"]: r for r in kfp_api.state.recurring.values()}
    assert set(runs) == {"network-delay-nightly", "replica-kill-weekly"}
    nightly = runs["network-delay-nightly"]
    assert nightly["trigger"]["cron_schedule"]["cron"] == "0 0 2 * * *"
    assert int(nightly["max_concurrency"]) == 1 and nightly["no_catchup"] is True
    assert nightly["runtime_config"]["parameters"] == {"target": "http://vllm:8000"}
    experiment = kfp_api.state.experiments[nightly["experiment_id"]]
    assert experiment["display_name"] == "chaos-nightly"
    # Every recurring run names the run identity: without it nightly runs execute as pipeline-runner.
    assert {r["service_account"] for r in runs.values()} == {"kfchaos-runner"}

    # Unchanged file: nothing is recreated.
    ids = set(kfp_api.state.recurring)
    assert main(sync) == 0
    assert set(kfp_api.state.recurring) == ids

    # A changed cron replaces the run; a schedule dropped from the file is disabled, not deleted.
    _schedules(file, SCHEDULES.replace("0 0 2 * * *", "0 0 4 * * *").split("  - name: replica-kill-weekly")[0])
    assert main(sync) == 0
    runs = {r["display_name"]: r for r in kfp_api.state.recurring.values()}
    assert runs["network-delay-nightly"]["trigger"]["cron_schedule"]["cron"] == "0 0 4 * * *"
    assert runs["replica-kill-weekly"]["mode"] == "DISABLE"

    # Another service account (file-wide or per schedule) replaces the run.
    _schedules(file, "service_account: chaos-sa\n" + file.read_text())
    assert main(sync) == 0
    runs = {r["display_name"]: r for r in kfp_api.state.recurring.values()}
    assert runs["network-delay-nightly"]["service_account"] == "chaos-sa"


def test_schedule_with_a_five_field_cron_is_refused_before_any_request(
    kfp_api: KfpApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = _schedules(tmp_path / "schedules.yaml", SCHEDULES.replace('"0 30 3 * * 1"', '"30 3 * * 1"'))
    assert main(["schedule", "sync", str(file), "--host", kfp_api.url]) == 3
    err = capsys.readouterr().err
    assert f"{file}:10: schedules[1].cron: cron " in err and "5 fields" in err
    assert not kfp_api.requests


def _record(parameters: dict[str, str]) -> dict[str, object]:
    return audit.build_record(
        run_id="run-original",
        pipeline={"name": "vllm-network-delay", "version": "1.2.1", "ir_hash": LOCK["vllm-network-delay"].ir_hash},
        image="ghcr.io/kfchaos/kfchaos:test",
        git_commit="abc123",
        parameters=parameters,
        steps=[],
        recovery=None,
        verdict={"status": "FAIL", "reasons": ["stage 60%: p99 above"]},
        started_at=1.0,
        finished_at=2.0,
    )


def test_rerun_resubmits_the_same_version_with_the_same_parameters(kfp_api: KfpApiServer, tmp_path: Path) -> None:
    assert _upload(kfp_api, "vllm-network-delay") == 0
    parameters = {"experiment": EXPERIMENT.read_text(), "baseline": "", "experiment_dir": "/x", "target": "http://t"}
    path = tmp_path / "audit.json"
    audit.write_record(_record(parameters), path)
    assert main(["rerun", str(path), "--host", kfp_api.url]) == 0
    (run,) = kfp_api.state.runs.values()
    assert run["runtime_config"]["parameters"] == parameters
    assert run["display_name"] == "rerun-run-original"
    assert run["service_account"] == "kfchaos-runner"


def test_rerun_refuses_a_tampered_record(kfp_api: KfpApiServer, tmp_path: Path) -> None:
    record = _record({"experiment": EXPERIMENT.read_text(), "baseline": ""})
    record["parameters"] = {"experiment": EXPERIMENT.read_text().replace("200ms", "20ms"), "baseline": ""}
    path = tmp_path / "audit.json"
    audit.write_record(record, path)
    assert main(["rerun", str(path), "--host", kfp_api.url]) == 1
    assert not kfp_api.state.runs


def test_schedule_sync_creates_a_disabled_run_and_enables_it_when_the_file_says_so(
    kfp_api: KfpApiServer, tmp_path: Path
) -> None:
    assert _upload(kfp_api, "vllm-network-delay") == 0
    one = SCHEDULES.split("  - name: replica-kill-weekly")[0]
    file = _schedules(tmp_path / "schedules.yaml", one.replace("    cron:", "    enabled: false\n    cron:", 1))
    sync = ["schedule", "sync", str(file), "--host", kfp_api.url, "--root", str(ROOT)]
    assert main(sync) == 0
    (run,) = kfp_api.state.recurring.values()
    assert run["mode"] == "DISABLE"
    _schedules(file, one)
    assert main(sync) == 0
    (same,) = kfp_api.state.recurring.values()
    assert same["recurring_run_id"] == run["recurring_run_id"] and same["mode"] == "ENABLE"
