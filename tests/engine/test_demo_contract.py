"""The demo server (kfchaos.demo.server) held to the real engine (vLLM 0.32, `vllm_engine`): the same requests go
to both and the answers must have the same SHAPES (tests/engine/shapes.py), not the same values.

Compared: the SSE streams of /v1/completions and /v1/chat/completions with and without
stream_options.include_usage, and one naming a LoRA adapter (the keys of every chunk at every level, the object
names, where role, finish_reason, stop_reason, system_fingerprint and usage appear, the framing, `data: [DONE]`);
the non-streamed answers; the error answers kfchaos meets (status, JSON shape, type, param, code, and the message
text where it is deterministic -- kfchaos.faults.lorachurn matches "already been loaded"); /v1/models and /health;
and /metrics: every vLLM series kfchaos reads (found by scanning src/kfchaos outside the demo, so a new read is
held at once) plus http_requests_total has the engine's name, type and label names in the demo, and the demo
exports no vllm: family the engine lacks.

The allowed differences are listed in ALLOWED with their reasons (and in docs/demo.md, "Held to the real engine");
test_allowed_differences_are_still_differences fails when one stops being a difference, so the list stays true.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kfchaos.demo.stack.demostack import wait_http
from kfchaos.demo.stack.ports import free_port
from kfchaos.demo.stack.vllmengine import MODEL_NAME, EngineInstall, EngineServer
from tests.engine import shapes
from tests.engine.conftest import SHARED_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
DEMO_MODEL = "demo/llama-3-8b-sim"  # the demo's own name: the shapes must not depend on the names
ADAPTER = "contract-sql"  # a name of this test's own in the shared engine, unloaded at the end
MAX_MODEL_LEN = SHARED_SETTINGS.max_model_len
OVER_LONG = "the " * 3000  # 3000 tokens in either tokenizer: over max_model_len on its own

ALLOWED = {
    "chat role chunk": "vLLM opens a chat stream with a chunk of the role alone (delta {role, content: ''}); the "
    "demo puts the role on its first token's chunk. kfchaos's SSE parser counts neither as a token "
    "(kfchaos.traffic.sse), and tests/demo/test_server.py counts one chunk per token.",
    "unknown model message": "vLLM appends 'Valid aliases: <served names>.' to 'The model `x` does not exist.'; "
    "kfchaos does not read the message, and tests/demo/test_lora.py pins the demo's.",
    "adapter model card": "vLLM's /v1/models card of a LoRA adapter also has created, owned_by, max_model_len "
    "(null) and permission; the demo's has id, object, root and parent, which kfchaos reads, pinned by "
    "tests/demo/test_lora.py.",
    "prompt + max_tokens over max_model_len": "vLLM 0.32 serves a prompt that fits with max_tokens cut to "
    "max_model_len - prompt (api_utils.get_max_tokens); the demo refuses it with 400, as vLLM did before. No "
    "bundled scenario sends one; tests/demo/test_chain_mechanisms.py pins the refusal.",
}
# Names kfchaos reads that vLLM 0.32 does not export, and why that is right.
NOT_IN_THE_ENGINE = {
    "vllm:gpu_cache_usage_perc": "the KV-cache usage's name before vLLM 0.9.2, read only when "
    "vllm:kv_cache_usage_perc is absent (kfchaos.evidence.prom)",
}


# ---------------------------------------------------------------------------------------------- HTTP exchanges


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(base: str, path: str, body: Any = None, *, raw: bytes | None = None, timeout: float = 120.0) -> Answer:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(
        base + path, data=data, method="POST" if data is not None else "GET",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, response.headers.get("Content-Type", ""), response.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.headers.get("Content-Type", ""), error.read())


def generation(model: str, chat: bool, **extra: Any) -> dict[str, Any]:
    # ignore_eos: the random-weight model could end early at its end-of-sequence token; the demo never does.
    body: dict[str, Any] = {"model": model, "max_tokens": 4, "ignore_eos": True, **extra}
    if chat:
        body["messages"] = [{"role": "user", "content": "hello there, how are you"}]
    else:
        body["prompt"] = "hello there, how are you"
    return body


STREAMS: dict[str, tuple[str, bool, dict[str, Any]]] = {
    "completions": ("/v1/completions", False, {"stream": True}),
    "completions+usage": ("/v1/completions", False, {"stream": True, "stream_options": {"include_usage": True}}),
    "chat": ("/v1/chat/completions", True, {"stream": True}),
    "chat+usage": ("/v1/chat/completions", True, {"stream": True, "stream_options": {"include_usage": True}}),
}
PLAIN = {"completions": ("/v1/completions", False), "chat": ("/v1/chat/completions", True)}


def error_cases(model: str) -> dict[str, tuple[str, Any, bytes | None]]:
    """name -> (path, JSON body, raw body): requests both must refuse alike."""
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    plain = {"model": model, "prompt": "hi"}
    return {
        "prompt over max_model_len": ("/v1/completions", {"model": model, "prompt": OVER_LONG, "max_tokens": 4}, None),
        "chat prompt over max_model_len": (
            "/v1/chat/completions", {**chat, "messages": [{"role": "user", "content": OVER_LONG}], "max_tokens": 4},
            None,
        ),
        "max_tokens over max_model_len": ("/v1/completions", {**plain, "max_tokens": 5000}, None),
        "max_completion_tokens over": ("/v1/chat/completions", {**chat, "max_completion_tokens": 5000}, None),
        "max_tokens 0": ("/v1/completions", {**plain, "max_tokens": 0}, None),
        "unknown model": ("/v1/completions", {"model": "nope", "prompt": "hi", "max_tokens": 2}, None),
        "body not JSON": ("/v1/completions", None, b"{not json"),
        "messages missing": ("/v1/chat/completions", {"model": model, "max_tokens": 2}, None),
        "prompt missing": ("/v1/completions", {"model": model, "max_tokens": 2}, None),
        "lora load empty": ("/v1/load_lora_adapter", {"lora_name": "", "lora_path": ""}, None),
        "lora load without path": ("/v1/load_lora_adapter", {"lora_name": "x"}, None),
        "lora unload unknown": ("/v1/unload_lora_adapter", {"lora_name": "never-loaded"}, None),
        "no such route": ("/v1/no-such-route", {}, None),
    }  # fmt: skip


# Where the message text is compared exactly (the rest: status, shape, type, param, code).
EXACT_MESSAGE = {
    "prompt over max_model_len", "chat prompt over max_model_len", "max_tokens over max_model_len",
    "max_completion_tokens over", "max_tokens 0", "body not JSON", "messages missing", "prompt missing",
    "lora load empty", "lora load without path", "lora unload unknown", "lora load twice",
}  # fmt: skip


@dataclass
class Side:
    """One server's answers to the contract's requests."""

    base: str
    model: str
    streams: dict[str, Answer] = field(default_factory=dict)
    plain: dict[str, Answer] = field(default_factory=dict)
    errors: dict[str, Answer] = field(default_factory=dict)
    adapter_stream: Answer | None = None
    models: Any = None
    health: Answer | None = None
    over_total: Answer | None = None
    metrics: str = ""

    def run(self, adapter_path: str) -> None:
        for name, (path, chat, extra) in STREAMS.items():
            self.streams[name] = call(self.base, path, generation(self.model, chat, **extra))
        for name, (path, chat) in PLAIN.items():
            self.plain[name] = call(self.base, path, generation(self.model, chat))
        for name, (path, body, raw) in error_cases(self.model).items():
            self.errors[name] = call(self.base, path, body, raw=raw)
        # prompt + max_tokens over max_model_len, each under it (ALLOWED)
        over = {"model": self.model, "prompt": "the " * (MAX_MODEL_LEN - 150), "max_tokens": 300}
        self.over_total = call(self.base, "/v1/completions", {**over, "ignore_eos": True})
        load = {"lora_name": ADAPTER, "lora_path": adapter_path}
        loaded = call(self.base, "/v1/load_lora_adapter", load)
        assert loaded.status == 200, (self.base, loaded)
        try:
            self.errors["lora load twice"] = call(self.base, "/v1/load_lora_adapter", load)
            self.models = call(self.base, "/v1/models").json()
            self.adapter_stream = call(self.base, "/v1/completions", generation(ADAPTER, False, stream=True))
        finally:
            unloaded = call(self.base, "/v1/unload_lora_adapter", {"lora_name": ADAPTER})
            assert unloaded.status == 200, (self.base, unloaded)
        self.health = call(self.base, "/health")
        self.metrics = call(self.base, "/metrics").body.decode()


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo server as the contract's other side: the shared engine's limits (max_model_len, LoRA with
    runtime updates) and fast decode steps."""
    port = free_port()
    log = tmp_path_factory.mktemp("demo-contract") / "demo.log"
    env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    args = ["--port", str(port), "--model", DEMO_MODEL, "--max-model-len", str(MAX_MODEL_LEN),
            "--enable-prefix-caching", "--enable-lora", "--decode-step-ms", "5"]  # fmt: skip
    with log.open("wb") as out:
        command = [sys.executable, "-m", "kfchaos.demo.server.api", *args]
        process = subprocess.Popen(command, stdout=out, stderr=out, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/health", process=process)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def sides(vllm_engine: EngineServer, demo_server: str) -> tuple[Side, Side]:
    """(real, demo), each having answered the same requests."""
    adapter_path = str(EngineInstall(vllm_engine.install.home).lora_dir("tiny-sql"))
    real, demo = Side(vllm_engine.url, MODEL_NAME), Side(demo_server, DEMO_MODEL)
    real.run(adapter_path)
    demo.run(adapter_path)
    return real, demo


def named(text: str, side: Side) -> str:
    """Served names replaced, so that messages compare across the two servers."""
    return text.replace(side.model, "<model>").replace(ADAPTER, "<adapter>")


# ---------------------------------------------------------------------------------------------- the contract


@pytest.mark.parametrize("case", sorted(STREAMS))
def test_streams_have_the_engines_chunk_shapes(sides: tuple[Side, Side], case: str) -> None:
    real, demo = sides
    for side in sides:
        answer = side.streams[case]
        assert answer.status == 200, (side.base, answer)
        assert answer.content_type == "text/event-stream; charset=utf-8", (side.base, answer.content_type)
    want, got = shapes.stream_shape(real.streams[case].body), shapes.stream_shape(demo.streams[case].body)
    assert got == want, f"{case}: the demo's\n{json.dumps(got, indent=1)}\nthe engine's\n{json.dumps(want, indent=1)}"
    # What the shape alone does not say: the last token's chunk carries finish_reason "length" (max_tokens), and the
    # usage chunk (when asked for) follows it with choices [] and counts that add up.
    for side in sides:
        chunks = shapes.sse_chunks(side.streams[case].body)
        with_choices = [c for c in chunks if c["choices"]]
        assert with_choices[-1]["choices"][0]["finish_reason"] == "length", side.base
        assert all(c["choices"][0]["finish_reason"] is None for c in with_choices[:-1]), side.base
        if "usage" in case:
            usage = chunks[-1]["usage"]
            assert chunks[-1]["choices"] == [] and usage["completion_tokens"] == 4, (side.base, chunks[-1])
            assert usage["total_tokens"] == usage["prompt_tokens"] + 4, (side.base, usage)
        else:
            assert all("usage" not in c for c in chunks), side.base


def test_a_stream_naming_an_adapter_answers_as_the_adapter(sides: tuple[Side, Side]) -> None:
    real, demo = sides
    assert real.adapter_stream is not None and demo.adapter_stream is not None
    want, got = shapes.stream_shape(real.adapter_stream.body), shapes.stream_shape(demo.adapter_stream.body)
    assert got == want
    for side in sides:
        assert side.adapter_stream is not None
        assert {c["model"] for c in shapes.sse_chunks(side.adapter_stream.body)} == {ADAPTER}, side.base


@pytest.mark.parametrize("case", sorted(PLAIN))
def test_non_streamed_answers_have_the_engines_keys(sides: tuple[Side, Side], case: str) -> None:
    real, demo = sides
    for side in sides:
        assert side.plain[case].status == 200, (side.base, side.plain[case])
        assert side.plain[case].content_type.startswith("application/json"), side.base
    want, got = shapes.shape(real.plain[case].json()), shapes.shape(demo.plain[case].json())
    assert got == want, f"{case}: the demo's\n{json.dumps(got, indent=1)}\nthe engine's\n{json.dumps(want, indent=1)}"


@pytest.mark.parametrize("case", [*sorted(error_cases("m")), "lora load twice"])
def test_errors_have_the_engines_status_and_body(sides: tuple[Side, Side], case: str) -> None:
    real, demo = sides
    want, got = real.errors[case], demo.errors[case]
    assert got.status == want.status, (case, got, want)
    assert want.status >= 400, (case, want)
    assert got.content_type.startswith("application/json"), (case, got.content_type)
    assert shapes.shape(got.json()) == shapes.shape(want.json()), (case, got.json(), want.json())
    if case in EXACT_MESSAGE:
        assert named(got.json()["error"]["message"], demo) == named(want.json()["error"]["message"], real), case
    if case == "no such route":  # FastAPI's own answer, not vLLM's ErrorResponse
        assert got.json() == want.json() == {"detail": "Not Found"}
    if case == "lora load twice":
        assert "already been loaded" in got.json()["error"]["message"]  # what kfchaos.faults.lorachurn matches


def test_models_and_health_answer_as_the_engine(sides: tuple[Side, Side]) -> None:
    real, demo = sides
    assert shapes.shape(demo.models["data"][0]) == shapes.shape(real.models["data"][0])
    assert set(demo.models) == set(real.models) and demo.models["object"] == real.models["object"] == "list"
    for side in sides:
        # The base model first, then the adapters (another test of the session may have left one of its own).
        ids = [m["id"] for m in side.models["data"]]
        assert ids[0] == side.model and ADAPTER in ids, (side.base, ids)
        assert side.models["data"][0]["max_model_len"] == MAX_MODEL_LEN, side.base
        assert side.health is not None
    assert real.health is not None and demo.health is not None
    assert (demo.health.status, demo.health.body) == (real.health.status, real.health.body) == (200, b"")


def read_series() -> list[str]:
    """Every vllm: series name kfchaos reads or names: src/kfchaos outside the demo, Python and the bundled
    data, scanned as the brief's grep would."""
    found: set[str] = set()
    for path in (ROOT / "src" / "kfchaos").rglob("*"):
        if path.suffix not in (".py", ".yaml") or "demo" in path.relative_to(ROOT / "src" / "kfchaos").parts:
            continue
        found.update(shapes.SERIES_NAME.findall(path.read_text(errors="replace")))
    return sorted(found)


def test_the_series_kfchaos_reads_have_the_engines_names_types_and_labels(sides: tuple[Side, Side]) -> None:
    real, demo = sides
    real_families, demo_families = shapes.families(real.metrics), shapes.families(demo.metrics)
    read = read_series()
    # The scan must find what kfchaos.metrics.catalog reads, or this test would compare nothing.
    for core in ("vllm:e2e_request_latency_seconds_count", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"):
        assert core in read, core
    wanted: set[str] = {"http_requests"}  # http_requests_total: the catalog's 5xx errors
    for series in read:
        if series in NOT_IN_THE_ENGINE:
            assert shapes.family_name(series) not in real_families, f"the engine exports {series} now: compare it"
            continue
        family = shapes.family_of(series, real_families)
        assert family is not None, f"kfchaos reads {series}, which the real engine does not export"
        wanted.add(family)
    assert not (problems := shapes.metric_differences(real_families, demo_families, sorted(wanted))), problems
    # Every vLLM family the demo exports is the engine's: no demo-only series under vLLM's prefix.
    mine = sorted(n for n in demo_families if n.startswith("vllm:"))
    assert not (extra := [n for n in mine if n not in real_families]), f"vllm: families only the demo has: {extra}"
    assert not (problems := shapes.metric_differences(real_families, demo_families, mine)), problems


def test_http_requests_total_groups_status_and_names_the_route(sides: tuple[Side, Side]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    real, _ = sides
    for side in sides:
        samples = [
            s.labels
            for f in text_string_to_metric_families(side.metrics)
            for s in f.samples
            if s.name == "http_requests_total"
        ]
        statuses = {s["status"] for s in samples}
        assert statuses <= {"1xx", "2xx", "3xx", "4xx", "5xx"}, (side.base, statuses)
        # None of the contract's requests is a server error (the shared engine's count may hold other tests')
        assert side is real or "5xx" not in statuses, statuses
        routes = {(s["handler"], s["method"], s["status"]) for s in samples}
        for expected in [("/v1/completions", "POST", "2xx"), ("/v1/completions", "POST", "4xx"),
                         ("/v1/chat/completions", "POST", "2xx"), ("/v1/models", "GET", "2xx")]:  # fmt: skip
            assert expected in routes, (side.base, expected, routes)
        assert not {s["handler"] for s in samples} & {"/metrics", "/health"}, side.base


def test_allowed_differences_are_still_differences(sides: tuple[Side, Side]) -> None:
    """Each entry of ALLOWED as it is today: when the demo is brought closer, this fails, and ALLOWED and
    docs/demo.md lose the entry."""
    real, demo = sides
    assert set(ALLOWED) == {"chat role chunk", "unknown model message", "adapter model card",
                            "prompt + max_tokens over max_model_len"}  # fmt: skip
    # chat role chunk
    real_first = shapes.sse_chunks(real.streams["chat"].body)[0]["choices"][0]["delta"]
    demo_first = shapes.sse_chunks(demo.streams["chat"].body)[0]["choices"][0]["delta"]
    assert real_first == {"role": "assistant", "content": ""} and demo_first["content"] != "", demo_first
    # unknown model message: the demo's is the start of the engine's
    want, got = real.errors["unknown model"].json(), demo.errors["unknown model"].json()
    assert want["error"]["message"].startswith(got["error"]["message"]) and want != got, (got, want)
    # adapter model card: the demo's keys are some of the engine's, with the same values
    real_card, demo_card = (next(m for m in side.models["data"] if m["id"] == ADAPTER) for side in sides)
    assert set(demo_card) < set(real_card), (demo_card, real_card)
    assert {k: named(str(v), demo) for k, v in demo_card.items()} == {
        k: named(str(real_card[k]), real) for k in demo_card
    }
    # prompt + max_tokens over max_model_len
    assert real.over_total is not None and demo.over_total is not None
    assert real.over_total.status == 200, real.over_total
    assert real.over_total.json()["usage"]["total_tokens"] == MAX_MODEL_LEN
    assert demo.over_total.status == 400 and "you requested" in demo.over_total.json()["error"]["message"]


# ---------------------------------------------------------------------------------------------- the test can fail


def test_the_comparison_sees_a_renamed_key_label_or_event(sides: tuple[Side, Side]) -> None:
    """The contract's own comparisons, fed the demo's real answers with one thing changed, must see it."""
    real, demo = sides
    body = demo.streams["chat+usage"].body
    want = shapes.stream_shape(real.streams["chat+usage"].body)
    assert shapes.stream_shape(body) == want
    renamed = body.replace(b'"finish_reason"', b'"finishReason"')
    assert shapes.stream_shape(renamed) != want
    no_stop = body.replace(b',"stop_reason":null', b"")
    assert shapes.stream_shape(no_stop) != want
    no_usage_chunk = b"\n\n".join(e for e in body.split(b"\n\n") if b'"usage"' not in e)
    assert shapes.stream_shape(no_usage_chunk) != want
    with pytest.raises(AssertionError):
        shapes.stream_shape(body.replace(b"data: [DONE]\n\n", b""))
    with pytest.raises(AssertionError):
        shapes.stream_shape(body.replace(b"\n\ndata: ", b"\ndata: ", 1))
    error = demo.errors["lora load twice"].json()
    assert shapes.shape({"error": {**error["error"], "type": "BadRequestError"}}) != shapes.shape(error)
    real_families = shapes.families(real.metrics)
    retyped = (b"# TYPE vllm:num_preemptions_total counter", b"# TYPE vllm:num_preemptions_total gauge")
    for before, after in ((b'engine="0"', b'engine_index="0"'), (b"model_name=", b"model="), retyped):
        assert before in demo.metrics.encode(), before
        changed = shapes.families(demo.metrics.encode().replace(before, after).decode())
        problems = shapes.metric_differences(real_families, changed, ["vllm:num_preemptions"])
        assert problems, before
