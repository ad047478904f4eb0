"""`kfchaos run --host --wait` against the loopback KFP API: tasks printed as they finish, the verdict read
from the audit artifact, exit codes like `kfchaos verdict`, and nothing short of SUCCEEDED + PASS is a pass."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest

from kfchaos.cli import main
from tests.conftest import ROOT
from tests.support.kfpapi import KfpApiServer

EXPERIMENT = ROOT / "experiments/vllm-network-delay.yaml"
TASKS = [("preflight", "SUCCEEDED"), ("steady-state", "SUCCEEDED"), ("inject-faults", "SUCCEEDED"),
         ("remove-faults", "SUCCEEDED"), ("verdict-report", "SUCCEEDED")]  # fmt: skip


def _audit(status: str, reasons: list[str]) -> bytes:
    return json.dumps({"kind": "kfchaos-audit", "verdict": {"status": status, "reasons": reasons}}).encode()


def _wait(api: KfpApiServer) -> int:
    assert main(["upload", "vllm-network-delay", "--host", api.url, "--root", str(ROOT)]) == 0
    return main(["run", str(EXPERIMENT), "--host", api.url, "--wait", "--poll", "1ms", "--wait-timeout", "1h"])


@pytest.mark.parametrize(("status", "code"), [("PASS", 0), ("FAIL", 1), ("INCONCLUSIVE", 2)])
def test_wait_prints_tasks_and_exits_on_the_verdict(
    kfp_api: KfpApiServer, capsys: pytest.CaptureFixture[str], status: str, code: int
) -> None:
    kfp_api.plan = TASKS
    kfp_api.artifacts[("verdict-report", "audit")] = _audit(status, [] if status == "PASS" else ["stage 60%: p99"])
    assert _wait(kfp_api) == code
    out = capsys.readouterr().out.splitlines()
    tasks = [line for line in out if line.startswith("task ")]
    assert tasks == [f"task {name}: SUCCEEDED" for name, _ in TASKS]  # each once, in finishing order
    assert out[-1].startswith(f"{status}: ") and "SUCCEEDED" in out[-1]
    reads = [r for r in kfp_api.requests if r.path.endswith("/artifacts/audit:read")]
    assert len(reads) == 1 and reads[0].path.split("/nodes/")[1].startswith("run-")


def test_an_archived_audit_record_is_read_too(kfp_api: KfpApiServer) -> None:
    # Argo-style artifacts are gzipped tars of one file.
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = _audit("FAIL", ["recovery too slow"])
        info = tarfile.TarInfo("audit")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    kfp_api.plan = TASKS
    kfp_api.artifacts[("verdict-report", "audit")] = buffer.getvalue()
    assert gzip.decompress(buffer.getvalue())  # really gzip
    assert _wait(kfp_api) == 1


def test_a_failed_run_is_inconclusive_even_with_a_pass_verdict(
    kfp_api: KfpApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    kfp_api.plan = [*TASKS[:-2], ("remove-faults", "FAILED"), ("verdict-report", "SUCCEEDED")]
    kfp_api.final_state = "FAILED"
    kfp_api.artifacts[("verdict-report", "audit")] = _audit("PASS", [])
    assert _wait(kfp_api) == 2
    out = capsys.readouterr().out
    assert "task remove-faults: FAILED" in out and "verdict PASS but the run ended FAILED" in out


def test_a_run_that_fails_before_its_verdict_or_without_an_artifact_is_inconclusive(
    kfp_api: KfpApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    kfp_api.plan = [("preflight", "FAILED")]
    kfp_api.final_state = "FAILED"
    assert _wait(kfp_api) == 2
    assert "the run ended FAILED before its verdict" in capsys.readouterr().out
    kfp_api.plan, kfp_api.final_state = TASKS, "SUCCEEDED"  # the verdict task ran but its artifact is gone
    assert main(["run", str(EXPERIMENT), "--host", kfp_api.url, "--wait", "--poll", "1ms"]) == 2
    assert "the verdict could not be read: reading the audit artifact failed (HTTP 404)" in capsys.readouterr().out


def test_a_garbled_artifact_is_inconclusive_not_a_crash(
    kfp_api: KfpApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    kfp_api.plan = TASKS
    kfp_api.artifacts[("verdict-report", "audit")] = b"\x1f\x8bnot really gzip"
    assert _wait(kfp_api) == 2
    assert "broken archive" in capsys.readouterr().out


def test_wait_gives_up_after_its_timeout(kfp_api: KfpApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    kfp_api.plan = TASKS * 50  # a long run
    assert main(["upload", "vllm-network-delay", "--host", kfp_api.url, "--root", str(ROOT)]) == 0
    code = main(["run", str(EXPERIMENT), "--host", kfp_api.url, "--wait", "--poll", "1ms", "--wait-timeout", "0s"])
    assert code == 2
    assert "INCONCLUSIVE: still RUNNING after 0s; stopped waiting" in capsys.readouterr().out
