"""The realistic synthetic workload: conversations, system prompts, tenants, rates per stage, determinism."""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kfchaos.spec import Synthetic, TokenLengths
from kfchaos.traffic.plan import plan_stage
from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.settings import ReplaySettings
from kfchaos.traffic.synthetic import draw_lengths
from kfchaos.traffic.tagging import HeaderPolicy
from kfchaos.traffic.wire import RequestBuilder
from kfchaos.traffic.workload import expected_length, warmup_seconds, workload_requests

CHAT: dict[str, Any] = {
    "rate": 40,
    "conversations": {
        "turns": {"distribution": "lognormal", "mean": 4, "stddev": 3, "max": 30},
        "think_time": "10s",
    },
    "system_prompts": {"count": 3, "tokens": {"distribution": "fixed", "mean": 500}},
    "prompt_tokens": {"distribution": "lognormal", "mean": 80, "stddev": 40},
    "output_tokens": {"distribution": "lognormal", "mean": 60, "stddev": 30},
}


def synthetic(**changes: Any) -> Synthetic:
    return Synthetic.model_validate({**CHAT, **changes})


def schedule(spec: Synthetic, stage: int = 100, duration: float = 600.0, seed: int = 3) -> list[TrafficRequest]:
    plan = plan_stage(ReplaySettings(stage=stage, synthetic=spec, duration=duration, seed=seed))
    return [p.request for p in plan.schedule()]


def body(request: TrafficRequest, api: str = "openai-chat") -> dict[str, Any]:
    builder = RequestBuilder("h", "", 100, api, "base-model", HeaderPolicy())
    return json.loads(builder.build(request, b"\x01" * 16).split(b"\r\n\r\n", 1)[1])


def by_conversation(requests: list[TrafficRequest]) -> dict[str, list[TrafficRequest]]:
    out: dict[str, list[TrafficRequest]] = defaultdict(list)
    for r in requests:
        assert r.turn is not None
        out[r.turn.conversation.key].append(r)
    return out


@pytest.mark.parametrize(
    "lengths",
    [
        TokenLengths(distribution="fixed", mean=3.4, max=10),
        TokenLengths(distribution="uniform", mean=5, stddev=2, max=10),
        TokenLengths(distribution="normal", mean=3, stddev=2, max=12),
        TokenLengths(distribution="lognormal", mean=4, stddev=3, max=30),
        TokenLengths(distribution="empirical", mean=3, min=1, max=20, quantiles=[1, 1, 2, 3, 9, 20]),
    ],
)
def test_expected_turns_match_the_drawn_mean(lengths: TokenLengths) -> None:
    # The conversation start rate is rate / E[turns]: E must be the mean of what draw_lengths really draws.
    drawn = draw_lengths(np.random.Generator(np.random.PCG64(5)), lengths, 400_000).mean()
    assert expected_length(lengths) == pytest.approx(drawn, rel=0.01)


def test_rate_at_each_stage_is_that_share_of_the_configured_rate() -> None:
    spec = synthetic()
    duration = 1500.0
    counts = {stage: len(schedule(spec, stage, duration)) for stage in (10, 30, 60, 90, 100)}
    # At 100 % the request rate is the configured one (60,000 requests expected; clustering by conversation
    # makes the count vary more than Poisson: a few percent at most for this seed and size).
    assert counts[100] / duration == pytest.approx(40, rel=0.03)
    for stage, count in counts.items():
        assert count / duration == pytest.approx(40 * stage / 100, rel=0.08), stage
    # The steady-state start: the first minute carries the rate too (no ramp while conversations build up).
    first_minute = sum(1 for r in schedule(spec, 100, 60.0))
    assert first_minute / 60 == pytest.approx(40, rel=0.15)


def test_a_stage_keeps_whole_conversations_and_contains_the_smaller_stages() -> None:
    spec = synthetic()
    everything = by_conversation(schedule(spec, 100, 900.0))
    kept = {}
    for stage in (10, 30, 60):
        conversations = by_conversation(schedule(spec, stage, 900.0))
        for key, turns in conversations.items():
            assert [t.id for t in turns] == [t.id for t in everything[key]], "a conversation was split"
        kept[stage] = set(conversations)
    assert kept[10] < kept[30] < kept[60]
    assert len(kept[10]) / len(everything) == pytest.approx(0.10, abs=0.02)


def test_turn_k_repeats_turn_k_minus_1_and_shares_the_system_prompt() -> None:
    spec = synthetic()
    requests = schedule(spec, 100, 900.0)
    conversations = by_conversation(requests)
    long_ones = [turns for turns in conversations.values() if len(turns) >= 3]
    assert len(long_ones) > 50
    for turns in long_ones[:50]:
        prompts = [body(t, "openai-completions")["prompt"] for t in turns]
        for earlier, later in itertools.pairwise(prompts):
            # Prefix reuse: the later turn's prompt starts with the whole earlier prompt (its history).
            assert later.startswith(earlier + "\n\n")
        chats = [body(t)["messages"] for t in turns]
        last = turns[-1].turn
        assert last is not None  # earlier turns may have come before the stage began (a steady-state start)
        assert [m["role"] for m in chats[-1]] == ["system"] + ["user", "assistant"] * last.k + ["user"]
        assert all(c[0] == chats[0][0] for c in chats)
    systems = Counter(body(r)["messages"][0]["content"] for r in requests[:3000])
    assert len(systems) == 3 and min(systems.values()) > 500  # 3 long prompts, each shared by many
    # Two conversations share nothing after the system prompt (each message is tagged with its conversation).
    a, b = (body(t[0], "openai-completions")["prompt"] for t in long_ones[:2])
    assert a.split("\n\n")[1] != b.split("\n\n")[1]


def test_think_time_and_history_tokens() -> None:
    spec = synthetic()
    requests = schedule(spec, 100, 900.0)
    gaps = [
        b.timestamp - a.timestamp for turns in by_conversation(requests).values() for a, b in itertools.pairwise(turns)
    ]
    assert np.mean(gaps) == pytest.approx(10.0, rel=0.05)
    for r in requests[:2000]:
        assert r.turn is not None
        c, k = r.turn.conversation, r.turn.k
        assert r.prompt_tokens == c.system_tokens + sum(c.questions[: k + 1]) + sum(c.answers[:k])
        assert r.max_tokens == c.answers[k]
        words = sum(len(m["content"].split()) for m in body(r)["messages"])
        assert abs(words - r.prompt_tokens) <= 2 * (2 * k + 2)  # the tags count as 3 tokens in 2 or 3 words


def test_history_is_trimmed_to_max_context_tokens() -> None:
    spec = synthetic(
        conversations={
            "turns": {"distribution": "fixed", "mean": 12, "max": 12},
            "think_time": "1s",
            "max_context_tokens": 1500,
        },
        prompt_tokens={"distribution": "fixed", "mean": 100},
        output_tokens={"distribution": "fixed", "mean": 100},
    )
    requests = schedule(spec, 100, 120.0)
    late = [r for r in requests if r.turn is not None and r.turn.k == 11]
    assert late
    for r in late:
        assert r.prompt_tokens is not None and r.prompt_tokens <= 1500
        assert (
            r.turn is not None and r.turn.first == 7
        )  # 500 system + 100 question + turns 7..10 (4 x 200) = 1400 <= 1500
        messages = body(r)["messages"]
        assert messages[0]["role"] == "system" and messages[1]["content"].startswith(f"[{r.turn.conversation.key} q7]")


def test_tenants_by_weight_with_their_model_header_and_lengths() -> None:
    spec = synthetic(
        tenants=[
            {"name": "support", "weight": 3, "model": "support-lora"},
            {
                "name": "code",
                "weight": 1,
                "model": "code-lora",
                "prompt_tokens": {"distribution": "fixed", "mean": 900},
            },
        ]
    )
    requests = schedule(spec, 100, 900.0)
    tenants = Counter()
    for key, turns in by_conversation(requests).items():
        names = {dict(t.headers)["X-Tenant"] for t in turns}
        assert len(names) == 1, key  # one tenant for all of a conversation's turns
        tenants[names.pop()] += 1
    assert tenants["support"] / sum(tenants.values()) == pytest.approx(0.75, abs=0.03)
    for r in requests[:500]:
        tenant = dict(r.headers)["X-Tenant"]
        assert body(r)["model"] == f"{tenant}-lora"
        assert r.id.startswith(f"{tenant}.c")
        if tenant == "code":
            assert r.turn is not None and set(r.turn.conversation.questions) == {900}
    # Without a model of its own a tenant sends the target's.
    plain = synthetic(tenants=[{"name": "only", "weight": 1}])
    assert body(schedule(plain, 100, 10.0)[0])["model"] == "base-model"


def test_same_seed_same_requests_and_the_hash_covers_the_settings(tmp_path: Path) -> None:
    spec = synthetic(tenants=[{"name": "a", "weight": 1}, {"name": "b", "weight": 2}])
    one = [(r.id, r.timestamp, r.prompt_tokens, r.max_tokens) for r in schedule(spec, 30, 300.0, seed=9)]
    two = [(r.id, r.timestamp, r.prompt_tokens, r.max_tokens) for r in schedule(spec, 30, 300.0, seed=9)]
    other = [(r.id, r.timestamp) for r in schedule(spec, 30, 300.0, seed=10)]
    assert one == two and [x[:2] for x in one] != other

    def plan_hash(s: Synthetic) -> str:
        return plan_stage(ReplaySettings(stage=30, synthetic=s, duration=300.0)).hash

    base = plan_hash(spec)
    assert base == plan_hash(synthetic(tenants=[{"name": "a", "weight": 1}, {"name": "b", "weight": 2}]))
    changed = synthetic(
        conversations={**CHAT["conversations"], "think_time": "11s"},
        tenants=[{"name": "a", "weight": 1}, {"name": "b", "weight": 2}],
    )
    assert plan_hash(changed) != base
    assert plan_hash(synthetic(tenants=[{"name": "a", "weight": 1}, {"name": "b", "weight": 3}])) != base


def test_plans_of_plain_synthetic_settings_keep_their_hash() -> None:
    # The hash input of settings without the workload fields is what it was before they existed, so an old
    # audit record's plan hash still matches on rerun.
    described = ReplaySettings(stage=50, synthetic=Synthetic(rate=5), duration=10.0).describe()["synthetic"]
    lengths = {"distribution", "mean", "stddev", "min", "max"}
    assert set(described) == {
        "rate", "arrival", "burstiness", "daily_shape", "prompt_tokens", "output_tokens", "long_context_share",
        "long_context_tokens", "path",
    }  # fmt: skip
    assert set(described["prompt_tokens"]) == lengths and set(described["output_tokens"]) == lengths


def test_plain_synthetic_settings_still_use_the_plain_generator() -> None:
    spec = Synthetic(rate=20)
    assert not spec.realistic
    requests = schedule(spec, 100, 30.0)
    assert all(r.turn is None and r.id.startswith("s") for r in requests)


def test_warmup_is_zero_for_single_turns_and_bounded_otherwise() -> None:
    assert warmup_seconds(TokenLengths(distribution="fixed", mean=1), 30.0) == 0.0
    long = warmup_seconds(TokenLengths(distribution="fixed", mean=1000, max=1000), 86400.0)
    assert 0 < long <= 86400.0


def test_generator_memory_is_the_conversations_in_progress() -> None:
    # An endless stream: taking 30,000 requests works without a duration and never reorders time.
    spec = synthetic(arrival="gamma", burstiness=0.5, daily_shape=True, long_context_share="5%")
    stream = workload_requests(spec, seed=1)
    times = [r.timestamp for r in itertools.islice(stream, 30_000)]
    assert times == sorted(times) and times[0] >= 0


def test_the_warmup_is_bounded_whatever_the_rate_and_think_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1e6 requests/s with a day of think time: the warm-up is cut at MAX_WARMUP_CONVERSATIONS conversations, not
    # a day of them generated before the first request.
    import kfchaos.traffic.workload as workload

    monkeypatch.setattr(workload, "MAX_WARMUP_CONVERSATIONS", 2000)
    spec = synthetic(
        rate=1_000_000,
        conversations={"turns": {"distribution": "fixed", "mean": 3, "max": 3}, "think_time": "24h"},
    )
    first = next(workload_requests(spec, seed=1))
    assert first.turn is not None and int(first.turn.conversation.key[1:]) <= 2100


def test_shards_split_by_conversation_and_together_are_the_stage() -> None:
    spec = synthetic()
    whole = [r.id for r in schedule(spec, 60, 300.0)]
    parts = []
    for shard in range(3):
        plan = plan_stage(ReplaySettings(stage=60, synthetic=spec, duration=300.0, seed=3, shard=shard, shards=3))
        parts.append([p.request for p in plan.schedule()])
    keys = [set(by_conversation(part)) for part in parts]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])  # a conversation on one shard
    assert sorted(r.id for part in parts for r in part) == sorted(whole)
