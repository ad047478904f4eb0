"""`kfchaos history --host`: the runs of a KFP experiment read through the API with the unpatched `kfp.Client`, against
the loopback KFP v2beta1 server (tests/support/kfpapi.py). Each run's audit record is the pipeline's own kind
(kfchaos.audit.build_record, signed with the pipeline's key as a Kubernetes Secret gives it), its stages the verdicts
of tests/history's nights; it is served by the artifact endpoint `kfchaos run --wait` reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kfp
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kfchaos import audit, signing
from kfchaos.cli import main
from kfchaos.history.regression import REGRESSION
from kfchaos.traffic.api import plan_stage
from kfchaos.validate import parse_experiment
from tests.conftest import ROOT
from tests.support.kfpapi import KfpApiServer

pytestmark = pytest.mark.slow

VERDICT_TASK = "verdict-report"
SLOWED = {("p99", 30), ("p99", 60), ("p99_drift", 30), ("p99_drift", 60), ("ttft_p99", 30), ("ttft_p99", 60)}


def _record(folder: Path, run_id: str) -> dict[str, Any]:
    """The audit record the pipeline's verdict step would write for this night (kfchaos.steps.conclude)."""
    verdict = json.loads((folder / "verdict.json").read_text())
    manifest = json.loads((folder / "run.json").read_text())
    text = (folder / "experiment.yaml").read_text()
    experiment = parse_experiment(text, "experiment.yaml")
    steps = [{"step": "stage", "stage": s["stage"], "status": s["status"], "reasons": s["reasons"],
              "detail": {"stage": s, "plan_hash": plan_stage(experiment, s["stage"]).hash}}  # as the replay recorded
             for s in verdict["stages"]]  # fmt: skip
    return audit.build_record(
        run_id=run_id,
        pipeline={"name": "verdict-test", "version": manifest["pipeline"]["version"], "ir_hash": "sha256:" + "0" * 64},
        image="ghcr.io/example/kfchaos:test",
        git_commit="0" * 40,
        parameters={"experiment": text},
        steps=steps,
        recovery=None,
        verdict={"status": verdict["status"], "reasons": verdict["reasons"]},
        started_at=manifest["started_at"],
        finished_at=manifest["finished_at"],
    )


def _finish(client: Any, run_id: str) -> None:
    """Poll the run to its end, as `kfchaos run --wait` does (the loopback server moves a run on at each read)."""
    for _ in range(10):
        if str(client.get_run(run_id).state) in ("SUCCEEDED", "FAILED"):
            return
    raise AssertionError(f"run {run_id} did not end")


@pytest.fixture
def key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The pipeline's signing key (env KFCHAOS_SIGNING_KEY), and its public half where a verifier keeps it."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    monkeypatch.setenv(signing.SIGNING_KEY_ENV, pem.decode())
    public = tmp_path / "pipeline-key.pub.pem"
    public.write_text(signing.public_pem(private.public_key()))
    monkeypatch.setenv("HOME", str(tmp_path))  # kfp.Client reads ~/.config/kfp/context.json: none here
    return public


def test_history_over_the_kfp_api_finds_the_regression_and_lists_what_it_cannot_trust(
    runs: Path, key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with KfpApiServer() as api:
        assert main(["upload", "vllm-network-delay", "--host", api.url, "--root", str(ROOT)]) == 0
        capsys.readouterr()
        client = kfp.Client(host=api.url)
        pipeline_id = client.get_pipeline_id("vllm-network-delay")
        version_id = client.list_pipeline_versions(pipeline_id).pipeline_versions[0].pipeline_version_id
        nightly = client.create_experiment("nightly").experiment_id
        elsewhere = client.create_experiment("elsewhere").experiment_id

        def submit(experiment_id: str, folder: Path, task_state: str = "SUCCEEDED", tamper: bool = False) -> str:
            api.plan = [("preflight", "SUCCEEDED"), (VERDICT_TASK, task_state)]
            api.final_state = task_state
            params = {"experiment": (folder / "experiment.yaml").read_text()}
            run = client.run_pipeline(experiment_id, folder.name, params=params, pipeline_id=pipeline_id,
                                      version_id=version_id)  # fmt: skip
            record = _record(folder, run.run_id)
            if tamper:  # a record edited after it was signed: its hash no longer holds
                record["verdict"]["status"] = "PASS"
            api.run_artifacts[(run.run_id, VERDICT_TASK, "audit")] = json.dumps(record).encode()
            _finish(client, run.run_id)
            return run.run_id

        scheduled = []
        for i in range(7, 21):  # seven nights of 1.0.1, seven of 1.1.0 (the slower target)
            scheduled.append(submit(nightly, runs / f"nightly-{i:02d}"))
        for run_id in scheduled[::2]:  # every other night started by the nightly schedule (Run.recurring_run_id)
            api.state.runs[run_id]["recurring_run_id"] = "nightly-schedule"
        failed = submit(nightly, runs / "nightly-20", task_state="FAILED")
        tampered = submit(nightly, runs / "nightly-19", tamper=True)
        submit(elsewhere, runs / "nightly-10")  # another KFP experiment's run: not this history's
        capsys.readouterr()  # kfp.Client prints each experiment's and run's link

        code = main(["history", "verdict-test", "--host", api.url, "--kfp-experiment", "nightly", "--compare", "1.0.1",
                     "1.1.0", "--json", "--require-signed", "--public-key", str(key)])  # fmt: skip
        assert code == 1
        document = json.loads(capsys.readouterr().out)
        assert len(document["runs"]) == 16
        verified = [r for r in document["runs"] if r["verified"]]
        assert [r["pipeline_version"] for r in verified] == ["1.0.1"] * 7 + ["1.1.0"] * 7
        listed = {r["run_id"]: r for r in document["runs"] if not r["verified"]}
        assert set(listed) == {failed, tampered}
        assert listed[failed]["unverified_because"] == ["the run ended FAILED before its verdict"]
        assert any("record_hash" in why for why in listed[tampered]["unverified_because"])
        found = {(c["check"], c["stage"]): c for c in document["comparisons"][0]["comparisons"]}
        assert {key for key, c in found.items() if c["outcome"] == REGRESSION} == SLOWED

        # Only the runs one recurring run started.
        code = main(["history", "verdict-test", "--host", api.url, "--kfp-experiment", "nightly", "--recurring-run",
                     "nightly-schedule", "--json", "--public-key", str(key)])  # fmt: skip
        assert code == 1  # four runs against three of the slower target: enough for Welch's t on the logs (issue 47)
        assert sorted(r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]) == sorted(scheduled[::2])

        # Without the pipeline's public key nothing is authenticated: every run listed, none counted, nothing claimed.
        code = main(["history", "verdict-test", "--host", api.url, "--kfp-experiment", "nightly", "--compare", "1.0.1",
                     "1.1.0", "--require-signed"])  # fmt: skip
        assert code == 2
        assert "**Not enough runs**" in capsys.readouterr().out
