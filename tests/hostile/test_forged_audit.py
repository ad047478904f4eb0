"""An audit nobody can forge (kfchaos.signing, kfchaos.runseal): a run folder and a pipeline's audit record are
signed with a key their writer does not hold, and verified with a key from outside the folder.

People are config folders here: XDG_CONFIG_HOME names whose key signs and whose trust verifies. The forger can
write the folder (and run kfchaos with a key of their own); the runner's key is not theirs.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kfchaos import audit, runseal, signing
from kfchaos.cli import main
from kfchaos.rundir import layout
from tests.kfp_glue.test_audit import _record
from tests.report.sample import SampleRun, write_sample


def _as(person: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Act as `person`: their config folder holds their own key and the keys they trust."""
    person.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(person))
    return person / "kfchaos"


def _verify(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["audit", "verify", str(path), "--json", *flags])
    return code, json.loads(capsys.readouterr().out)


def _finding(report: dict, what: str) -> dict:
    return next(f for f in report["findings"] if f["what"] == what)


@pytest.fixture
def sample(tmp_path: Path) -> SampleRun:
    return write_sample(tmp_path / "in")


@pytest.fixture
def sealed(tmp_path: Path, sample: SampleRun, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A FAIL run folder the runner sealed with their own key."""
    _as(tmp_path / "runner", monkeypatch)
    folder = tmp_path / "runs" / "run-1"
    assert main([*sample.verdict_argv(), "--out", str(folder)]) == 1
    return folder


def _runner_key(tmp_path: Path) -> Path:
    return tmp_path / "runner" / "kfchaos" / signing.LOCAL_PUBLIC_KEY


def _forge(folder: Path, elsewhere: Path) -> None:
    """Every request made fast, and the folder written again by kfchaos itself from the edited inputs: a folder whose
    hashes and re-judged verdict agree, sealed by whoever runs this (with their own key)."""
    table = pq.read_table(folder / layout.RECORDS)
    table = table.set_column(table.schema.get_field_index("latency"), "latency", pc.multiply(table["latency"], 0.01))
    records = elsewhere / "forged.parquet"
    pq.write_table(table, records)
    argv = ["verdict", "--experiment", str(folder / layout.EXPERIMENT), "--records", str(records)]
    argv += ["--baseline", str(folder / layout.BASELINE), "--metrics", str(folder / layout.METRICS)]
    assert main([*argv, "--out", str(folder)]) in (0, 1, 2)


def test_a_local_run_is_signed_with_the_runners_own_key_made_0600_on_first_use(
    tmp_path: Path, sample: SampleRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _as(tmp_path / "runner", monkeypatch)
    assert not config.exists()
    folder = tmp_path / "runs" / "run-1"
    assert main([*sample.verdict_argv(), "--out", str(folder)]) == 1
    key = config / signing.LOCAL_KEY
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(config.stat().st_mode) == 0o700
    own = signing.local_signer(create=False)
    assert own is not None
    seal = json.loads((folder / runseal.SEAL).read_text())
    assert seal["signature"]["key_id"] == signing.fingerprint(own.public)
    code, report = _verify(folder, capsys, "--require-signed")
    assert code == 0 and report["authenticated"], report
    assert _finding(report, "signature")["detail"].startswith("signed by key sha256:")


def test_a_forged_folder_resealed_with_the_forgers_own_key_is_not_authenticated(
    tmp_path: Path, sealed: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _as(tmp_path / "forger", monkeypatch)
    _forge(sealed, tmp_path)  # signed by the forger's key, recorded in the seal
    _as(tmp_path / "runner", monkeypatch)
    code, report = _verify(sealed, capsys)
    assert _finding(report, "rejudge")["ok"], report  # the forgery is consistent: hashes and re-judge agree
    assert code == 0 and not report["authenticated"]
    detail = _finding(report, "signature")["detail"]
    # The runner trusts a key (their own) and this is another: a stranger's signature, said apart from none (issue 46).
    assert detail.startswith("signed by a stranger: key sha256:") and "integrity only: not authenticated" in detail
    assert report["signature"] == "stranger"
    assert report["notes"][-1].startswith("signed by a stranger") and "not authenticated" in report["notes"][-1]
    code, report = _verify(sealed, capsys, "--require-signed")
    assert code == 1 and not report["ok"]


def test_a_forged_pass_with_only_its_hashes_recomputed_says_integrity_only(
    tmp_path: Path, sealed: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The attack of issue 32: edit, recompute the plain hashes, drop the signature (or keep an old hash-only seal).
    verdict = sealed / layout.VERDICT
    verdict.write_text(verdict.read_text().replace('"FAIL"', '"PASS"'))
    (sealed / runseal.SEAL).write_text(runseal.dumps(runseal.seal(sealed, "run-1", layout.SEALED)))
    capsys.readouterr()
    main(["audit", "verify", str(sealed)])
    text = capsys.readouterr().out
    assert "integrity only: not authenticated" in text
    code, _ = _verify(sealed, capsys, "--require-signed")
    assert code == 1


def test_the_runners_signature_kept_over_edited_files_is_a_mismatch(
    sealed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads((sealed / runseal.SEAL).read_text())
    verdict = sealed / layout.VERDICT
    verdict.write_text(verdict.read_text().replace('"FAIL"', '"PASS"'))
    resealed = runseal.seal(sealed, "run-1", layout.SEALED)
    resealed["signature"] = document["signature"]  # the runner's signature, over the old hashes
    (sealed / runseal.SEAL).write_text(runseal.dumps(resealed))
    code, report = _verify(sealed, capsys)
    assert code == 1
    signature = _finding(report, "signature")
    assert not signature["ok"] and "does not verify" in signature["detail"]


def test_a_record_signature_cannot_stand_for_a_seal(
    sealed: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each signature covers `<kind>\0<bytes>`: the runner's key signing something else never signs a seal.
    signer = signing.local_signer(create=False)
    assert signer is not None
    document = json.loads((sealed / runseal.SEAL).read_text())
    body = {k: document[k] for k in ("kind", "version", "run_id", "files")}
    other = signer.sign(audit.RECORD_KIND, json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    document["signature"] = other
    (sealed / runseal.SEAL).write_text(runseal.dumps(document))
    code, report = _verify(sealed, capsys)
    assert code == 1 and not _finding(report, "signature")["ok"]


def test_another_machine_trusts_a_given_key_or_a_pinned_fingerprint_never_one_in_the_folder(
    tmp_path: Path, sealed: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runner_public = _runner_key(tmp_path)
    fingerprint = json.loads((sealed / runseal.SEAL).read_text())["signature"]["key_id"]
    verifier = _as(tmp_path / "verifier", monkeypatch)
    code, report = _verify(sealed, capsys, "--require-signed")
    assert code == 1 and "not trusted here" in _finding(report, "signature")["detail"]
    assert _verify(sealed, capsys, "--require-signed", "--public-key", str(runner_public))[0] == 0
    assert _verify(sealed, capsys, "--require-signed", "--public-key", fingerprint)[0] == 0
    forger = Ed25519PrivateKey.generate().public_key()
    other = tmp_path / "other.pem"
    other.write_text(signing.public_pem(forger))
    assert _verify(sealed, capsys, "--require-signed", "--public-key", str(other))[0] == 1
    # The runner's key placed in the verifier's trusted-keys/: trusted; while others may write there, not.
    trusted = verifier / signing.TRUSTED_KEYS
    trusted.mkdir(parents=True)
    (trusted / "runner.pem").write_text(runner_public.read_text())
    assert _verify(sealed, capsys, "--require-signed")[0] == 0
    trusted.chmod(0o777)
    code, report = _verify(sealed, capsys, "--require-signed")
    assert code == 1 and any("not only yours to write" in note for note in report["notes"])


def _pipeline_key(tmp_path: Path) -> tuple[str, Path]:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = tmp_path / "pipeline.pub.pem"
    public.write_text(signing.public_pem(key.public_key()))
    return pem.decode(), public


@pytest.mark.parametrize("given_as", ["environment", "mounted file"])
def test_the_pipelines_key_from_its_secret_signs_the_audit_record(
    given_as: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pem, public = _pipeline_key(tmp_path)
    if given_as == "environment":
        monkeypatch.setenv(signing.SIGNING_KEY_ENV, pem)
    else:
        mounted = tmp_path / "secret" / "signing-key.pem"
        mounted.parent.mkdir()
        mounted.write_text(pem)
        monkeypatch.setenv(signing.SIGNING_KEY_FILE_ENV, str(mounted))
    record = _record()
    monkeypatch.delenv(signing.SIGNING_KEY_ENV, raising=False)
    monkeypatch.delenv(signing.SIGNING_KEY_FILE_ENV, raising=False)
    path = tmp_path / "audit.json"
    audit.write_record(record, path)
    _as(tmp_path / "verifier", monkeypatch)
    code, report = _verify(path, capsys, "--require-signed", "--public-key", str(public))
    assert code == 0 and report["authenticated"], report
    # The forger edits the verdict and recomputes record_hash: the signature no longer verifies.
    record["verdict"] = {"status": "PASS", "reasons": ["forged"]}
    record["record_hash"] = audit.sha256_json({k: v for k, v in record.items() if k not in audit.SIGNATURE_FIELDS})
    path.write_text(json.dumps(record))
    code, report = _verify(path, capsys, "--public-key", str(public))
    assert code == 1 and not _finding(report, "record_signature")["ok"], report


def test_a_record_written_without_the_secret_is_integrity_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.json"
    audit.write_record(_record(), path)
    code, report = _verify(path, capsys)
    assert code == 0 and not report["authenticated"]
    assert _finding(report, "record_signature")["detail"].startswith("integrity only: not authenticated")
    assert _verify(path, capsys, "--require-signed")[0] == 1


def test_a_signing_key_open_to_others_is_refused_before_anything_is_written(
    tmp_path: Path, sample: SampleRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _as(tmp_path / "runner", monkeypatch)
    assert signing.local_signer() is not None
    (config / signing.LOCAL_KEY).chmod(0o644)
    folder = tmp_path / "runs" / "run-1"
    assert main([*sample.verdict_argv(), "--out", str(folder)]) == 3
    assert "open to others: a signing key must be yours alone" in capsys.readouterr().err
    assert not folder.exists()


def test_a_broken_pipeline_key_stops_the_run_folder_before_anything_is_written(
    tmp_path: Path, sample: SampleRun, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(
        signing.SIGNING_KEY_ENV, "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"
    )
    folder = tmp_path / "runs" / "run-1"
    assert main([*sample.verdict_argv(), "--out", str(folder)]) == 3
    assert f"{signing.SIGNING_KEY_ENV}: not an unencrypted PEM private key" in capsys.readouterr().err
    assert not folder.exists()


def test_audit_key_prints_the_public_key_and_fingerprint_to_hand_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _as(tmp_path / "runner", monkeypatch)
    assert main(["audit", "key"]) == 0
    out = capsys.readouterr().out
    own = signing.local_signer(create=False)
    assert own is not None and f"fingerprint: {signing.fingerprint(own.public)}" in out
    assert signing.public_pem(own.public) in out and str(config / signing.LOCAL_KEY) in out
