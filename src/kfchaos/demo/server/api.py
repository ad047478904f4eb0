"""The demo LLM server: an OpenAI-compatible endpoint that behaves like vLLM under load (see engine.py).

`python -m kfchaos.demo.server.api --port 8000 --max-num-seqs 256 --gpu-memory-utilization 0.95` serves
/v1/completions and /v1/chat/completions (streaming SSE or not), /v1/models, /health and /metrics with
vLLM's metric names. When the engine's host memory passes the memory limit the process ends itself with
SIGKILL, as the kernel's OOM killer would; the supervisor (kfchaos.demo.stack.supervisor) restarts it and counts
the kill.

The answers have the shapes of vLLM 0.32's (the JSON keys of each chunk and body, the SSE framing, the error
bodies, the metric names, types and label names); tests/engine/test_demo_contract.py holds them to the real engine
and docs/demo.md ("Held to the real engine") lists the differences allowed.

On a real node (`--real-host-memory-scale S`, docs/cluster.md) none of that is modelled: the server keeps S times
its modelled host memory really resident (hostmemory.py), the kernel OOM-kills it at the pod's limit, the kubelet
restarts it, and kube-state-metrics and cAdvisor report it; the server exports only vLLM's series.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kfchaos import safefile
from kfchaos.demo.server import kubeseries, lora
from kfchaos.demo.server.disconnect import FINISH_REASONS, Disconnects
from kfchaos.demo.server.engine import Engine, EngineConfig, Sequence
from kfchaos.demo.server.hostmemory import HostMemory
from kfchaos.demo.server.lora import dumps, error_body, json_object, refused, validation_error
from kfchaos.demo.server.pod import DEMO_CONTAINER, DEMO_NAMESPACE, DEMO_POD, DEMO_POD_UID
from kfchaos.demo.server.prefixcache import paragraph_prefixes
from kfchaos.demo.server.tokenizer import Tokenizer

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text with BPE tokenizers
ENGINE_INDEX = "0"  # vLLM labels its series engine="<index>" of the engine core (one here)
SYSTEM_FINGERPRINT = "kfchaos-demo"  # vLLM's is "vllm-<version>-<hash>" (serving.py system_fingerprint)
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"  # starlette's StreamingResponse(media_type="text/event-stream")
# prometheus-fastapi-instrumentator does not count these (vllm/entrypoints/serve/instrumentator/metrics.py)
UNCOUNTED_HANDLERS = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info"})
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


@dataclass
class _Request:
    seq: Sequence
    # (text, last): `last` marks the token the sequence finished with, whose chunk carries the finish_reason;
    # None after it.
    queue: asyncio.Queue[tuple[str, bool] | None] = field(default_factory=asyncio.Queue)
    arrived: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    last_token_at: float | None = None
    emitted: int = 0


class Metrics:
    """vLLM's series (names, types and label names as vLLM exports them), plus the restart and OOM counts the
    supervisor passes in.

    Every engine series carries `model_name` and `engine` (vllm/v1/metrics/loggers.py PrometheusStatLogger:
    `labelnames = ["model_name", "engine"]`); `http_requests_total{handler, method, status}` is the API server's
    (prometheus-fastapi-instrumentator's default counter, vllm/entrypoints/serve/instrumentator/metrics.py: status
    grouped as "2xx", handler the route's template, "none" for a path that matches no route)."""

    def __init__(self, model: str, status: ContainerStatus | None) -> None:
        """`status` None: a real node, whose kube-state-metrics and cAdvisor report the container themselves."""
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.model = model
        self.key = (model, ENGINE_INDEX)  # the values of `labels`
        r = self.registry
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "E2E latency", labels, buckets=LATENCY_BUCKETS, registry=r
        )
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT", labels, buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "ITL", labels, buckets=ITL_BUCKETS, registry=r)
        self.running = Gauge("vllm:num_requests_running", "Requests running", labels, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting", labels, registry=r)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 = full", labels, registry=r)
        self.preemptions = Counter("vllm:num_preemptions", "Preemptions", labels, registry=r)
        # One series per finish reason, as vLLM; a client's abort counts under none (kfchaos.demo.server.disconnect).
        self.success = Counter("vllm:request_success", "Finished requests", [*labels, "finished_reason"], registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens", labels, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generated tokens", labels, registry=r)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries (tokens)", labels, registry=r)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits (tokens)", labels, registry=r)
        self.http_requests = Counter(
            "http_requests", "Total number of requests by method, status and handler.", ["handler", "method", "status"],
            registry=r,
        )  # fmt: skip
        self.host_memory = Gauge("process_host_memory_model_bytes", "Modelled host memory in use", registry=r)
        self.memory_limit = Gauge("process_memory_limit_bytes", "Container memory limit", registry=r)
        # Export every labelled series from the start, so "no data yet" never looks like a missing series.
        for series in (self.e2e, self.ttft, self.itl, self.running, self.waiting, self.kv_usage, self.preemptions,
                       self.prompt_tokens, self.generation_tokens, self.prefix_queries,
                       self.prefix_hits):  # fmt: skip
            series.labels(*self.key)
        for finish in FINISH_REASONS:
            self.success.labels(*self.key, finish)
        self.container: _ContainerSeries | None = None
        if status is not None:
            self._export_container_status(status)

    def _export_container_status(self, status: ContainerStatus) -> None:
        """The series a cluster keeps about this container, exported as a cluster presents them: kube-state-metrics' and
        cAdvisor's, from kfchaos.demo.server.kubeseries (their names, labels and upstream sources in one place, shared
        with the real engine's supervisor). cAdvisor's `container_oom_events_total` is per container cgroup: this
        container's series is new and starts at 0, and the killed container's count went with its cgroup
        (google/cadvisor#3015) -- a counter a cluster loses, so it is exported here the same way. The working set
        is the modelled host memory (the KV pool's mirror), read at each scrape.
        In a cluster kube-state-metrics is its own process and keeps reporting while the container is down;
        here the new container reports them once it is up (the counts are the same, shown a restart delay
        later: the verdict's grace covers a scrape interval, the demo's restart delay is 2 s).
        """
        self.container = _ContainerSeries(status)
        self.registry.register(self.container)


class _ContainerSeries:
    """A collector of this container's cluster series (kfchaos.demo.server.kubeseries), read at each scrape."""

    POD = kubeseries.Pod(DEMO_NAMESPACE, DEMO_POD, DEMO_POD_UID, DEMO_CONTAINER)

    def __init__(self, status: ContainerStatus) -> None:
        self.status = status
        self.working_set_bytes = 0

    def collect(self) -> Iterator[Metric]:
        status = self.status
        yield from kubeseries.families(
            self.POD,
            kubeseries.ContainerSeries(
                restarts=status.restarts,
                last_reason=status.last_reason,
                last_exit_code=status.last_exit_code,
                terminated_reason=None,  # a running container answers the scrape
                memory_limit_bytes=status.memory_limit_bytes,
                container_id=status.container_id,
                working_set_bytes=self.working_set_bytes,
            ),
        )


@dataclass(frozen=True)
class ContainerStatus:
    """What the kubelet knows about this container (set by the supervisor, as a kubelet's pod status)."""

    restarts: int = 0
    last_reason: str | None = None
    last_exit_code: int | None = None
    container_id: str = "c0"
    memory_limit_bytes: int = 0


class DemoServer:
    def __init__(
        self,
        config: EngineConfig,
        model: str,
        status: ContainerStatus | None = None,
        lora_config: lora.LoraConfig | None = None,
        *,
        leak_aborted: bool = False,
        max_model_len: int = 32768,
        host_memory: HostMemory | None = None,
        model_cluster_series: bool = True,
    ) -> None:
        """`model_cluster_series`: export the series a cluster keeps about this container (kube-state-metrics',
        cAdvisor's), as the demo's supervisor plays the kubelet. Off in a pod of a real cluster, whose own
        kube-state-metrics and cAdvisor report the container: a copy scraped from the pod would be a second,
        disagreeing restart count under the pod's own labels (seen on the real node: the verdict held the pod's
        count unknown)."""
        self.config = config
        self.model = model
        self.engine = Engine(config)
        self.host_memory = host_memory
        modelled_status = status or ContainerStatus(memory_limit_bytes=config.memory_limit_bytes)
        modelled = model_cluster_series and host_memory is None
        self.metrics = Metrics(model, modelled_status if modelled else None)
        self.lora = lora.LoraState(lora_config or lora.LoraConfig())
        enabled = self.lora.config.enabled
        self.lora_metrics = lora.LoraMetrics(self.metrics.registry, self.lora.config) if enabled else None
        self.engine.lora = self.lora if enabled else None
        self.disconnects = Disconnects(self.engine, leak=leak_aborted)
        self.tokenizer = Tokenizer(
            max_model_len
        )  # one worker in the front end, vLLM's 400 (kfchaos.demo.server.tokenizer)
        self.metrics.memory_limit.set(config.memory_limit_bytes)
        self.requests: dict[str, _Request] = {}
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._prefix_exported = (0, 0)  # the engine's prefix-cache counts already added to the counters

    # ------------------------------------------------------------------ engine loop

    async def run_engine(self) -> None:
        while True:
            if not self.engine.running and not self.engine.waiting:
                self._wake.clear()
                await self._wake.wait()
            result = self.engine.step()
            self._update_gauges()
            if self.host_memory is not None:
                self.host_memory.follow(self.engine.host_bytes)  # the kernel, not the model, decides on OOM
            elif result.oom:
                self._die_of_oom()
            await asyncio.sleep(result.duration_s)
            now = time.monotonic()
            labels = self.metrics.key
            if result.preempted:
                self.metrics.preemptions.labels(*labels).inc(len(result.preempted))
            finished = set(result.finished)
            for request_id in result.emitted:
                request = self.requests.get(request_id)
                if request is None:
                    continue
                if request.first_token_at is None:
                    request.first_token_at = now
                    self.metrics.ttft.labels(*labels).observe(now - request.arrived)
                elif request.last_token_at is not None:
                    self.metrics.itl.labels(*labels).observe(now - request.last_token_at)
                request.last_token_at = now
                request.emitted += 1
                request.queue.put_nowait((" tok", request_id in finished))
            for request_id in result.finished:
                request = self.requests.get(request_id)
                if request is not None:
                    request.queue.put_nowait(None)
                    self.metrics.e2e.labels(*labels).observe(now - request.arrived)
                    self.metrics.success.labels(*labels, "length").inc()  # max_tokens reached
                    self.metrics.generation_tokens.labels(*labels).inc(request.emitted)

    def _update_gauges(self) -> None:
        labels = self.metrics.key
        self.metrics.running.labels(*labels).set(len(self.engine.running))
        self.metrics.waiting.labels(*labels).set(len(self.engine.waiting))
        self.metrics.kv_usage.labels(*labels).set(self.engine.kv_cache_usage)
        self.metrics.host_memory.set(self.engine.host_bytes)
        queries, hits = self.engine.prefix_queries, self.engine.prefix_hits
        self.metrics.prefix_queries.labels(*labels).inc(queries - self._prefix_exported[0])
        self.metrics.prefix_hits.labels(*labels).inc(hits - self._prefix_exported[1])
        self._prefix_exported = (queries, hits)
        if self.metrics.container is not None:
            self.metrics.container.working_set_bytes = self.engine.host_bytes
        if self.lora_metrics is not None:
            self.lora_metrics.update((s.lora for s in self.engine.running), (s.lora for s in self.engine.waiting))

    def _die_of_oom(self) -> None:
        print(
            f"demo-llm: host memory {self.engine.host_bytes / 2**30:.2f} GiB over the limit "
            f"{self.config.memory_limit_bytes / 2**30:.2f} GiB with {len(self.engine.running)} running -> OOM kill",
            file=sys.stderr,
            flush=True,
        )
        marker = os.environ.get("KFCHAOS_DEMO_OOM_MARKER")
        if marker:  # tells the supervisor this death was an OOM kill, not a pod kill
            safefile.write_text(marker, str(self.engine.host_bytes), private=True)
        os.kill(os.getpid(), signal.SIGKILL)

    # ------------------------------------------------------------------ HTTP

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._instrument])
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics_handler)
        lora.attach(app, self.lora, self._wake.set)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, app: web.Application) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self.run_engine())

    async def _stop(self, app: web.Application) -> None:
        if self._loop_task:
            self._loop_task.cancel()

    @web.middleware
    async def _instrument(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """http_requests_total as vLLM's instrumentator counts it, and FastAPI's answer to a path or method that
        no route serves ({"detail": "Not Found"}: starlette's, not vLLM's ErrorResponse)."""
        resource = request.match_info.route.resource
        template = resource.canonical if resource is not None else "none"
        status = 500  # the instrumentator's until an answer starts
        try:
            missing = request.match_info.http_exception
            if missing is not None:
                response: web.StreamResponse = web.json_response(
                    {"detail": missing.reason}, status=missing.status, dumps=dumps
                )
            else:
                response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            # The client went away. vLLM's with_cancellation then returns None, which FastAPI answers 200
            # (vllm/entrypoints/serve/utils/api_utils.py), and a stream has sent its 200 already.
            status = 200
            raise
        finally:
            if template not in UNCOUNTED_HANDLERS:
                self.metrics.http_requests.labels(template, request.method, f"{str(status)[0]}xx").inc()

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)  # vLLM's /health: 200 with an empty body

    async def models(self, request: web.Request) -> web.Response:
        # vllm/entrypoints/openai/models/serving.py show_available_models: the base model's ModelCard (with
        # max_model_len; `root` is the model's path, here its name as for a model named by its hub id).
        created = int(time.time())
        card = {
            "id": self.model, "object": "model", "created": created, "owned_by": "vllm", "root": self.model,
            "parent": None, "max_model_len": self.tokenizer.max_model_len, "permission": [_permission(created)],
        }  # fmt: skip
        data = [card, *self.lora.models(self.model)]
        return web.json_response({"object": "list", "data": data}, dumps=dumps)

    async def metrics_handler(self, request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await json_object(request)
        prompt = body.get("prompt")
        if prompt is None or prompt == "":  # completion/protocol.py validate_prompt_and_prompt_embeds
            message = "Either prompt or prompt_embeds must be provided and non-empty."
            raise refused(400, error_body(f"{message} (parameter=prompt)", "BadRequestError", 400, "prompt"))
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        if not isinstance(prompt, str):
            raise refused(400, validation_error(("body", "prompt"), "string_type",
                                                "Input should be a valid string", prompt))  # fmt: skip
        return await self._generate(request, body, prompt, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await json_object(request)
        if "messages" not in body:  # a required field of ChatCompletionRequest
            raise refused(400, validation_error(("body", "messages"), "missing", "Field required", body))
        messages = body["messages"]
        if not isinstance(messages, list):
            message = "Input should be a valid list"
            raise refused(400, validation_error(("body", "messages"), "list_type", message, messages))
        if not messages:
            raise refused(400, error_body("messages must be a non-empty list", "BadRequestError", 400, "messages"))
        parts = [str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in messages]
        return await self._generate(request, body, "\n\n".join(parts), chat=True)

    async def _generate(
        self, request: web.Request, body: dict[str, Any], prompt: str, chat: bool
    ) -> web.StreamResponse:
        model = body.get("model") or self.model  # no model: the base one (serving.py _is_model_supported)
        if model != self.model:  # an adapter, or vLLM's 404 (kfchaos.demo.server.lora)
            missing = self.lora.check_model(str(model))
            if missing is not None:
                raise refused(404, missing)
        # Chat's max_completion_tokens wins over its deprecated max_tokens (chat_completion/protocol.py), and the
        # errors name the one given.
        param = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
        max_tokens = body.get(param)
        if max_tokens is None:
            max_tokens = 16  # vLLM: up to max_model_len - prompt; the demo never stops early (docs/demo.md)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            message = "Input should be a valid integer"
            raise refused(400, validation_error(("body", param), "int_type", message, max_tokens))
        too_many = self.tokenizer.output_refusal(max_tokens, param)  # before tokenization, as vLLM
        if too_many is not None:
            raise refused(400, too_many)
        prompt_tokens = await self.tokenizer.tokenize(prompt)
        refusal = self.tokenizer.refusal(prompt_tokens, max_tokens)
        if refusal is not None:
            raise refused(400, refusal)
        if max_tokens < 1:  # vllm/sampling_params.py _verify_args, once the prompt is in
            message = f"max_tokens must be at least 1, got {max_tokens}. (parameter=max_tokens, value={max_tokens})"
            raise refused(400, error_body(message, "BadRequestError", 400, "max_tokens"))
        # The shared prefix is everything before the last paragraph: a document and then a question.
        prefix, _, _ = prompt.rpartition("\n\n")
        prefix_id = hashlib.sha1(prefix.encode()).hexdigest() if prefix else None
        # vLLM's ids: "chatcmpl-" / "cmpl-" and 16 hex digits (vllm/utils/__init__.py random_uuid)
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().int & (2**64 - 1):016x}"
        seq = Sequence(request_id, prompt_tokens, max_tokens, prefix_id, len(prefix) // CHARS_PER_TOKEN)
        seq.prefixes = paragraph_prefixes(prompt, CHARS_PER_TOKEN) if self.config.enable_prefix_caching else ()
        seq.lora = None if model == self.model else str(model)
        state = _Request(seq)
        self.requests[request_id] = state
        self.metrics.prompt_tokens.labels(*self.metrics.key).inc(prompt_tokens)
        self.engine.add(seq)
        self._wake.set()
        try:
            if body.get("stream"):
                return await self._stream(request, state, body, chat)
            text = ""
            while (item := await state.queue.get()) is not None:
                text += item[0]
            answered = _answered_as(seq, self.model)
            full = _full_response(request_id, answered, text, prompt_tokens, state.emitted, chat)
            return web.json_response(full, dumps=dumps)
        finally:
            self.requests.pop(request_id, None)
            if not seq.finished:  # the client went away (or the handler failed): abort, free its blocks
                self.disconnects.abort(request_id)
                self._update_gauges()

    async def _stream(
        self, request: web.Request, state: _Request, body: dict[str, Any], chat: bool
    ) -> web.StreamResponse:
        """The SSE stream of vLLM's completion_stream_generator / chat_completion_stream_generator
        (vllm/entrypoints/openai/{completion,chat_completion}/serving.py): one chunk per token, the last with its
        finish_reason; the system fingerprint on that last chunk, or on the usage chunk (`choices: []`) when
        stream_options.include_usage asks for one; then `data: [DONE]`. Each event is `data: <json>` and a
        blank line."""
        response = web.StreamResponse(headers={"Content-Type": SSE_CONTENT_TYPE, "Cache-Control": "no-cache"})
        await response.prepare(request)
        request_id = state.seq.request_id
        answered = _answered_as(state.seq, self.model)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        created = int(time.time())
        first = True
        while (item := await state.queue.get()) is not None:
            token, last = item
            chunk = _chunk(request_id, created, answered, token, chat, first, last)
            if last and not include_usage:
                chunk["system_fingerprint"] = SYSTEM_FINGERPRINT
            first = False
            await response.write(_event(chunk))
        if include_usage:
            final = {
                "id": request_id,
                "object": _object(chat, True),
                "created": created,
                "model": answered,
                "choices": [],
                "usage": _usage(state.seq.prompt_tokens, state.emitted),
                "system_fingerprint": SYSTEM_FINGERPRINT,
            }
            await response.write(_event(final))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + dumps(chunk).encode() + b"\n\n"


def _permission(created: int) -> dict[str, Any]:
    """vLLM's ModelPermission, all defaults (vllm/entrypoints/serve/engine/protocol.py)."""
    return {
        "id": f"modelperm-{uuid.uuid4().int & (2**64 - 1):016x}", "object": "model_permission", "created": created,
        "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True, "allow_search_indices": False,
        "allow_view": True, "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False,
    }  # fmt: skip


def _answered_as(seq: Sequence, model: str) -> str:
    """The model an answer names, as vLLM's: a LoRA adapter's name when the request asked for one, else the served
    model's (vllm/entrypoints/openai/models/serving.py OpenAIServingModels.model_name)."""
    return seq.lora or model


def _object(chat: bool, stream: bool) -> str:
    if chat:
        return "chat.completion.chunk" if stream else "chat.completion"
    return "text_completion"


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _chunk(
    request_id: str, created: int, model: str, token: str, chat: bool, first: bool, last: bool
) -> dict[str, Any]:
    """One token's chunk with vLLM's keys (vllm/entrypoints/openai/*/protocol.py *StreamResponse, dumped with
    exclude_unset): stop_reason is set on the last chat chunk only, on every completion chunk."""
    finish = "length" if last else None  # the demo never stops early: max_tokens reached
    choice: dict[str, Any]
    if chat:
        # vLLM sends the role in a chunk of its own first ({"role": "assistant", "content": ""}); the demo puts it
        # on the first token's chunk (an allowed difference, docs/demo.md "Held to the real engine").
        delta = {"role": "assistant", "content": token} if first else {"content": token}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if last:
            choice["stop_reason"] = None
        choice["token_ids"] = None
    else:
        choice = {"index": 0, "text": token, "logprobs": None, "finish_reason": finish, "stop_reason": None,
                  "prompt_token_ids": None, "token_ids": None}  # fmt: skip
    chunk: dict[str, Any] = {
        "id": request_id,
        "object": _object(chat, True),
        "created": created,
        "model": model,
        "choices": [choice],
    }
    if chat and first:  # the role chunk's (prompt_token_ids "at the first chunk ever", return_token_ids unset)
        chunk["prompt_token_ids"] = None
        chunk["prompt_text"] = None
    return chunk


def _full_response(
    request_id: str, model: str, text: str, prompt_tokens: int, emitted: int, chat: bool
) -> dict[str, Any]:
    """A non-streamed answer with vLLM's keys (ChatCompletionResponse / CompletionResponse, every field dumped)."""
    choice: dict[str, Any]
    if chat:
        message = {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                   "function_call": None, "reasoning": None}  # fmt: skip
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "length", "stop_reason": None,
                  "token_ids": None, "routed_experts": None}  # fmt: skip
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None,
                  "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None,
                  "routed_experts": None}  # fmt: skip
    usage = {**_usage(prompt_tokens, emitted), "prompt_tokens_details": None, "completion_tokens_details": None}
    answer: dict[str, Any] = {
        "id": request_id,
        "object": _object(chat, False),
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": usage,
    }
    if chat:
        answer.update(prompt_logprobs=None, prompt_token_ids=None, prompt_text=None)
    answer.update(kv_transfer_params=None, ec_transfer_params=None, metrics=None)
    return answer


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """vLLM's names for the settings that matter here."""
    defaults = EngineConfig()
    parser.add_argument("--max-num-seqs", type=int, default=defaults.max_num_seqs)
    parser.add_argument("--gpu-memory-utilization", type=float, default=defaults.gpu_memory_utilization)
    parser.add_argument("--block-size", type=int, default=defaults.block_size)
    parser.add_argument("--enable-prefix-caching", action="store_true")
    parser.add_argument("--max-model-len", type=int, default=32768, help="prompt + max_tokens above it: 400")
    parser.add_argument("--memory-limit-gib", type=float, default=defaults.memory_limit_bytes / 2**30)
    parser.add_argument(
        "--decode-step-ms", type=float, default=defaults.decode_step_s * 1000, help="fixed cost of one decode step"
    )


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(
        max_num_seqs=args.max_num_seqs,
        gpu_memory_utilization=args.gpu_memory_utilization,
        block_size=args.block_size,
        enable_prefix_caching=args.enable_prefix_caching,
        memory_limit_bytes=int(args.memory_limit_gib * 2**30),
        decode_step_s=args.decode_step_ms / 1000,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kfchaos-demo-llm", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="demo/llama-3-8b-sim")
    parser.add_argument(
        "--restarts",
        type=int,
        default=None,
        help="set by the demo's supervisor (it then exports the cluster's series of this container); left out in a "
        "pod of a real cluster, whose kube-state-metrics and cAdvisor report it",
    )
    parser.add_argument("--last-terminated-reason", default=None, help="set by the supervisor")
    parser.add_argument("--last-exit-code", type=int, default=None, help="set by the supervisor")
    parser.add_argument("--container-id", default="c0", help="set by the supervisor")
    parser.add_argument("--leak-aborted-blocks", action="store_true", help=argparse.SUPPRESS)  # tests only
    parser.add_argument(
        "--real-host-memory-scale",
        type=float,
        default=0.0,
        help="on a real node: keep this fraction of the modelled host memory resident and let the kernel OOM-kill",
    )
    add_engine_arguments(parser)
    lora.add_arguments(parser)
    args = parser.parse_args(argv)
    config = engine_config(args)
    status = ContainerStatus(args.restarts or 0, args.last_terminated_reason, args.last_exit_code, args.container_id,
                             config.memory_limit_bytes)  # fmt: skip
    server = DemoServer(
        config,
        args.model,
        status,
        lora.config_from(args),
        leak_aborted=args.leak_aborted_blocks,
        max_model_len=args.max_model_len,
        host_memory=HostMemory(args.real_host_memory_scale) if args.real_host_memory_scale else None,
        model_cluster_series=args.restarts is not None,
    )
    # handler_cancellation: a client that disconnects cancels its handler at once, as vLLM's with_cancellation
    # does (kfchaos.demo.server.disconnect), not only at the handler's next write.
    web.run_app(
        server.app(), host=args.host, port=args.port, print=None, access_log=None, handle_signals=True,
        handler_cancellation=True,
    )  # fmt: skip


if __name__ == "__main__":
    main()
