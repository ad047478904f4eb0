"""Shapes of answers, for holding the demo server to the real engine (tests/engine/test_demo_contract.py).

A shape keeps what kfchaos and a client depend on and drops what differs by nature (generated text, ids, times,
counts): JSON objects keep their keys, lists their items, scalars become their type name, except the values
of KEPT keys (what a parser branches on: the chunk's `object`, the delta's `role`, `finish_reason`, an error's
`type`, `param` and `code`). An SSE body is checked for vLLM's framing (every event one `data: ` line and a
blank line, `data: [DONE]` last) and becomes the list of its chunks' shapes with runs of equal shapes folded
into one, so streams of different lengths compare. Metrics become, per family, the type and the label names of
each sample suffix (`_bucket` carries `le`), read with prometheus_client's parser.
"""

from __future__ import annotations

import json
import re
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

KEPT = frozenset({"object", "role", "finish_reason", "type", "param", "code"})
DONE = "[DONE]"


def shape(value: Any, key: str | None = None) -> Any:
    if isinstance(value, dict):
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if key in KEPT:
        return value
    return type(value).__name__


def sse_events(body: bytes) -> list[str]:
    """The data of each event, after checking vLLM's framing: `data: <payload>\\n\\n` per event, nothing else."""
    text = body.decode()
    assert text.endswith("\n\n"), f"the stream does not end with a blank line: {text[-80:]!r}"
    events = text[:-2].split("\n\n")
    for event in events:
        assert "\n" not in event and "\r" not in event, f"an event of more than one line: {event[:120]!r}"
        assert event.startswith("data: "), f"an event that is not `data: `: {event[:120]!r}"
    payloads = [e.removeprefix("data: ") for e in events]
    assert payloads[-1] == DONE, f"the stream does not end with data: [DONE]: {payloads[-1][:120]!r}"
    assert DONE not in payloads[:-1], "data: [DONE] before the end"
    return payloads


def sse_chunks(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(p) for p in sse_events(body)[:-1]]


def merge_role_chunk(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM opens a chat stream with the role alone (`delta: {role, content: ""}`) and the demo puts the role on its
    first token's chunk (an allowed difference): a leading role-only chunk is merged into the next one, on either
    side, so both read as one opening chunk and everything else about it is still compared."""
    if len(chunks) < 2 or not chunks[0].get("choices"):
        return chunks
    first = chunks[0]["choices"][0]
    if first.get("delta") != {"role": "assistant", "content": ""}:
        return chunks
    merged = {**chunks[0], **chunks[1]}
    for name in ("prompt_token_ids", "prompt_text"):  # the role chunk's own keys
        if name in chunks[0]:
            merged[name] = chunks[0][name]
    choice = {**first, **chunks[1]["choices"][0]}
    choice["delta"] = {"role": "assistant", **chunks[1]["choices"][0]["delta"]}
    merged["choices"] = [choice]
    return [merged, *chunks[2:]]


def stream_shape(body: bytes) -> list[Any]:
    """The folded shapes of a stream's chunks, then [DONE]."""
    shapes = [shape(c) for c in merge_role_chunk(sse_chunks(body))]
    folded: list[Any] = []
    for item in shapes:
        if not folded or folded[-1] != item:
            folded.append(item)
    return [*folded, DONE]


def families(text: str) -> dict[str, tuple[str, dict[str, tuple[str, ...]]]]:
    """family name -> (type, {sample suffix: label names}); `_created` families (prometheus_client's creation
    times) are left out."""
    found: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.endswith("_created"):
            continue
        labels: dict[str, set[str]] = {}
        for sample in family.samples:
            suffix = sample.name.removeprefix(family.name)
            labels.setdefault(suffix, set()).update(sample.labels)
        found[family.name] = (family.type, {k: tuple(sorted(v)) for k, v in labels.items()})
    return found


SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def family_of(series: str, exported: dict[str, Any]) -> str | None:
    """The family a series name belongs to (vllm:num_preemptions_total -> vllm:num_preemptions), if exported."""
    if series in exported:
        return series
    for suffix in SAMPLE_SUFFIXES:
        if series.endswith(suffix) and series.removesuffix(suffix) in exported:
            return series.removesuffix(suffix)
    return None


def family_name(series: str) -> str:
    """The family a series name is of, by name alone (for names neither side exports)."""
    for suffix in SAMPLE_SUFFIXES:
        if series.endswith(suffix):
            return series.removesuffix(suffix)
    return series


def metric_differences(
    real: dict[str, tuple[str, dict[str, tuple[str, ...]]]],
    demo: dict[str, tuple[str, dict[str, tuple[str, ...]]]],
    names: list[str],
) -> list[str]:
    """What is wrong with the demo's families of `names` (each exported by the real engine): missing, another
    type, other label names."""
    problems = []
    for name in names:
        want = real[name]
        got = demo.get(name)
        if got is None:
            problems.append(f"{name}: the engine exports it ({want[0]}), the demo does not")
        elif got[0] != want[0]:
            problems.append(f"{name}: type {got[0]} in the demo, {want[0]} in the engine")
        elif got[1] != want[1]:
            problems.append(f"{name}: label names {got[1]} in the demo, {want[1]} in the engine")
    return problems


# A series name after vLLM's prefix starts with a letter ("http://vllm:8000" is no series), ends before a colon
SERIES_NAME = re.compile(r"vllm:[a-z][a-z0-9_:]*[a-z0-9_]")
