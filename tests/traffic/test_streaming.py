"""LLM streaming: SSE from OpenAI-compatible endpoints parsed into TTFT, ITL, TPOT and tokens."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfchaos.faults.params import LongContextBurstParams
from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.plan import BurstFault, GoodputSlo, ReplaySettings
from kfchaos.traffic.sse import SseError, SseTimer

from .loopback_server import LoopbackServer

pytestmark = pytest.mark.integration


def prompts(tmp_path: Path, n: int) -> str:
    path = tmp_path / "prompts.jsonl"
    rows = [
        {"id": f"p{i}", "timestamp": i * 0.05, "method": "POST", "path": "/v1/chat/completions",
         "body": {"model": "recorded", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 5}}
        for i in range(n)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
def test_token_timings_from_a_streaming_server(tmp_path: Path, api: str) -> None:
    with LoopbackServer(tokens=6, gap_ms=20) as server:
        settings_ = ReplaySettings(stage=100, source=prompts(tmp_path, 5), api=api, model="served-model")
        result = run_stage(plan_stage(settings_), server.url)
        bodies = [json.loads(seen.body) for seen in server.seen]
    assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True} for b in bodies)
    assert all(b["model"] == "served-model" for b in bodies)
    assert {seen.path for seen in server.seen} == {"/v1/chat/completions"}  # recorded path kept
    rows = result.table.to_pylist()
    assert len(rows) == 5 and all(r["error"] is None for r in rows)
    for row in rows:
        # The role-only first chat chunk arrives at once; TTFT waits for the first content (20 ms later).
        # Lower bounds are exact (the server sleeps 20 ms before each token); upper ones leave room for a
        # busy machine.
        assert 0.018 <= row["ttft"] < 0.5
        assert 0.018 <= row["itl_mean"] < 0.5
        assert 0.018 <= row["tpot"] < 0.5
        assert row["output_tokens"] == 6 and row["prompt_tokens"] == 7  # from the usage chunk
        assert row["latency"] >= row["ttft"] + 5 * 0.018
    summary = result.summary
    assert summary.output_tokens == 30 and summary.ttft is not None and summary.goodput is not None


def test_goodput_counts_requests_within_every_slo(tmp_path: Path) -> None:
    with LoopbackServer(tokens=4, gap_ms=20) as server:
        base = ReplaySettings(stage=100, source=prompts(tmp_path, 4), api="openai-chat", model="m")
        loose = run_stage(plan_stage(base, goodput=GoodputSlo(ttft=1.0, tpot=1.0)), server.url).summary
        strict = run_stage(plan_stage(base, goodput=GoodputSlo(ttft=0.001)), server.url).summary
    assert loose.good_requests == 4 and strict.good_requests == 0


def test_a_stream_without_done_is_a_protocol_error(tmp_path: Path) -> None:
    with LoopbackServer(tokens=3, gap_ms=5, truncate=True) as server:
        settings_ = ReplaySettings(stage=100, source=prompts(tmp_path, 3), api="openai-completions", model="m")
        result = run_stage(plan_stage(settings_), server.url)
    assert result.summary.errors == {"protocol": 3}


def test_long_context_burst_requests_are_sent_and_flagged(tmp_path: Path) -> None:
    burst = BurstFault("kv", LongContextBurstParams(requests=4, context_tokens=2000, max_tokens=3, start="100ms"))
    with LoopbackServer(tokens=3, gap_ms=5) as server:
        settings_ = ReplaySettings(
            stage=100, source=prompts(tmp_path, 4), api="openai-chat", model="m", duration=1.0, loop=False,
            bursts=(burst,),
        )  # fmt: skip
        result = run_stage(plan_stage(settings_), server.url)
        long_bodies = [json.loads(s.body) for s in server.seen if len(s.body) > 5000]
    rows = [r for r in result.table.to_pylist() if r["long_context"]]
    assert len(rows) == 4 and all(r["fault_active"] and r["error"] is None for r in rows)
    assert len(long_bodies) == 4
    words = long_bodies[0]["messages"][0]["content"].split()
    assert len(words) == pytest.approx(2000, abs=5) and long_bodies[0]["max_tokens"] == 3
    assert result.summary.long_context_requests == 4


STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"Hel"}}],"usage":null}\r\n\r\n'
    b'data: {"choices":[{"delta":{"content":"lo"}}],"usage":null}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, len(STREAM)), max_size=8))
def test_sse_parsing_does_not_depend_on_how_the_bytes_are_split(cuts: list[int]) -> None:
    timer = SseTimer()
    points = [0, *sorted(cuts), len(STREAM)]
    for i, (a, b) in enumerate(itertools.pairwise(points)):
        timer.feed(STREAM[a:b], float(i))
    timer.finish(99.0)
    assert timer.done and timer.chunks == 2 and timer.output_tokens == 2 and timer.prompt_tokens == 3
    assert timer.first is not None and timer.last is not None and timer.first <= timer.last


def test_sse_garbage_is_an_error() -> None:
    with pytest.raises(SseError):
        SseTimer().feed(b"data: {not json}\n\n", 0.0)
