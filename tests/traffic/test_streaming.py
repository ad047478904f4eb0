"""LLM streaming: SSE from OpenAI-compatible endpoints parsed into TTFT, ITL, TPOT and tokens."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfchaos.faultspec.params import LongContextBurstParams
from kfchaos.traffic import engine, http1
from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.settings import GoodputSlo, ReplaySettings, TrafficFault
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
        assert row["ended"] == pytest.approx(row["sent"] + row["latency"], abs=1e-6)  # the same clock
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
    # A broken stream has no latency, but its end is recorded: after its first token, when the stream closed.
    for row in result.table.to_pylist():
        assert row["latency"] is None and row["ended"] is not None
        assert row["sent"] + row["ttft"] <= row["ended"] < row["sent"] + 5.0


def test_long_context_burst_requests_are_sent_and_flagged(tmp_path: Path) -> None:
    burst = TrafficFault("kv", LongContextBurstParams(requests=4, context_tokens=2000, max_tokens=3, start="100ms"))
    with LoopbackServer(tokens=3, gap_ms=5) as server:
        settings_ = ReplaySettings(
            stage=100, source=prompts(tmp_path, 4), api="openai-chat", model="m", duration=1.0, loop=False,
            traffic_faults=(burst,),
        )  # fmt: skip
        result = run_stage(plan_stage(settings_), server.url)
        long_bodies = [json.loads(s.body) for s in server.seen if len(s.body) > 5000]
    rows = [r for r in result.table.to_pylist() if r["long_context"]]
    assert len(rows) == 4 and all(r["fault_active"] and r["error"] is None for r in rows)
    # The records name the fault that sent each of its requests; the traffic's own requests name none.
    assert [r["fault_request"] for r in rows] == ["kv"] * 4
    assert {r["fault_request"] for r in result.table.to_pylist() if not r["long_context"]} == {None}
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


@pytest.mark.parametrize("key", ["reasoning", "reasoning_content"])
def test_reasoning_deltas_are_tokens(tmp_path: Path, key: str) -> None:
    """vLLM streams reasoning in `delta.reasoning` (renamed from `reasoning_content`, vllm-project/vllm#27755);
    before, only `content` counted, so TTFT waited for the answer after all the reasoning (issue 11 §5)."""
    with LoopbackServer(tokens=4, gap_ms=20, delta_key=key) as server:
        settings_ = ReplaySettings(stage=100, source=prompts(tmp_path, 2), api="openai-chat", model="m")
        rows = run_stage(plan_stage(settings_), server.url).table.to_pylist()
    for row in rows:
        assert row["error"] is None and 0.018 <= row["ttft"] < 0.5 and row["itl_mean"] >= 0.018


def test_tool_call_deltas_are_tokens_and_odd_shapes_are_protocol_errors() -> None:
    timer = SseTimer()
    timer.feed(b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n', 1.0)
    timer.feed(b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}\n\n', 2.0)
    timer.feed(b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}\n\n', 3.0)
    assert (timer.first, timer.last, timer.chunks) == (2.0, 3.0, 2)
    for odd in (
        b'data: {"choices":{"0":1}}\n\n',
        b'data: {"choices":[{"delta":"x"}]}\n\n',
        b'data: {"choices":[{"delta":{"content":5}}]}\n\n',
        b'data: {"choices":[],"usage":{"completion_tokens":true}}\n\n',
        b'data: {"choices":[],"usage":{"completion_tokens":1e3}}\n\n',
        b'data: {"choices":[],"usage":[]}\n\n',
        b"data: " + b"[" * 5000 + b"]" * 5000 + b"\n\n",
    ):
        with pytest.raises(SseError):
            SseTimer().feed(odd, 0.0)


def test_connection_setup_counts_in_latency_not_in_send_lag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A network-delay fault slows the handshake: before, that time was send lag (the stage could turn INVALID)
    and vanished from TTFT and latency. Now `sent` is taken before connecting, as vLLM's bench client takes
    `st` before `session.post`, and the handshake is recorded per request in `connect`."""
    delay = 0.3

    class SlowLoop:
        def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
            self._loop = loop

        def __getattr__(self, name: str) -> Any:
            return getattr(self._loop, name)

        async def create_connection(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(delay)
            return await self._loop.create_connection(*args, **kwargs)

    class SlowPool(http1.Pool):
        def __init__(self, target: http1.Target, loop: asyncio.AbstractEventLoop, done: Any) -> None:
            super().__init__(target, SlowLoop(loop), done)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "Pool", SlowPool)
    with LoopbackServer(tokens=2, gap_ms=5) as server:
        settings_ = ReplaySettings(stage=100, source=prompts(tmp_path, 3), api="openai-chat", model="m")
        rows = run_stage(plan_stage(settings_), server.url).table.to_pylist()
    for row in rows:  # three requests 50 ms apart: each opens its own connection
        assert row["error"] is None and row["connect"] >= delay * 0.95
        assert row["ttft"] >= row["connect"] and row["latency"] >= row["connect"]
        assert row["sent"] - row["intended"] < delay  # the scheduler was on time; the handshake is not lag
