"""The demo LLM server: an OpenAI-compatible endpoint that behaves like vLLM under load (see engine.py).

`python -m kfchaos.demo.server --port 8000 --max-num-seqs 256 --gpu-memory-utilization 0.95` serves
/v1/completions and /v1/chat/completions (streaming SSE or not), /v1/models, /health and /metrics with
vLLM's metric names. When the engine's host memory passes the memory limit the process ends itself with
SIGKILL, as the kernel's OOM killer would; the supervisor (supervisor.py) restarts it and counts the kill.

On a real node (`--real-host-memory-scale S`, docs/cluster.md) none of that is modelled: the server keeps S times
its modelled host memory really resident (hostmemory.py), the kernel OOM-kills it at the pod's limit, the kubelet
restarts it, and kube-state-metrics and cAdvisor report it; the server exports only vLLM's series.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kfchaos import safefile
from kfchaos.demo import lora
from kfchaos.demo.disconnect import FINISH_REASONS, Disconnects
from kfchaos.demo.engine import Engine, EngineConfig, Sequence
from kfchaos.demo.hostmemory import HostMemory
from kfchaos.demo.prefixcache import paragraph_prefixes
from kfchaos.demo.stack import DEMO_NAMESPACE, DEMO_POD
from kfchaos.demo.tokenizer import Tokenizer

# Who this container is, as kube-state-metrics and cAdvisor would label it (the stack scopes the standard
# queries to DEMO_NAMESPACE and DEMO_POD).
DEMO_POD_UID = "00000000-0000-4000-8000-000000000001"
DEMO_CONTAINER = "vllm"
CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text with BPE tokenizers
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


@dataclass
class _Request:
    seq: Sequence
    queue: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    arrived: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    last_token_at: float | None = None
    emitted: int = 0


class Metrics:
    """vLLM's series (names as vLLM exports them), plus the restart and OOM counts the supervisor passes in."""

    def __init__(self, model: str, status: ContainerStatus | None) -> None:
        """`status` None: a real node, whose kube-state-metrics and cAdvisor report the container themselves."""
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        self.model = model
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
        # One series per finish reason, as vLLM (kfchaos.demo.disconnect): a client abort counts under "abort".
        self.success = Counter("vllm:request_success", "Finished requests", [*labels, "finished_reason"], registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens", labels, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generated tokens", labels, registry=r)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries (tokens)", labels, registry=r)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits (tokens)", labels, registry=r)
        self.host_memory = Gauge("process_host_memory_model_bytes", "Modelled host memory in use", registry=r)
        self.memory_limit = Gauge("process_memory_limit_bytes", "Container memory limit", registry=r)
        # Export every labelled series from the start, so "no data yet" never looks like a missing series.
        for series in (self.e2e, self.ttft, self.itl, self.running, self.waiting, self.kv_usage, self.preemptions,
                       self.prompt_tokens, self.generation_tokens, self.prefix_queries,
                       self.prefix_hits):  # fmt: skip
            series.labels(model)
        for finish in FINISH_REASONS:
            self.success.labels(model, finish)
        self.cgroup_id: tuple[str, ...] | None = None
        if status is not None:
            self._export_container_status(status)

    def _export_container_status(self, status: ContainerStatus) -> None:
        """The series a cluster keeps about this container, exported as a cluster presents them.

        kube-state-metrics (kubernetes/kube-state-metrics internal/store/pod.go) reports from the pod object:
        `kube_pod_container_status_restarts_total` = the container status's restartCount, and, once the
        container has terminated before, `kube_pod_container_status_last_terminated_reason{reason}` = 1 and
        `kube_pod_container_status_last_terminated_exitcode` from lastState.terminated; labels namespace, pod,
        uid, container. The reason is the runtime's: OOMKilled, Error (non-zero exit) or Completed (containerd
        internal/cri/server: oomExitReason, errorExitReason, completeExitReason).
        cAdvisor's `container_oom_events_total` is per container cgroup (labels id, name): this container's
        series is new and starts at 0, and the killed container's count went with its cgroup
        (google/cadvisor#3015) -- a counter a cluster loses, so it is exported here the same way.
        In a cluster kube-state-metrics is its own process and keeps reporting while the container is down;
        here the new container reports them once it is up (the counts are the same, shown a restart delay
        later: the verdict's grace covers a scrape interval, the demo's restart delay is 2 s).
        """
        r = self.registry
        pod = ["namespace", "pod", "uid", "container"]
        where = (DEMO_NAMESPACE, DEMO_POD, DEMO_POD_UID, DEMO_CONTAINER)
        Gauge("kube_pod_container_status_restarts_total", "Restarts (kube-state-metrics)", pod, registry=r).labels(
            *where
        ).set(status.restarts)
        if status.last_reason is not None:
            Gauge(
                "kube_pod_container_status_last_terminated_reason",
                "Last terminated reason (kube-state-metrics)",
                [*pod, "reason"],
                registry=r,
            ).labels(*where, status.last_reason).set(1)
            Gauge(
                "kube_pod_container_status_last_terminated_exitcode",
                "Last terminated exit code (kube-state-metrics)",
                pod,
                registry=r,
            ).labels(*where).set(status.last_exit_code or 0)
        cgroup = ["namespace", "pod", "container", "id"]
        cgroup_id = (DEMO_NAMESPACE, DEMO_POD, DEMO_CONTAINER, f"/kubepods/demo/{status.container_id}")
        cadvisor = Gauge("container_oom_events_total", "OOM events of this cgroup (cAdvisor)", cgroup, registry=r)
        cadvisor.labels(*cgroup_id).set(0)
        # cAdvisor's memory series of the same cgroup (google/cadvisor metrics/prometheus.go): the working set is
        # the modelled host memory (the KV pool's mirror), the limit the container's; and kube-state-metrics'
        # kube_pod_container_resource_limits{resource="memory",unit="byte"} from the pod spec (internal/store/pod.go).
        self.working_set = Gauge("container_memory_working_set_bytes", "Working set (cAdvisor)", cgroup, registry=r)
        self.working_set.labels(*cgroup_id)
        self.cgroup_id = cgroup_id
        Gauge("container_spec_memory_limit_bytes", "Memory limit (cAdvisor)", cgroup, registry=r).labels(
            *cgroup_id
        ).set(status.memory_limit_bytes)
        Gauge("kube_pod_container_resource_limits", "Limits (kube-state-metrics)", [*pod, "resource", "unit"],
              registry=r).labels(*where, "memory", "byte").set(status.memory_limit_bytes)  # fmt: skip


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
        self.disconnects = Disconnects(
            self.engine, lambda reason: self.metrics.success.labels(model, reason).inc(), leak=leak_aborted
        )
        self.tokenizer = Tokenizer(max_model_len)  # one worker in the front end, vLLM's 400 (kfchaos.demo.tokenizer)
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
            labels = self.metrics.model
            if result.preempted:
                self.metrics.preemptions.labels(labels).inc(len(result.preempted))
            for request_id in result.emitted:
                request = self.requests.get(request_id)
                if request is None:
                    continue
                if request.first_token_at is None:
                    request.first_token_at = now
                    self.metrics.ttft.labels(labels).observe(now - request.arrived)
                elif request.last_token_at is not None:
                    self.metrics.itl.labels(labels).observe(now - request.last_token_at)
                request.last_token_at = now
                request.emitted += 1
                request.queue.put_nowait(" tok")
            for request_id in result.finished:
                request = self.requests.get(request_id)
                if request is not None:
                    request.queue.put_nowait(None)
                    self.metrics.e2e.labels(labels).observe(now - request.arrived)
                    self.metrics.success.labels(labels, "length").inc()  # max_tokens reached
                    self.metrics.generation_tokens.labels(labels).inc(request.emitted)

    def _update_gauges(self) -> None:
        labels = self.metrics.model
        self.metrics.running.labels(labels).set(len(self.engine.running))
        self.metrics.waiting.labels(labels).set(len(self.engine.waiting))
        self.metrics.kv_usage.labels(labels).set(self.engine.kv_cache_usage)
        self.metrics.host_memory.set(self.engine.host_bytes)
        queries, hits = self.engine.prefix_queries, self.engine.prefix_hits
        self.metrics.prefix_queries.labels(labels).inc(queries - self._prefix_exported[0])
        self.metrics.prefix_hits.labels(labels).inc(hits - self._prefix_exported[1])
        self._prefix_exported = (queries, hits)
        if self.metrics.cgroup_id is not None:
            self.metrics.working_set.labels(*self.metrics.cgroup_id).set(self.engine.host_bytes)
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
        app = web.Application(client_max_size=64 * 1024 * 1024)
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

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(self, request: web.Request) -> web.Response:
        # vLLM's ModelCard carries max_model_len (vllm/entrypoints/openai/serving_engine.py show_available_models).
        card = {"id": self.model, "object": "model", "max_model_len": self.tokenizer.max_model_len}
        data = [card, *self.lora.models(self.model)]
        return web.json_response({"object": "list", "data": data})

    async def metrics_handler(self, request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        if not isinstance(prompt, str):
            raise _bad_request("prompt must be a string")
        return await self._generate(request, body, prompt, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _bad_request("messages must be a non-empty list")
        parts = [str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in messages]
        return await self._generate(request, body, "\n\n".join(parts), chat=True)

    async def _generate(
        self, request: web.Request, body: dict[str, Any], prompt: str, chat: bool
    ) -> web.StreamResponse:
        model = body.get("model", self.model)
        if model != self.model:  # an adapter, or vLLM's 404 (kfchaos.demo.lora)
            missing = self.lora.check_model(str(model))
            if missing is not None:
                raise web.HTTPNotFound(text=json.dumps(missing), content_type="application/json")
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 16
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise _bad_request("max_tokens must be a positive integer")
        prompt_tokens = await self.tokenizer.tokenize(prompt)
        refusal = self.tokenizer.refusal(prompt_tokens, max_tokens)
        if refusal is not None:
            raise web.HTTPBadRequest(text=json.dumps(refusal), content_type="application/json")
        # The shared prefix is everything before the last paragraph: a document and then a question.
        prefix, _, _ = prompt.rpartition("\n\n")
        prefix_id = hashlib.sha1(prefix.encode()).hexdigest() if prefix else None
        request_id = f"cmpl-{uuid.uuid4().hex}"
        seq = Sequence(request_id, prompt_tokens, max_tokens, prefix_id, len(prefix) // CHARS_PER_TOKEN)
        seq.prefixes = paragraph_prefixes(prompt, CHARS_PER_TOKEN) if self.config.enable_prefix_caching else ()
        seq.lora = None if model == self.model else str(model)
        state = _Request(seq)
        self.requests[request_id] = state
        self.metrics.prompt_tokens.labels(self.model).inc(prompt_tokens)
        self.engine.add(seq)
        self._wake.set()
        try:
            if body.get("stream"):
                return await self._stream(request, state, body, chat)
            text = ""
            while (token := await state.queue.get()) is not None:
                text += token
            answered = _answered_as(seq, self.model)
            return web.json_response(_full_response(request_id, answered, text, prompt_tokens, state.emitted, chat))
        finally:
            self.requests.pop(request_id, None)
            if not seq.finished:  # the client went away (or the handler failed): abort, free its blocks
                self.disconnects.abort(request_id)
                self._update_gauges()

    async def _stream(
        self, request: web.Request, state: _Request, body: dict[str, Any], chat: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        request_id = state.seq.request_id
        answered = _answered_as(state.seq, self.model)
        first = True
        while (token := await state.queue.get()) is not None:
            chunk = _chunk(request_id, answered, token, chat, first)
            first = False
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if include_usage:
            usage = _usage(state.seq.prompt_tokens, state.emitted)
            final = {
                "id": request_id,
                "object": _object(chat, True),
                "model": answered,
                "choices": [],
                "usage": usage,
            }
            await response.write(b"data: " + json.dumps(final).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


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


def _chunk(request_id: str, model: str, token: str, chat: bool, first: bool) -> dict[str, Any]:
    if chat:
        delta: dict[str, str] = {"content": token}
        if first:
            delta["role"] = "assistant"
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
    else:
        choice = {"index": 0, "text": token, "finish_reason": None}
    return {
        "id": request_id,
        "object": _object(chat, True),
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }


def _full_response(
    request_id: str, model: str, text: str, prompt_tokens: int, emitted: int, chat: bool
) -> dict[str, Any]:
    if chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "length",
        }
    else:
        choice = {"index": 0, "text": text, "finish_reason": "length"}
    return {
        "id": request_id,
        "object": _object(chat, False),
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(prompt_tokens, emitted),
    }


def _bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(
        text=json.dumps({"error": {"message": message, "type": "BadRequestError"}}), content_type="application/json"
    )


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _bad_request("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _bad_request("request body must be a JSON object")
    return body


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
    # does (kfchaos.demo.disconnect), not only at the handler's next write.
    web.run_app(
        server.app(), host=args.host, port=args.port, print=None, access_log=None, handle_signals=True,
        handler_cancellation=True,
    )  # fmt: skip


if __name__ == "__main__":
    main()
