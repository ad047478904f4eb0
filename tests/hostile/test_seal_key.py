"""Issue 46, class 5: the verifier's key holds.

A verifier given the shared HMAC key (KFCHAOS_SEAL_KEY) requires it: a run folder or an audit record without an
HMAC, or with one that does not match, fails `kfchaos audit verify` (before: "not checked", exit 0, so whoever
rewrote a folder only had to leave the HMAC out), is refused by `kfchaos verdict --run` and is not counted by
`kfchaos history`. A folder signed by a key other than those the verifier trusts is reported as signed by a stranger,
apart from a folder signed by no one. Everything goes through the CLI, on folders kfchaos itself wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kfchaos import audit, runseal, signing
from kfchaos.cli import main
from kfchaos.rundir import layout
from tests.hostile.test_forged_audit import _as, _finding, _forge, _verify
from tests.kfp_glue.test_audit import _record
from tests.report.sample import SampleRun, write_sample

KEY = "runner-shared-secret"


@pytest.fixture
def sample(tmp_path: Path) -> SampleRun:
    return write_sample(tmp_path / "in")


def _write(sample: SampleRun, folder: Path) -> Path:
    assert main([*sample.verdict_argv(), "--out", str(folder)]) == 1  # the sample FAILs
    return folder


def test_a_folder_without_an_hmac_fails_where_the_key_is_set(
    tmp_path: Path, sample: SampleRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _as(tmp_path / "runner", monkeypatch)
    folder = _write(sample, tmp_path / "runs" / "run-1")  # sealed without the key: no HMAC
    assert json.loads((folder / runseal.SEAL).read_text())["hmac"] is None
    code, report = _verify(folder, capsys)
    assert code == 0 and _finding(report, "hmac")["detail"].startswith("not checked")  # no key here: nothing to hold
    monkeypatch.setenv(runseal.KEY_ENV, KEY)
    code, report = _verify(folder, capsys)  # before issue 46: exit 0, "not checked: signed without a key"
    assert code == 1 and not report["ok"]
    hmac = _finding(report, "hmac")
    assert not hmac["ok"] and hmac["detail"].startswith(f"missing: {runseal.KEY_ENV} is set here")
    capsys.readouterr()
    assert main(["verdict", "--run", str(folder)]) == 3  # judged only from a folder that verifies
    assert "hmac: missing" in capsys.readouterr().err


def test_a_forgery_resealed_without_the_key_fails_and_one_with_the_key_passes(
    tmp_path: Path, sample: SampleRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _as(tmp_path / "runner", monkeypatch)
    monkeypatch.setenv(runseal.KEY_ENV, KEY)
    folder = _write(sample, tmp_path / "runs" / "run-1")
    code, report = _verify(folder, capsys)
    assert code == 0 and _finding(report, "hmac")["detail"] == "matches the key"
    # The forger rewrites the folder with kfchaos itself (hashes and re-judgment agree), without the runner's key.
    monkeypatch.delenv(runseal.KEY_ENV)
    _as(tmp_path / "forger", monkeypatch)
    _forge(folder, tmp_path)
    _as(tmp_path / "runner", monkeypatch)
    monkeypatch.setenv(runseal.KEY_ENV, KEY)
    code, report = _verify(folder, capsys)
    assert _finding(report, "rejudge")["ok"], report  # consistent: only the key can tell
    assert code == 1 and not _finding(report, "hmac")["ok"]  # before issue 46: exit 0
    # A guessed key is a mismatch too.
    monkeypatch.setenv(runseal.KEY_ENV, "forger-guess")
    _forge(folder, tmp_path)
    monkeypatch.setenv(runseal.KEY_ENV, KEY)
    code, report = _verify(folder, capsys)
    assert code == 1 and _finding(report, "hmac")["detail"] == "does not match the key"


def test_an_audit_record_without_its_hmac_fails_where_the_key_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.json"
    audit.write_record(_record(), path)  # written without the key
    assert "record_hmac" not in json.loads(path.read_text())
    assert _verify(path, capsys)[0] == 0
    monkeypatch.setenv(runseal.KEY_ENV, KEY)
    code, report = _verify(path, capsys)  # before issue 46: exit 0
    assert code == 1 and _finding(report, "record_hmac")["detail"].startswith("missing:")
    audit.write_record(_record(), path)  # written with it
    assert _verify(path, capsys)[0] == 0


def test_a_stranger_is_told_apart_from_no_signature(
    tmp_path: Path, sample: SampleRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Signed by a key that is not trusted while keys are: "stranger"; with no key trusted here: "untrusted"; no
    signature at all: "unsigned". None of them is authenticated; --require-signed refuses each."""
    _as(tmp_path / "forger", monkeypatch)
    folder = _write(sample, tmp_path / "runs" / "run-1")  # signed with the forger's own key
    runner = Ed25519PrivateKey.generate().public_key()
    trusted = tmp_path / "runner.pub.pem"
    trusted.write_text(signing.public_pem(runner))
    _as(tmp_path / "verifier", monkeypatch)  # a verifier with no key of their own

    code, report = _verify(folder, capsys, "--public-key", str(trusted))
    assert code == 0 and report["signature"] == "stranger" and not report["authenticated"]
    detail = _finding(report, "signature")["detail"]
    assert detail.startswith("signed by a stranger: key sha256:") and signing.fingerprint(runner) in detail
    assert any(note.startswith("signed by a stranger") for note in report["notes"])
    assert _verify(folder, capsys, "--public-key", str(trusted), "--require-signed")[0] == 1
    capsys.readouterr()
    assert main(["audit", "verify", str(folder), "--public-key", signing.fingerprint(runner)]) == 0  # pinned: same
    assert "signed by a stranger" in capsys.readouterr().out

    code, report = _verify(folder, capsys)  # nothing trusted here: no one is a stranger, no one is known
    assert code == 0 and report["signature"] == "untrusted"
    assert "stranger" not in _finding(report, "signature")["detail"]

    (folder / runseal.SEAL).write_text(runseal.dumps(runseal.seal(folder, "run-1", layout.SEALED)))  # no signer
    code, report = _verify(folder, capsys, "--public-key", str(trusted))
    assert code == 0 and report["signature"] == "unsigned"
    assert "stranger" not in _finding(report, "signature")["detail"]
    assert not any("stranger" in note for note in report["notes"])


def test_history_does_not_count_a_run_the_key_does_not_hold(
    tmp_path: Path, sample: SampleRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _as(tmp_path / "runner", monkeypatch)
    _write(sample, tmp_path / "runs" / "without-key")
    monkeypatch.setenv(runseal.KEY_ENV, KEY)
    _write(sample, tmp_path / "runs" / "with-key")
    capsys.readouterr()
    assert main(["history", str(sample.experiment), "--runs", str(tmp_path / "runs"), "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["with-key"]["verified"]
    assert not runs["without-key"]["verified"]  # before issue 46: verified, counted
    assert any("hmac: missing" in why for why in runs["without-key"]["unverified_because"])
