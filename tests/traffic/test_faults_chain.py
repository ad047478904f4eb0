"""The serving-chain faults' request generators (kfchaos.traffic.trafficfaults.chain) and their params' bounds."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from kfchaos.faultspec.params import (
    BatchShockParams,
    ClientAbortStormParams,
    LongContextBurstParams,
    PrefixCacheThrashParams,
    TokenizerStressParams,
)
from kfchaos.spec import Synthetic
from kfchaos.traffic.settings import ReplaySettings, TrafficFault
from kfchaos.traffic.tagging import HeaderPolicy
from kfchaos.traffic.trafficfaults.table import generate
from kfchaos.traffic.wire import RequestBuilder

SETTINGS = ReplaySettings(stage=50, synthetic=Synthetic(rate=20), duration=30.0, api="openai-completions", model="m")


def test_tokenizer_stress_sends_each_kind_and_sizes_over_and_near_the_limit() -> None:
    params = TokenizerStressParams.model_validate(
        {"max_model_len": 1000, "requests": 7, "prompt_chars": 500, "max_tokens": 16, "every": "10s"}
    )
    out = list(generate(TrafficFault("tok", params), SETTINGS))
    assert [o for o, _ in out] == [0.0] * 7 + [10.0] * 7 + [20.0] * 7
    by_kind = {r.id.rsplit("-", 2)[-2] + "-" + r.id.rsplit("-", 1)[-1]: r for _, r in out[:7]}
    over = next(r for _, r in out if r.id.endswith("over-limit"))
    near = next(r for _, r in out if r.id.endswith("near-limit"))
    assert over.prompt is not None and near.prompt is not None
    assert len(over.prompt.split()) > 1000 + 1000 - 1  # words of one token each: past the limit
    assert len(near.prompt.split()) < 1000 - 16
    assert all(r.fault == "tok" for _, r in out) and len(by_kind) == 7
    emoji = next(r for _, r in out if r.id.endswith("emoji-zwj"))
    assert emoji.prompt is not None and "\u200d" in emoji.prompt


def test_tokenizer_stress_prompt_sizes_are_bounded() -> None:
    with pytest.raises(ValidationError, match="bytes"):
        TokenizerStressParams(max_model_len=9_000_000, requests=1)
    with pytest.raises(ValidationError, match="max_tokens"):
        TokenizerStressParams(max_model_len=100, requests=1, max_tokens=100)


def test_batch_shock_steps_a_share_of_the_in_flight_estimate_then_holds_it() -> None:
    params = BatchShockParams.model_validate(
        {"extra_concurrency": "30%", "expected_latency": "4s", "start": "5s", "hold": "8s",
         "max_tokens": {"min": 16, "max": 2048}}
    )  # fmt: skip
    out = list(generate(TrafficFault("shock", params), SETTINGS))
    k = 12  # 30 % x (20 req/s x 50 %) x 4 s
    assert [o for o, _ in out[:k]] == [5.0] * k and out[k][0] > 5.0
    assert len(out) == k + 23  # k / 4 s a second for the 8 s after the step (end excluded)
    tokens = [r.max_tokens or 0 for _, r in out]
    assert min(tokens) >= 16 and max(tokens) <= 2048 and max(tokens) - min(tokens) > 1000
    assert [r.max_tokens for _, r in generate(TrafficFault("shock", params), SETTINGS)] == tokens  # same plan


def test_batch_shock_needs_one_size() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        BatchShockParams.model_validate({"requests": 5, "extra_concurrency": "30%", "expected_latency": "4s"})
    with pytest.raises(ValidationError, match="expected_latency"):
        BatchShockParams.model_validate({"extra_concurrency": "30%"})


def test_prefix_cache_thrash_rotates_distinct_prefixes() -> None:
    params = PrefixCacheThrashParams.model_validate({"prefixes": 3, "prefix_tokens": 64, "rate": 2.0, "hold": "3s"})
    out = list(generate(TrafficFault("thrash", params), SETTINGS))
    assert [o for o, _ in out] == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    prefixes = [(r.prompt or "").rpartition("\n\n")[0] for _, r in out]
    assert prefixes[0] != prefixes[1] != prefixes[2] and prefixes[0] == prefixes[3]


@pytest.mark.parametrize("api", ["openai-completions", "openai-chat"])
def test_the_load_faults_ask_for_every_max_token_only_when_told(api: str) -> None:
    """ignore_eos makes a load fault's answers as long as it sized them (a model's EOS would end them early); the
    field goes onto the wire only when set, as a server that rejects unknown fields would answer 400 to it."""
    settings = ReplaySettings(stage=50, synthetic=Synthetic(rate=20), duration=30.0, api=api, model="m")
    builder = RequestBuilder("h", "", 100, api, "m", HeaderPolicy())
    faults = {
        "long-context-burst": LongContextBurstParams.model_validate({"requests": 2, "context_tokens": 64}),
        "batch-shock": BatchShockParams.model_validate({"requests": 2}),
        "client-abort-storm": ClientAbortStormParams.model_validate({"requests": 2}),
        "prefix-cache-thrash": PrefixCacheThrashParams.model_validate(
            {"prefixes": 2, "prefix_tokens": 16, "rate": 1.0, "hold": "2s"}
        ),
    }
    for kind, params in faults.items():
        for ignore in (False, True):
            told = params.model_copy(update={"ignore_eos": ignore})
            requests = [r for _, r in generate(TrafficFault(kind, told), settings)]
            assert requests, kind
            bodies = [json.loads(builder.build(r, b"\x01" * 16).split(b"\r\n\r\n", 1)[1]) for r in requests]
            assert all(("ignore_eos" in b) == ignore for b in bodies), (kind, ignore, bodies[0])
            assert all(b.get("ignore_eos", True) is True for b in bodies)
