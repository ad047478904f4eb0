"""Issue 25 class 6: a 2xx stream that served no token is not a success.

vLLM's stream generators (vllm/entrypoints/openai/serving_chat.py, serving_completion.py) send each new piece of
text in `choices[i].delta.content` / `choices[i].text`, a usage chunk with `choices: []` when asked, then
`data: [DONE]`; max_tokens is at least 1 (SamplingParams), so a real completion streams a token.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.settings import ReplaySettings
from kfchaos.traffic.sse import SseTimer, stream_error

from .loopback_server import LoopbackServer


def _timer(*events: bytes) -> SseTimer:
    timer = SseTimer()
    for index, event in enumerate(events):
        timer.feed(event, float(index))
    timer.finish(float(len(events)))
    return timer


def test_a_stream_of_only_done_is_an_empty_completion() -> None:
    assert stream_error(_timer(b"data: [DONE]\n\n")) == "empty_completion"


def test_a_role_chunk_and_zero_usage_is_an_empty_completion() -> None:
    role = json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}).encode()
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}}).encode()
    assert stream_error(_timer(b"data: " + role + b"\n\n", b"data: " + usage + b"\n\n", b"data: [DONE]\n\n")) == (
        "empty_completion"
    )


def test_usage_claiming_tokens_that_never_streamed_is_a_protocol_error() -> None:
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}).encode()
    assert stream_error(_timer(b"data: " + usage + b"\n\n", b"data: [DONE]\n\n")) == "protocol"


def test_a_stream_with_a_token_and_done_is_a_success() -> None:
    token = json.dumps({"choices": [{"index": 0, "text": "hi"}]}).encode()
    assert stream_error(_timer(b"data: " + token + b"\n\n", b"data: [DONE]\n\n")) is None
    assert stream_error(_timer(b"data: " + token + b"\n\n")) == "protocol"  # no [DONE]


def _prompts(tmp_path: Path, n: int) -> str:
    path = tmp_path / "prompts.jsonl"
    rows = [
        {"id": f"p{i}", "timestamp": i * 0.02, "method": "POST", "path": "/v1/completions",
         "body": {"model": "m", "prompt": f"q{i}", "max_tokens": 5}}
        for i in range(n)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.integration
@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
def test_a_server_answering_instantly_with_nothing_records_errors_not_successes(tmp_path: Path, api: str) -> None:
    with LoopbackServer(tokens=0, gap_ms=0) as server:
        settings = ReplaySettings(stage=100, source=_prompts(tmp_path, 4), api=api, model="m")
        result = run_stage(plan_stage(settings), server.url)
    rows = result.table.to_pylist()
    assert [r["status"] for r in rows] == [200] * 4
    assert [r["error"] for r in rows] == ["empty_completion"] * 4
    assert all(r["ttft"] is None for r in rows)
    assert result.summary.ok == 0 and result.summary.errors == {"empty_completion": 4}


@pytest.mark.integration
def test_a_server_claiming_tokens_it_never_streamed_records_protocol_errors(tmp_path: Path) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    with LoopbackServer(tokens=0, gap_ms=0, usage=usage) as server:
        settings = ReplaySettings(stage=100, source=_prompts(tmp_path, 3), api="openai-completions", model="m")
        result = run_stage(plan_stage(settings), server.url)
    assert result.summary.errors == {"protocol": 3}
