"""One request from a traffic source, before it is tagged and sent.

Kept small (slots, no per-request dicts) because a replay streams millions of them; only the requests
in flight are alive at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ is ~3x slower, and this is the hot path
class TrafficRequest:
    """`timestamp` is when it was recorded (epoch seconds; relative offsets are fine for synthetic sources).

    A recorded request has its raw `body`. A prompt-set or synthetic request has no body but a `prompt`
    (text) or `prompt_tokens` (a length to synthesize), and the body is built at send time for the
    target's API, so the same source drives /v1/completions and /v1/chat/completions.
    """

    id: str
    timestamp: float
    method: str = "GET"
    path: str = "/"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    prompt: str | None = None
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    long_context: bool = False  # a long-context burst's prompt: one shared document, then a question
    fault: str | None = None  # the traffic-side fault that sent it (kfchaos.traffic.faultload); None: traffic
