"""The demo tokenizer (kfchaos.demo.server.tokenizer); the prefix cache is tested in tests/demo/test_prefixcache.py."""

from __future__ import annotations

import asyncio

from kfchaos.demo.server.tokenizer import Tokenizer, measure


def test_tokenizer_refuses_over_max_model_len_with_vllms_message_and_costs_odd_text_more() -> None:
    tokenizer = Tokenizer(100)
    body = tokenizer.refusal(90, 16)
    assert body is not None and body["error"]["code"] == 400
    assert body["error"]["message"].startswith(
        "This model's maximum context length is 100 tokens. However, you requested 106"
    )
    assert tokenizer.refusal(84, 16) is None
    assert measure("word " * 1000)[0] == 1250
    plain, run = measure("ab " * 10_000)[1], measure("ab" * 15_000)[1]
    assert run > 100 * plain  # one piece without whitespace is superlinear
    assert asyncio.run(tokenizer.tokenize("x" * 40)) == 10
