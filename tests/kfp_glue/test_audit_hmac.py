"""Issue 20 §3: the audit record's hash is recomputable, so whoever rewrites the record can rewrite it. With the
runner's key (KFCHAOS_SEAL_KEY) the record is also signed, and a forgery that recomputes record_hash is caught
where the key is given; without the key, verify says the signature was not checked, never that it is ok."""

from __future__ import annotations

import pytest

from kfchaos import audit, runseal
from tests.kfp_glue.test_audit import _record


def _findings(record: dict[str, object]) -> dict[str, audit.Finding]:
    return {f.what: f for f in audit.verify(record)}


def test_a_record_written_with_the_key_is_signed_and_verifies_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runseal.KEY_ENV, "runner-secret")
    record = _record()
    assert str(record["record_hmac"]).startswith("hmac-sha256:")
    found = _findings(record)
    assert found["record_hash"].ok and found["record_hmac"].ok and found["record_hmac"].detail == "matches the key"


def test_a_forged_record_with_a_recomputed_hash_fails_the_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runseal.KEY_ENV, "runner-secret")
    record = _record()
    verdict = record["verdict"]
    assert isinstance(verdict, dict)
    verdict["reasons"] = ["forged: the run was a FAIL"]
    body = {k: v for k, v in record.items() if k not in audit.SIGNATURE_FIELDS}
    record["record_hash"] = audit.sha256_json(body)  # the forger recomputes the plain hash
    found = _findings(record)
    assert found["record_hash"].ok  # a recomputable hash cannot tell
    assert not found["record_hmac"].ok and found["record_hmac"].detail == "does not match the key"


def test_without_a_key_the_signature_is_reported_as_not_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runseal.KEY_ENV, "runner-secret")
    record = _record()
    monkeypatch.delenv(runseal.KEY_ENV)
    assert _findings(record)["record_hmac"].detail.startswith("not checked")
    unsigned = _record()
    assert "record_hmac" not in unsigned
    assert _findings(unsigned)["record_hmac"].detail.startswith("not checked: signed without a key")
