"""kfchaos.redact: the one rule for secrets in text that leaves the process."""

from __future__ import annotations

import pytest

from kfchaos.redact import redact


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("GET http://h:1/v1/x?api_key=SEKRET&a=1 failed", "SEKRET"),
        ("/v1/completions?token=SEKRET", "SEKRET"),
        ("Authorization: Bearer SEKRET.abc-1", "SEKRET"),
        ('{"api_key": "SEKRET"}', "SEKRET"),
        ("password=SEKRET; other", "SEKRET"),
        ("https://user:SEKRET@host/x", "SEKRET"),
        ("KFCHAOS_TARGET_TOKEN=SEKRET", "SEKRET"),
        ("x-api-key: SEKRET", "SEKRET"),
    ],
)
def test_secrets_are_removed(text: str, secret: str) -> None:
    assert secret not in redact(text)
    assert "<redacted>" in redact(text) or "user" not in redact(text)


@pytest.mark.parametrize("text", ["prompt_tokens: 17", "max_tokens=5", "records.parquet: latency: 3 rows", "plain"])
def test_ordinary_text_is_kept(text: str) -> None:
    assert redact(text) == text
