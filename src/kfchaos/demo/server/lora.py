"""LoRA adapters in the demo server: vLLM's runtime load/unload endpoints, GPU slots with LRU, the cost of a swap.

What is imitated, from vLLM (vllm-project/vllm):
- The endpoints exist only when the environment variable VLLM_ALLOW_RUNTIME_LORA_UPDATING is "1"/"true"
  (vllm/entrypoints/serve/lora/api_router.py attach_router; vllm/envs.py); without it the routes are absent and
  the HTTP server answers 404 {"detail": "Not Found"} (FastAPI's default for an unknown route).
- POST /v1/load_lora_adapter {"lora_name", "lora_path"} answers 200 with the text
  "Success: LoRA adapter '<name>' added successfully."; an empty name or path: 400 InvalidUserInput "Both
  'lora_name' and 'lora_path' must be provided."; a name already loaded: 400 InvalidUserInput "... has already
  been loaded ..."; a server started without --enable-lora: 500 InternalServerError with the worker's
  "LoRA is not enabled. Use --enable-lora to enable LoRA." (vllm/entrypoints/openai/models/serving.py
  load_lora_adapter and _check_load_lora_adapter_request; vllm/v1/worker/lora_model_runner_mixin.py
  _ensure_lora_enabled). The name is served only once the read is done (it joins `lora_requests` after
  `add_lora` returned), and calls for one name are serialised (its `lora_resolver_lock`).
- POST /v1/unload_lora_adapter {"lora_name"} answers 200 "Success: LoRA adapter '<name>' removed
  successfully."; an empty name: 400; a name not loaded: 404 NotFoundError "The lora adapter '<name>' cannot be
  found." (same file, unload_lora_adapter, _check_unload_lora_adapter_request).
- Errors are vLLM's ErrorResponse {"error": {"message", "type", "param", "code"}} with `code` the HTTP status
  (vllm/entrypoints/openai/engine/protocol.py ErrorInfo; vllm/entrypoints/serve/utils/error_response.py). A body
  that is not JSON, or lacks a field or has one of the wrong type, fails FastAPI's validation of the request model
  (vllm/entrypoints/serve/lora/protocol.py LoadLoRAAdapterRequest: lora_name and lora_path are required strings):
  400 with type "Bad Request", param the field's location ("body.lora_path") and pydantic's error in the message
  (vllm/entrypoints/serve/exception_handling/handlers/validation.py validation_exception_handler).
- A completion naming a model that is neither the base model nor a loaded adapter: 404 NotFoundError "The model
  `<name>` does not exist." with param "model" (vllm/entrypoints/openai/engine/serving.py _check_model).
- GET /v1/models lists the base model and every loaded adapter with `root` = its path and `parent` = the base
  model (vllm/entrypoints/openai/models/serving.py show_available_models).
- Two LRU caches: loaded adapters are kept in CPU memory up to --max-cpu-loras (default --max-loras) and a
  batch runs with at most --max-loras adapters in GPU slots; an adapter a batch needs that is not in a slot is
  activated into one, evicting the least recently used, and one not in the CPU cache is read again first
  (vllm/lora/worker_manager.py LRUCacheWorkerLoRAManager: "the requested LoRAs will be loaded (unless they are
  already loaded) and least recently used LoRAs will be unloaded if the cache is above capacity";
  vllm/lora/model_manager.py LRUCacheLoRAModelManager). The scheduler admits a waiting request only while the
  batch holds fewer than --max-loras distinct adapters or already holds its adapter; otherwise it is skipped
  and waits (vllm/v1/core/sched/scheduler.py, "Scheduling would exceed max_loras, skip").
- The cost: add_lora runs as an engine-core utility call between scheduler steps, so the engine stalls while an
  adapter is read (load_s; reads queue one after another, and an idle engine keeps nobody waiting), and a step
  that activates an adapter into a GPU slot pays the copy (swap_s). The two durations are the demo's own
  figures, not measured on a GPU.
- vllm:lora_requests_info, a gauge set to the current time every step with labels max_lora and the
  comma-separated names of the adapters of running and of waiting requests (vllm/v1/metrics/loggers.py
  PrometheusStatLogger; docs/design/metrics.md "LoRA Metrics"). Every label set stays exported, as in vLLM;
  the demo drops them all once there are more than MAX_INFO_SERIES (a bound vLLM does not have).

Guesses (not read in vLLM, said so here and in docs/faults.md): a request already running when its adapter is
unloaded finishes (its adapter is read again at its next step, paying load_s + swap_s); the demo reads no
weights, so any lora_path that passes kfchaos's own rules loads, and --max-lora-rank is accepted, not checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge

RUNTIME_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
MAX_INFO_SERIES = 256
NOT_ENABLED = "LoRA is not enabled. Use --enable-lora to enable LoRA."


def runtime_updating_allowed(environ: dict[str, str] | None = None) -> bool:
    """vllm/envs.py: `os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0").strip().lower() in ("1", "true")`."""
    value = (environ if environ is not None else os.environ).get(RUNTIME_ENV, "0")
    return value.strip().lower() in ("1", "true")


@dataclass(frozen=True)
class LoraConfig:
    enabled: bool = False  # --enable-lora
    max_loras: int = 1  # --max-loras: GPU slots, distinct adapters per batch (vLLM's default is 1)
    max_cpu_loras: int | None = None  # --max-cpu-loras: CPU cache; default max_loras (vllm/config/lora.py)
    max_lora_rank: int = 16  # --max-lora-rank (vLLM's default)
    # The demo's own figures (guesses at a rank-16 adapter of an 8B model read from local disk and copied into
    # a slot), not measured: vLLM publishes none.
    load_s: float = 0.2  # reading an adapter into the CPU cache: the engine stalls this long
    swap_s: float = 0.02  # activating an adapter into a GPU slot

    def __post_init__(self) -> None:
        if self.max_loras < 1:
            raise ValueError("--max-loras must be at least 1")
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            # vllm/config/lora.py: "max_cpu_loras must be >= max_loras"
            raise ValueError("--max-cpu-loras must be at least --max-loras")
        if self.load_s < 0 or self.swap_s < 0:
            raise ValueError("LoRA load and swap times must not be negative")
        if self.max_lora_rank < 1:
            raise ValueError("--max-lora-rank must be at least 1")

    @property
    def cpu_capacity(self) -> int:
        return self.max_cpu_loras if self.max_cpu_loras is not None else self.max_loras


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def validation_error(loc: tuple[str | int, ...], kind: str, msg: str, value: Any, **ctx: str) -> dict[str, Any]:
    """vLLM's 400 for a request its FastAPI model refuses: one pydantic error rendered as
    vllm/entrypoints/serve/exception_handling/handlers/validation.py does (containers summarised as
    "<dict of N items>", `param` the dotted location)."""
    error: dict[str, Any] = {"type": kind, "loc": ".".join(str(p) for p in loc), "msg": msg, "input": _summary(value)}
    if ctx:
        error["ctx"] = ctx
    return error_body(f"1 validation error:\n  {error}", "Bad Request", 400, str(error["loc"]))


def _summary(value: Any) -> Any:
    """validation.py _summarize_error_input: containers by their size, long text cut at 200 characters."""
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = value if isinstance(value, str) else str(value)
    return text[:200] + "...[truncated]" if len(text) > 200 else text


def field_error(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The validation error of a required string field, or None when it is there and a string."""
    if name not in body:
        return validation_error(("body", name), "missing", "Field required", body)
    if not isinstance(body[name], str):
        return validation_error(("body", name), "string_type", "Input should be a valid string", body[name])
    return None


@dataclass
class LoraState:
    """The served adapters (name -> path), the two LRU caches, and engine time owed to loads and swaps."""

    config: LoraConfig
    registered: dict[str, str] = field(default_factory=dict)
    cpu: OrderedDict[str, None] = field(default_factory=OrderedDict)
    gpu: OrderedDict[str, None] = field(default_factory=OrderedDict)
    clock: Callable[[], float] = time.monotonic
    busy_until: float = 0.0  # the engine is reading adapters until then: a step waits for it
    loads: int = 0
    swaps: int = 0

    # ------------------------------------------------------------------ API

    def load(self, body: dict[str, Any], register: bool = True) -> tuple[int, Any]:
        """(status, JSON body or text) of POST /v1/load_lora_adapter. `register=False`: the caller serves the name
        once the read is done, as vLLM adds it to its served adapters only after `add_lora` returned
        (vllm/entrypoints/openai/models/serving.py load_lora_adapter): a request naming it meanwhile gets 404."""
        for field_name in ("lora_name", "lora_path"):  # pydantic checks them in the model's order
            invalid = field_error(body, field_name)
            if invalid is not None:
                return 400, invalid
        name, path = str(body["lora_name"]), str(body["lora_path"])
        if not name or not path:
            return 400, error_body("Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput", 400)
        if name in self.registered and not body.get("load_inplace"):
            message = (
                f"The lora adapter '{name}' has already been loaded. If you want to load the adapter in place, "
                "set 'load_inplace' to True."
            )
            return 400, error_body(message, "InvalidUserInput", 400)
        if not self.config.enabled:
            return 500, error_body(NOT_ENABLED, "InternalServerError", 500)
        self._read(name)
        if register:
            self.registered[name] = path
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, body: dict[str, Any]) -> tuple[int, Any]:
        invalid = field_error(body, "lora_name")
        if invalid is not None:
            return 400, invalid
        name = str(body["lora_name"])
        if not name:
            message = "'lora_name' needs to be provided to unload a LoRA adapter."
            return 400, error_body(message, "InvalidUserInput", 400)
        if name not in self.registered:
            return 404, error_body(f"The lora adapter '{name}' cannot be found.", "NotFoundError", 404)
        del self.registered[name]
        self.cpu.pop(name, None)
        self.gpu.pop(name, None)
        return 200, f"Success: LoRA adapter '{name}' removed successfully."

    def check_model(self, model: str) -> dict[str, Any] | None:
        """None when requests may name `model` as an adapter, else vLLM's 404 body."""
        if model in self.registered:
            return None
        return not_found(model)

    def models(self, base: str) -> list[dict[str, Any]]:
        return [{"id": name, "object": "model", "root": path, "parent": base} for name, path in self.registered.items()]

    # ------------------------------------------------------------------ engine side

    def _read(self, name: str) -> None:
        """Into the CPU cache (LRU), paying a load; the least recently used leaves when it is full."""
        self.cpu[name] = None
        self.cpu.move_to_end(name)
        while len(self.cpu) > self.config.cpu_capacity:
            evicted, _ = self.cpu.popitem(last=False)
            self.gpu.pop(evicted, None)
        # One read at a time, between steps; an idle engine spends the time without keeping anyone waiting.
        self.busy_until = max(self.clock(), self.busy_until) + self.config.load_s
        self.loads += 1

    def schedulable(self, adapter: str | None, batch: Iterable[str | None]) -> bool:
        """Whether a waiting request may join `batch` (the adapters of the running requests)."""
        if adapter is None:
            return True
        distinct = {a for a in batch if a is not None}
        return adapter in distinct or len(distinct) < self.config.max_loras

    def step_stall(self, batch: Iterable[str | None]) -> float:
        """Seconds this step is longer: what is left of adapter reads under way, plus activating every adapter
        the batch needs that is not in a GPU slot (read again first when it left the CPU cache)."""
        swaps = 0.0
        for adapter in dict.fromkeys(a for a in batch if a is not None):
            if adapter in self.gpu:
                self.gpu.move_to_end(adapter)
                continue
            if adapter not in self.cpu:
                self._read(adapter)
            else:
                self.cpu.move_to_end(adapter)
            self.gpu[adapter] = None
            while len(self.gpu) > self.config.max_loras:
                self.gpu.popitem(last=False)
            swaps += self.config.swap_s
            self.swaps += 1
        return max(0.0, self.busy_until - self.clock()) + swaps


def not_found(model: str) -> dict[str, Any]:
    return error_body(f"The model `{model}` does not exist.", "NotFoundError", 404, "model")


def info_labels(max_loras: int, running: Iterable[str | None], waiting: Iterable[str | None]) -> dict[str, str]:
    """The labels of vllm:lora_requests_info for one step: adapter names in first-seen order, comma-joined."""
    return {
        "max_lora": str(max_loras),
        "waiting_lora_adapters": ",".join(dict.fromkeys(a for a in waiting if a is not None)),
        "running_lora_adapters": ",".join(dict.fromkeys(a for a in running if a is not None)),
    }


def info_value() -> float:
    return time.time()


# ---------------------------------------------------------------------- the server's side (kfchaos.demo.server.api)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """vLLM's flag names (vllm/engine/arg_utils.py), plus the demo's two cost figures."""
    defaults = LoraConfig()
    parser.add_argument("--enable-lora", action="store_true")
    parser.add_argument("--max-loras", type=int, default=defaults.max_loras)
    parser.add_argument("--max-cpu-loras", type=int, default=None)
    parser.add_argument("--max-lora-rank", type=int, default=defaults.max_lora_rank)
    parser.add_argument("--lora-load-ms", type=float, default=defaults.load_s * 1000, help="demo: adapter read stall")
    parser.add_argument("--lora-swap-ms", type=float, default=defaults.swap_s * 1000, help="demo: GPU slot swap")


def config_from(args: argparse.Namespace) -> LoraConfig:
    return LoraConfig(
        enabled=args.enable_lora,
        max_loras=args.max_loras,
        max_cpu_loras=args.max_cpu_loras,
        max_lora_rank=args.max_lora_rank,
        load_s=args.lora_load_ms / 1000,
        swap_s=args.lora_swap_ms / 1000,
    )


class LoraMetrics:
    """vllm:lora_requests_info, exported only with --enable-lora (vLLM creates it only with a LoRA config)."""

    def __init__(self, registry: CollectorRegistry, config: LoraConfig) -> None:
        self.config = config
        self.gauge = Gauge(
            "vllm:lora_requests_info",
            "Running stats on lora requests.",
            ["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
            registry=registry,
        )

    def update(self, running: Iterable[str | None], waiting: Iterable[str | None]) -> None:
        labels = info_labels(self.config.max_loras, running, waiting)
        if len(self.gauge._metrics) >= MAX_INFO_SERIES and tuple(labels.values()) not in self.gauge._metrics:
            self.gauge.clear()
        self.gauge.labels(**labels).set(info_value())


def attach(app: web.Application, state: LoraState, wake: Callable[[], None]) -> None:
    """The two routes, only when VLLM_ALLOW_RUNTIME_LORA_UPDATING allows them (else they do not exist: 404)."""
    if not runtime_updating_allowed():
        return

    locks: dict[str, asyncio.Lock] = {}  # one load or unload per name at a time (vLLM's lora_resolver_lock)

    def lock(body: dict[str, Any]) -> asyncio.Lock:
        if len(locks) > 1024:  # names come from clients: forget the idle ones rather than grow without bound
            for idle in [n for n, held in locks.items() if not held.locked()]:
                del locks[idle]
        return locks.setdefault(str(body.get("lora_name"))[:256], asyncio.Lock())

    async def load(request: web.Request) -> web.Response:
        body = await json_object(request)
        async with lock(body):
            status, answer = state.load(body, register=False)
            if status == 200:
                wake()  # the engine pays the read at its next step; the caller waits for it too
                await asyncio.sleep(state.config.load_s)
                state.registered[str(body["lora_name"])] = str(body["lora_path"])
        return _answer(status, answer)

    async def unload(request: web.Request) -> web.Response:
        body = await json_object(request)
        async with lock(body):
            return _answer(*state.unload(body))

    app.router.add_post("/v1/load_lora_adapter", load)
    app.router.add_post("/v1/unload_lora_adapter", unload)


def refused(status: int, body: dict[str, Any]) -> web.HTTPException:
    """An error answer to raise from a handler: vLLM's JSON body under its status (compact, as FastAPI writes it)."""
    cls = web.HTTPNotFound if status == 404 else web.HTTPBadRequest
    return cls(text=dumps(body), content_type="application/json")


def dumps(value: Any) -> str:
    """JSON as FastAPI and pydantic write it: no spaces after separators."""
    return json.dumps(value, separators=(",", ":"))


async def json_object(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, or vLLM's 400 for a body FastAPI cannot parse into its request model: not JSON
    (json_invalid at the error's position, as fastapi/routing.py reports json.JSONDecodeError) or not an object."""
    raw = await request.read()
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        where, why = exc.pos, exc.msg
    except (ValueError, RecursionError):  # not UTF-8; "[[[[..." nested past the recursion limit
        where, why = 0, "invalid"
    else:
        if isinstance(body, dict):
            return body
        message = "Input should be a valid dictionary or object to extract fields from"
        raise refused(400, validation_error(("body",), "model_attributes_type", message, body))
    raise refused(400, validation_error(("body", where), "json_invalid", "JSON decode error", {}, error=why))


def _answer(status: int, answer: Any) -> web.Response:
    # Success is plain text (`Response(status_code=200, content=...)` in the api_router), errors are JSON.
    if isinstance(answer, str):
        return web.Response(status=status, text=answer)
    return web.json_response(answer, status=status, dumps=dumps)


def server_args(args: argparse.Namespace) -> list[str]:
    """The flags above as the supervisor passes them on to the server it restarts."""
    out = ["--max-loras", str(args.max_loras), "--max-lora-rank", str(args.max_lora_rank)]
    out += ["--lora-load-ms", str(args.lora_load_ms), "--lora-swap-ms", str(args.lora_swap_ms)]
    if args.max_cpu_loras is not None:
        out += ["--max-cpu-loras", str(args.max_cpu_loras)]
    return (["--enable-lora"] if args.enable_lora else []) + out
