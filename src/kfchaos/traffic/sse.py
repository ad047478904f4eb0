"""Incremental parsing of OpenAI-compatible streaming responses (Server-Sent Events) into token timings.

Fed body bytes as they arrive (already de-chunked by the HTTP parser), with the arrival time. Events are
split on blank lines, `:` comment lines are ignored, `data: [DONE]` ends the stream. A chunk counts as a
token chunk when it carries generated output: non-empty `choices[0].text` (completions), or in
`choices[0].delta` (chat) a non-empty `content`, `reasoning` (vLLM's current name, vllm-project/vllm#27755),
`reasoning_content` (its older name) or `tool_calls`. The final `usage` object gives the token counts.
Timings are kept as the first and last token-chunk times and the gaps between token chunks (for ITL).

The target's answer is hostile input: anything that is not that shape (a non-object chunk, `choices` not
a list, a token count that is not an integer from 0 to 2^31-1, an event over MAX_SSE_EVENT_BYTES, JSON
nested deeper than MAX_JSON_DEPTH) raises SseError, which records that one request as a protocol error.
Messages never quote the payload (it may echo the prompt).

A 2xx stream is a success only if it served output and completed (`stream_error`). vLLM's generators
(vllm-project/vllm vllm/entrypoints/openai/chat_completion/serving.py `chat_completion_stream_generator`,
completion/serving.py `completion_stream_generator`) send one chunk per engine output with the new text in
`choices[i].delta.content` / `choices[i].text` and the `model` they answer as, the last one with its
`finish_reason`, then, with `stream_options.include_usage`, a chunk with `choices: []` and `usage`, then
`data: [DONE]`; vLLM refuses max_tokens below 1 (vllm/sampling_params.py `_verify_args`), so a real 2xx
completion holds at least one token. The chat stream's first chunk is the role alone (`delta: {role, content:
""}`): not a token, so TTFT runs to the first content, reasoning or tool-call delta. So a 2xx stream
- with no body at all: "empty_body";
- that carried an error event: "stream_error". When generation fails mid-stream vLLM does not end the HTTP
  response with an error status (the 200 and the first chunks are sent): it writes
  `data: {"error": {"message", "type", "code"}}` (`create_streaming_error_response`, engine/serving.py; older
  versions wrote the ErrorResponse flat, `{"object": "error", "message", ...}`) and then `data: [DONE]`;
- without `data: [DONE]`: "protocol";
- without a token chunk: "empty_completion" when it says it generated no tokens (or says nothing),
  "protocol" when its usage claims tokens it never streamed;
- whose choice finished with finish_reason "abort" (vllm/v1/engine/__init__.py FINISH_REASON_STRINGS: aborted)
  or "error" (a retryable request-level internal error; vLLM's `_raise_if_error` turns it into an error event,
  a gateway or another server may pass it on as is): "finish_abort" / "finish_error".
finish_reason "length" (max_tokens or max_model_len reached) is a completion, recorded for the report; a
tool-call-only answer (`delta.tool_calls`, finish_reason "tool_calls") is a completion.

Who answered: every chunk names the model it answers as (`model`: the served model's first name, or a LoRA
adapter's name when the request named one; vllm/entrypoints/openai/models/serving.py `model_name`). The timer
keeps that name; the engine compares it with the model the request asked for (`wrong_model`).
"""

from __future__ import annotations

import json
from typing import Any

from kfchaos.bounds import MAX_SSE_EVENT_BYTES, MAX_TOKENS, json_depth_ok


class SseError(Exception):
    """The stream is not valid SSE carrying JSON chunks."""


MAX_NAME = 128  # a finish_reason or model name longer than this is cut (a hostile server's names are bounded)
FAILED_FINISH = {"abort": "finish_abort", "error": "finish_error"}


class SseTimer:
    __slots__ = (
        "buffer",
        "chunks",
        "completion_tokens",
        "done",
        "error_event",
        "finish_reason",
        "first",
        "gaps",
        "last",
        "model",
        "prompt_tokens",
        "received",
    )

    def __init__(self) -> None:
        self.buffer = b""
        self.received = 0  # body bytes fed
        self.error_event = False  # the stream carried an error event
        self.finish_reason: str | None = None  # the choices' finish_reason (abort or error win over others)
        self.model: str | None = None  # the model the chunks name (two names joined by "|" when they disagree)
        self.first: float | None = None  # time of the first token chunk
        self.last: float | None = None  # time of the last token chunk
        self.gaps: list[float] = []  # between successive token chunks
        self.chunks = 0  # token chunks
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.done = False

    def feed(self, data: bytes, now: float) -> None:
        self.received += len(data)
        buffer = self.buffer + data if self.buffer else data
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        events = buffer.split(b"\n\n")
        self.buffer = events.pop()  # the incomplete tail, if any
        if len(self.buffer) > MAX_SSE_EVENT_BYTES:
            raise SseError(f"an event longer than {MAX_SSE_EVENT_BYTES} bytes")
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._data(line[5:].strip(), now)
                elif line and not line.startswith(b":") and b":" not in line:
                    raise SseError("not an SSE field line")

    def _data(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        if len(payload) > MAX_SSE_EVENT_BYTES or not json_depth_ok(payload):
            raise SseError("data is too large or nested too deep")
        try:
            chunk: Any = json.loads(payload)
        except (ValueError, RecursionError):
            raise SseError("data is not JSON") from None
        if not isinstance(chunk, dict):
            raise SseError("data is not a JSON object")
        choices = chunk.get("choices")
        if "error" in chunk or chunk.get("object") == "error":
            self.error_event = True  # vLLM's streaming error (see the module's docstring); [DONE] follows
            return
        if choices is not None and not isinstance(choices, list):
            raise SseError("choices is not a list")
        model = chunk.get("model")
        if model is not None:
            self._model(model)
        if choices:
            self._finish(choices)
            choice = choices[0]
            if not isinstance(choice, dict):
                raise SseError("choices[0] is not an object")
            delta = choice.get("delta")
            if delta is not None:
                if not isinstance(delta, dict):
                    raise SseError("choices[0].delta is not an object")
                token = _carries_output(delta)
            else:
                text = choice.get("text")
                token = isinstance(text, str) and text != ""
            if token:
                if self.last is None:
                    self.first = now
                else:
                    self.gaps.append(now - self.last)
                self.last = now
                self.chunks += 1
        usage = chunk.get("usage")
        if usage is not None:
            if not isinstance(usage, dict):
                raise SseError("usage is not an object")
            completion = _count(usage, "completion_tokens")
            prompt = _count(usage, "prompt_tokens")
            if completion is not None:
                self.completion_tokens = completion
            if prompt is not None:
                self.prompt_tokens = prompt

    def _model(self, model: Any) -> None:
        if not isinstance(model, str):
            raise SseError("model is not text")
        model = model[:MAX_NAME]
        if self.model is None:
            self.model = model
        elif model != self.model and "|" not in self.model:  # the answer changed models midway: named both
            self.model = f"{self.model}|{model}"

    def _finish(self, choices: list[Any]) -> None:
        for choice in choices:
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            if reason is None:
                continue
            if not isinstance(reason, str):
                raise SseError("finish_reason is not text")
            if self.finish_reason not in FAILED_FINISH:  # one choice aborted: the answer is not whole
                self.finish_reason = reason[:MAX_NAME]

    def finish(self, now: float) -> None:
        """At the end of the body: a last event without its blank line still counts."""
        if self.buffer.strip():
            tail, self.buffer = self.buffer, b""
            self.feed(tail + b"\n\n", now)

    @property
    def output_tokens(self) -> int | None:
        return self.completion_tokens if self.completion_tokens is not None else (self.chunks or None)


def stream_error(timer: SseTimer) -> str | None:
    """The error kind of a finished 2xx stream, None when it is a success (see the module's docstring)."""
    if not timer.received:
        return "empty_body"
    if timer.error_event:
        return "stream_error"
    if not timer.done:
        return "protocol"  # the stream ended without data: [DONE]
    if timer.finish_reason in FAILED_FINISH:
        return FAILED_FINISH[timer.finish_reason]
    if timer.first is None:
        return "protocol" if timer.completion_tokens else "empty_completion"
    return None


def _carries_output(delta: dict[str, Any]) -> bool:
    for key in ("content", "reasoning", "reasoning_content"):
        value = delta.get(key)
        if value is not None and not isinstance(value, str):
            raise SseError(f"delta.{key} is not text")
        if value:
            return True
    tool_calls = delta.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise SseError("delta.tool_calls is not a list")
    return bool(tool_calls)


def _count(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:
        raise SseError(f"usage.{key} is not a token count from 0 to {MAX_TOKENS}")
    return value
