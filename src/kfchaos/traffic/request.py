"""One request from a traffic source, before it is tagged and sent.

Kept small (slots, no per-request dicts) because a replay streams millions of them; only the requests
in flight are alive at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfchaos.traffic.conversation import Turn

# The request path of each API the replayer speaks (the fault generators and the wire encoder both use it).
API_PATHS = {"openai-completions": "/v1/completions", "openai-chat": "/v1/chat/completions"}


@dataclass(frozen=True, slots=True)
class ClientBehaviour:
    """How the replayer's client treats one fault request's stream (kfchaos.traffic.trafficfaults.client).

    `abort_after_tokens` / `abort_after_s`: close the connection after that many token chunks, or seconds after
    sending (a client abort). `read_rate`: read the stream at most this many bytes/s through a small receive
    buffer (a slow reader). None everywhere is an ordinary client.
    """

    abort_after_tokens: int | None = None
    abort_after_s: float | None = None
    read_rate: float | None = None


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ is ~3x slower, and this is the hot path
class TrafficRequest:
    """`timestamp` is when it was recorded (epoch seconds; relative offsets are fine for synthetic sources).

    A recorded request has its raw `body`. A prompt-set or synthetic request has no body but a `prompt`
    (text) or `prompt_tokens` (a length to synthesize), and the body is built at send time for the
    target's API, so the same source drives /v1/completions and /v1/chat/completions. A synthetic conversation's
    request has its `turn` (kfchaos.traffic.conversation): its messages are built at send time, and a stage
    keeps or drops the conversation whole.
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
    fault: str | None = None  # the traffic-side fault that sent it (kfchaos.traffic.trafficfaults); None: traffic
    turn: Turn | None = None  # a synthetic conversation's turn (kfchaos.traffic.conversation)
    model: str | None = None  # the model it names instead of target.model (a LoRA adapter); built bodies only
    client: ClientBehaviour | None = None  # a fault request's client behaviour (abort, slow reading); None: normal
    ignore_eos: bool = False  # ask for all max_tokens whatever the end-of-sequence token (a load fault's option)
