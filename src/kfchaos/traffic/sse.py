"""Incremental parsing of OpenAI-compatible streaming responses (Server-Sent Events) into token timings.

Fed body bytes as they arrive (already de-chunked by the HTTP parser), with the arrival time. Events are
split on blank lines, `:` comment lines are ignored, `data: [DONE]` ends the stream. A chunk counts as a
token chunk when it carries generated output: non-empty `choices[0].text` (completions), or in
`choices[0].delta` (chat) a non-empty `content`, `reasoning` (vLLM's current name, vllm-project/vllm#27755),
`reasoning_content` (its older name) or `tool_calls`. The final `usage` object gives the token counts.
Timings are kept as the first and last token-chunk times and the gaps between token chunks (for ITL).

The target's answer is hostile input: anything that is not that shape (a non-object chunk, `choices` not
a list, a token count that is not an integer from 0 to 2^31-1, an event over MAX_SSE_EVENT_BYTES, JSON
nested deeper than MAX_JSON_DEPTH, data that is not UTF-8, a usage.prompt_tokens above MAX_CONTEXT_TOKENS) raises
SseError, which records that one request as a protocol error. Messages never quote the payload (it may echo the
prompt). Parsing is linear in the bytes however they are cut (a million one-byte chunks cost a million small feeds,
never the square of an event's length). Names (model, finish_reason) are kept to MAX_NAME characters (`bounded_name`).

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
- whose usage claims more completion tokens than the bytes it carried (`usage_plausible`): "protocol", and the
  records count the token chunks, never the claim;
- whose finish_reason no API defines (KNOWN_FINISH): "protocol", the reason recorded as sent (cut);
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
from array import array
from typing import Any

from kfchaos.bounds import MAX_CONTEXT_TOKENS, MAX_SSE_EVENT_BYTES, MAX_TOKENS, json_depth_ok


class SseError(Exception):
    """The stream is not valid SSE carrying JSON chunks."""


MAX_NAME = 128  # a finish_reason or model name longer than this is cut (a hostile server's names are bounded)
CUT_MARK = "\u2026"  # ends a name that was cut, so a cut name never equals a whole one
FAILED_FINISH = {"abort": "finish_abort", "error": "finish_error"}
# The finish_reason values an API defines. OpenAI's chat completion choice: stop, length, tool_calls, content_filter,
# function_call (deprecated); its completions: stop, length, content_filter (platform.openai.com/docs/api-reference,
# `finish_reason`). vLLM's engine: stop, length, abort, error, repetition (0.32's vllm/v1/engine/__init__.py
# FINISH_REASON_STRINGS; repetition: "repetitive token pattern detected", an answer the engine ended), and its chat
# serving sets tool_calls (vllm/entrypoints/openai/chat_completion/protocol.py: finish_reason a plain str). Any
# other value is no finish an API knows: the answer is a `protocol` error, its finish_reason kept as the server said
# it. A later vLLM that adds one needs it added here (tests/engine runs the pinned engine's answers through this).
KNOWN_FINISH = frozenset(
    {"stop", "length", "tool_calls", "content_filter", "function_call", "abort", "error", "repetition"}
)


def bounded_name(name: str) -> str:
    """`name` as a record keeps it: at most MAX_NAME characters, a cut one ending in CUT_MARK."""
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 1] + CUT_MARK


class SseTimer:
    __slots__ = (
        "buffer",
        "chunks",
        "completion_tokens",
        "cr",
        "done",
        "error_event",
        "finish_reason",
        "first",
        "gaps",
        "hidden_tokens",
        "last",
        "model",
        "prompt_tokens",
        "received",
    )

    def __init__(self) -> None:
        self.buffer = bytearray()  # the incomplete last event (CR LF already made LF)
        self.cr = False  # the last byte fed was a CR, held back: it may begin a CR LF split across two feeds
        self.received = 0  # body bytes fed
        self.error_event = False  # the stream carried an error event
        self.finish_reason: str | None = None  # the choices' finish_reason (abort or error win over others)
        self.model: str | None = None  # the model the chunks name (two names joined by "|" when they disagree)
        self.first: float | None = None  # time of the first token chunk
        self.last: float | None = None  # time of the last token chunk
        # Between successive token chunks: 8 bytes each (a float list costs 32), since an endless stream of tiny
        # events may hold two million of them before MAX_RESPONSE_BYTES ends it.
        self.gaps = array("d")
        self.chunks = 0  # token chunks
        self.completion_tokens: int | None = None
        self.hidden_tokens = 0  # completion tokens the usage says were generated and not streamed (reasoning)
        self.prompt_tokens: int | None = None
        self.done = False

    def feed(self, data: bytes, now: float) -> None:
        # Linear in the bytes fed, however they are cut: each byte is searched for an event's end once. (Joining the
        # tail and splitting it again on every feed cost the square of an event's length: a million one-byte HTTP
        # chunks making one event held the event loop for minutes.)
        self.received += len(data)
        if self.cr:
            data = b"\r" + data
            self.cr = False
        if b"\r" in data:
            if data.endswith(b"\r"):
                self.cr = True
                data = data[:-1]
            data = data.replace(b"\r\n", b"\n")
        tail = self.buffer
        if tail:
            start = len(tail) - 1  # an event's end may begin on the tail's last byte
            tail += data
            end = tail.rfind(b"\n\n", start)
            if end < 0:
                if len(tail) > MAX_SSE_EVENT_BYTES:
                    raise SseError(f"an event longer than {MAX_SSE_EVENT_BYTES} bytes")
                return
            block = bytes(tail[:end])
            del tail[: end + 2]
        else:
            end = data.rfind(b"\n\n")
            if end < 0:
                tail += data
                if len(tail) > MAX_SSE_EVENT_BYTES:
                    raise SseError(f"an event longer than {MAX_SSE_EVENT_BYTES} bytes")
                return
            block = data[:end]
            tail += data[end + 2 :]
        if len(tail) > MAX_SSE_EVENT_BYTES:
            raise SseError(f"an event longer than {MAX_SSE_EVENT_BYTES} bytes")
        for event in block.split(b"\n\n"):
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
            # An event stream is UTF-8 (WHATWG HTML, "Server-sent events": text/event-stream is always UTF-8) and so is
            # JSON on the wire (RFC 8259 8.1). Decoded strictly: a browser would put U+FFFD in, but a server that sends
            # invalid UTF-8 sends no answer a client can read as it was meant, so the request failed (`protocol`), as
            # vLLM's own benchmark client counts it (vllm/benchmarks/lib/endpoint_request_func.py decodes strictly).
            # json.loads on bytes would also guess UTF-16 or UTF-32.
            decoded = payload.decode("utf-8")
        except UnicodeDecodeError:
            raise SseError("data is not UTF-8") from None
        try:
            chunk: Any = json.loads(decoded)
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
            prompt = _count(usage, "prompt_tokens", MAX_CONTEXT_TOKENS)
            if completion is not None:
                self.completion_tokens = completion
            if prompt is not None:
                self.prompt_tokens = prompt
            details = usage.get("completion_tokens_details")
            if isinstance(details, dict):
                # OpenAI's reasoning models count the reasoning they never stream in completion_tokens and say how
                # many in completion_tokens_details.reasoning_tokens (OpenAI API reference, "The chat completion
                # object", usage): those need no bytes of this stream.
                hidden = _count(details, "reasoning_tokens")
                if hidden is not None:
                    self.hidden_tokens = hidden

    def _model(self, model: Any) -> None:
        if not isinstance(model, str):
            raise SseError("model is not text")
        model = bounded_name(model)
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
                self.finish_reason = bounded_name(reason)

    def finish(self, now: float) -> None:
        """At the end of the body: a last event without its blank line still counts."""
        if self.cr:  # a CR the body ended with
            self.buffer += b"\r"
            self.cr = False
        if self.buffer.strip():
            tail, self.buffer = bytes(self.buffer), bytearray()
            self.feed(tail + b"\n\n", now)
            self.received -= len(tail) + 2  # counted when first fed

    @property
    def usage_plausible(self) -> bool:
        """Whether the completion_tokens the usage claims could have come in this stream: every generated token
        the stream counts travels in it as text (at least one byte) or as a token chunk, so a claim above the bytes
        received is a lie (a billion tokens in a 500-byte answer). A choice, kept generous: real streams carry tens
        of bytes a token (the chunk's JSON). Tokens the usage itself says were never streamed (hidden reasoning)
        are left out of the comparison; a server that hides tokens without saying so could break it only in
        answers of a few bytes a token."""
        if self.completion_tokens is None:
            return True
        return self.completion_tokens - min(self.hidden_tokens, self.completion_tokens) <= self.received

    @property
    def output_tokens(self) -> int | None:
        """The usage's completion_tokens when plausible, else the token chunks counted: a lie never inflates the
        records' token counts or deflates their TPOT."""
        if self.completion_tokens is not None and self.usage_plausible:
            return self.completion_tokens
        return self.chunks or None


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
    if timer.finish_reason is not None and timer.finish_reason not in KNOWN_FINISH:
        return "protocol"  # a finish no API defines (KNOWN_FINISH): not a completion anyone can vouch for
    if not timer.usage_plausible:
        return "protocol"  # usage claims more tokens than the stream could carry
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


def _count(usage: dict[str, Any], key: str, limit: int = MAX_TOKENS) -> int | None:
    value = usage.get(key)
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= limit:
        raise SseError(f"usage.{key} is not a token count from 0 to {limit}")
    return value
