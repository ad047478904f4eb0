"""The demo engine's LRU prefix cache and the demo tokenizer (kfchaos.demo.prefixcache, kfchaos.demo.tokenizer)."""

from __future__ import annotations

import asyncio

from kfchaos.demo.engine import Engine, EngineConfig, Sequence
from kfchaos.demo.tokenizer import Tokenizer, measure


def _run(engine: Engine, seqs: list[Sequence]) -> None:
    for seq in seqs:
        engine.add(seq)
        for _ in range(100):
            engine.step()
            if not engine.running and not engine.waiting:
                break


def test_a_freed_prefix_stays_cached_and_hits_until_rotation_outgrows_the_pool() -> None:
    config = EngineConfig(enable_prefix_caching=True, gpu_memory_utilization=0.6)  # ~1200 blocks
    few = Engine(config)
    _run(few, [Sequence(f"r{i}", 4100, 2, f"p{i % 2}", 4096) for i in range(8)])  # 2 prefixes x 256 blocks
    assert few.prefix is not None and few.prefix.hits == 6 * 4096
    many = Engine(config)
    _run(many, [Sequence(f"r{i}", 4100, 2, f"p{i % 8}", 4096) for i in range(24)])  # 8 x 256 > the pool
    assert many.prefix is not None and many.prefix.hits == 0 and many.prefix.evictions > 0
    assert many.prefix.queries == 24 * 4100


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
