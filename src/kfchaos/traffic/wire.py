"""Turning a planned request into the bytes of an HTTP/1.1 request for the target's API.

For OpenAI-compatible APIs the body always asks for a stream with usage (`stream: true`,
`stream_options.include_usage`) and names the target's model; recorded bodies are kept otherwise.
Prompt-set and synthetic requests get a body built here: a prompt of `prompt_tokens` words, each a
common English word (about one token each in Llama/GPT tokenizers), prefixed by the request id so no two
prompts share a prefix-cache block -- except long-context bursts, which share one document and differ only in
the question after it, as many users asking about the same long document do -- and synthetic conversations
(kfchaos.traffic.conversation), whose turns share their system prompt and history: chat APIs get them as
messages, completion APIs as paragraphs, and a tenant's model name replaces the target's.
"""

from __future__ import annotations

import json
from typing import Any

from kfchaos.traffic.conversation import messages, prompt_text
from kfchaos.traffic.httpsyntax import encode_path
from kfchaos.traffic.request import API_PATHS, TrafficRequest
from kfchaos.traffic.tagging import STAGE_HEADER, TRACE_HEADER, HeaderPolicy, traceparent

_WORDS = (
    "the",
    "river",
    "stone",
    "cloud",
    "light",
    "house",
    "green",
    "table",
    "paper",
    "water",
    "music",
    "field",
    "night",
    "market",
    "window",
    "story",
    "garden",
    "bread",
    "north",
    "winter",
)
_WORD_TEXT = " ".join(_WORDS) + " "
_words_cache: list[str] = [_WORD_TEXT]


def filler_text(tokens: int) -> str:
    """`tokens` words of filler text (from a cached string that grows to the longest prompt asked for)."""
    full, rest = divmod(tokens, len(_WORDS))
    end = full * len(_WORD_TEXT) + sum(len(w) + 1 for w in _WORDS[:rest])
    if len(_words_cache[0]) < end:
        _words_cache[0] = _WORD_TEXT * (2 * (full + 1))
    return _words_cache[0][:end].rstrip()


class RequestBuilder:
    def __init__(
        self, host_header: str, base_path: str, stage: int, api: str, model: str | None, policy: HeaderPolicy
    ) -> None:
        self.api = api
        self.model = model
        self.policy = policy
        self.base_path = base_path
        # Headers that are the same for every request, serialized once.
        fixed = [("Host", host_header), (STAGE_HEADER, f"stage-{stage}")]
        if api != "http":
            fixed.append(("Accept", "text/event-stream"))
        self.fixed = "".join(f"{n}: {v}\r\n" for n, v in fixed).encode("latin-1")
        self.plain_extra = "".join(f"{n}: {v}\r\n" for n, v in policy.apply(())).encode("latin-1")

    def body(self, request: TrafficRequest) -> tuple[str, bytes, bool]:
        """(path, body, is_json) for the target's API."""
        if self.api == "http":
            if request.prompt is None and request.prompt_tokens is None:
                return request.path, request.body, False
            payload: dict[str, Any] = {"prompt": self._prompt(request), "max_tokens": request.max_tokens}
            return request.path, json.dumps(payload).encode(), True
        path = API_PATHS[self.api]
        if request.prompt is None and request.prompt_tokens is None and request.body:
            try:
                recorded = json.loads(request.body)
            except ValueError:
                recorded = None
            if isinstance(recorded, dict):
                if request.path.startswith("/v1/"):
                    path = request.path
                return path, self._stream(recorded), True
        turn = request.turn
        payload = {"max_tokens": request.max_tokens or 128}
        if request.ignore_eos:
            payload["ignore_eos"] = True
        if turn is not None and self.api == "openai-chat":
            payload["messages"] = [{"role": r, "content": t} for r, t in messages(turn, filler_text)]
        elif self.api == "openai-chat":
            payload["messages"] = [{"role": "user", "content": self._prompt(request)}]
        else:
            payload["prompt"] = self._prompt(request)
        return path, self._stream(payload, self.requested_model(request)), True

    def requested_model(self, request: TrafficRequest) -> str | None:
        """The model the request asks for: its own (a LoRA churn's adapter), its tenant's, else the target's; None
        for a plain HTTP API. A recorded body's model is replaced by the target's too (`_stream`)."""
        if self.api == "http":
            return None
        turn = request.turn
        return request.model or (turn.conversation.model if turn is not None else None) or self.model

    def _prompt(self, request: TrafficRequest) -> str:
        if request.prompt is not None:
            return request.prompt
        if request.turn is not None:
            return prompt_text(request.turn, filler_text)
        if request.long_context:
            # A burst is many users asking about one long document: the document comes first and is the same
            # for every request (a prefix cache can share it), the question after it differs.
            return filler_text(max(0, (request.prompt_tokens or 1) - 8)) + f"\n\n[{request.id}] Summarize the above."
        return f"[{request.id}] " + filler_text(max(0, (request.prompt_tokens or 1) - 3))

    def _stream(self, payload: dict[str, Any], model: str | None = None) -> bytes:
        payload["model"] = model or self.model  # a tenant's model (its LoRA adapter) when it names one
        payload["stream"] = True
        options = payload.get("stream_options")
        payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return json.dumps(payload, separators=(",", ":")).encode()

    def build(self, request: TrafficRequest, trace_id: bytes) -> bytes:
        path, body, is_json = self.body(request)
        method = request.method if self.api == "http" else "POST"
        trace = trace_id.hex()
        head = [
            # encode_path is idempotent on the readers' already-encoded paths: a last guard for the request line.
            f"{method} {self.base_path}{encode_path(path)} HTTP/1.1\r\n".encode("latin-1"),
            self.fixed,
            f"{TRACE_HEADER}: {trace}\r\ntraceparent: {traceparent(trace_id)}\r\n".encode(),
        ]
        if request.headers:
            headers = self.policy.apply(request.headers)
            if is_json:
                headers = [(n, v) for n, v in headers if n.lower() != "content-type"]
            head.append("".join(f"{n}: {v}\r\n" for n, v in headers).encode("latin-1", "replace"))
        else:
            head.append(self.plain_extra)
        if is_json:
            head.append(b"Content-Type: application/json\r\n")
        if body or request.method in ("POST", "PUT", "PATCH") or self.api != "http":
            head.append(b"Content-Length: %d\r\n" % len(body))
        head.append(b"\r\n")
        head.append(body)
        return b"".join(head)
