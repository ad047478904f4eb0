"""One turn of a synthetic multi-turn conversation, and the messages it sends.

A conversation is drawn once (kfchaos.traffic.workload) and shared by all its turns, so a request carries
only a reference and an index: the text is built at send time (kfchaos.traffic.wire), never held for the
turns still waiting in the schedule. Turn k sends the system prompt, the questions and answers of the turns
before it (the most recent ones that fit `max_context_tokens`, as chat front-ends trim history) and a new
question: so turn k's prompt starts with turn k-1's whole prompt, the prefix a prefix cache can reuse.

Texts are common English words (about one token each), each message tagged first with its conversation and
turn so two conversations never share more than their system prompt. An answer in the history is a
synthetic text of that turn's `max_tokens` words, not what the server generated: an open-loop replay sends
turn k+1 on schedule, not after turn k's answer (inference-perf's user sessions, which wait for the answer,
are closed loop: kubernetes-sigs/inference-perf inference_perf/apis/user_session.py). The cacheable prefix
is therefore turn k's prompt, not its generated tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

# The tag before each message's filler words, counted as this many tokens of its length.
TAG_TOKENS = 3


@dataclass(frozen=True, slots=True)
class Conversation:
    key: str  # the sampling unit: a stage keeps or drops a conversation whole (kfchaos.traffic.sampling)
    system: str | None  # the system prompt's name (tag), None without one
    system_tokens: int
    questions: tuple[int, ...]  # each turn's new question, in tokens
    answers: tuple[int, ...]  # each turn's max_tokens, and the length of its answer in later turns' history
    model: str | None = None  # the tenant's model name (a LoRA adapter), None: the target's model


class Turn(NamedTuple):
    conversation: Conversation
    k: int  # 0-based turn number (not `index`: a tuple method)
    first: int  # the oldest earlier turn still in the history (older ones trimmed)


def history(conversation: Conversation, index: int, max_context_tokens: int) -> tuple[int, int]:
    """(the first earlier turn kept in turn `index`'s history, the turn's prompt tokens): the most recent turns
    whose questions and answers fit in `max_context_tokens` with the system prompt and the new question."""
    tokens = conversation.system_tokens + conversation.questions[index]
    budget = max_context_tokens - tokens
    first = index
    while first > 0:
        cost = conversation.questions[first - 1] + conversation.answers[first - 1]
        if cost > budget:
            break
        budget -= cost
        tokens += cost
        first -= 1
    return first, tokens


def _text(tag: str, tokens: int, filler: Callable[[int], str]) -> str:
    return f"[{tag}] " + filler(max(0, tokens - TAG_TOKENS))


def messages(turn: Turn, filler: Callable[[int], str]) -> list[tuple[str, str]]:
    """(role, text) of the turn's chat messages: system, then user/assistant pairs, then the new question."""
    c = turn.conversation
    out: list[tuple[str, str]] = []
    if c.system is not None:
        out.append(("system", _text(f"system {c.system}", c.system_tokens, filler)))
    for i in range(turn.first, turn.k):
        out.append(("user", _text(f"{c.key} q{i}", c.questions[i], filler)))
        out.append(("assistant", _text(f"{c.key} a{i}", c.answers[i], filler)))
    out.append(("user", _text(f"{c.key} q{turn.k}", c.questions[turn.k], filler)))
    return out


def prompt_text(turn: Turn, filler: Callable[[int], str]) -> str:
    """The messages as one prompt for completion APIs, paragraphs apart: the text before the last paragraph is
    the history, the part a prefix cache shares (and what the demo server takes as the prefix)."""
    return "\n\n".join(text for _, text in messages(turn, filler))
