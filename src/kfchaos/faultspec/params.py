"""Parameters of each catalog fault type, as written in an experiment's `faults[].params`.

One model per type; the experiment format (kfchaos.spec) builds its tagged union from `PARAMS_BY_TYPE`
(kfchaos.faultspec.kinds, the table of fault kinds),
so a new fault type is one model here plus its renderer. This module must not import kfchaos.spec.
Field names are snake_case like the rest of the experiment format; renderers map them to the Chaos Mesh
CRD's camelCase fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from kfchaos import bounds
from kfchaos.faultspec import admission
from kfchaos.types import Duration, Percent, StrictModel
from kfchaos.units import parse_duration

Direction = Literal["to", "from", "both"]
HttpTarget = Literal["Request", "Response"]
_SIZE = re.compile(r"^\d+(\.\d+)?(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB|%)$")


def _size(value: str) -> str:
    if not _SIZE.match(value):
        # kfchaos's own rule, stricter than Chaos Mesh's: its webhook parses sizes with docker/go-units v0.5.0
        # FromHumanSize, which also takes `1g`, `1gb`, `5 kb` or a bare `512` (kfchaos.faultspec.goparse), and
        # refuses `512Mi`. One spelling per unit keeps experiment files unambiguous.
        raise ValueError(
            f"size {value!r} must be a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB) or a percentage "
            "(kfchaos's own rule; Chaos Mesh refuses 512Mi and also takes 1g or a bare 512)"
        )
    problem = admission.size_percent_problem(value)
    if problem:
        raise ValueError(problem)
    return value


Size = Annotated[str, AfterValidator(_size)]


class NoParams(StrictModel):
    pass


class PodKillParams(StrictModel):
    grace_period: Duration = Field(0.0, description="Termination grace period; 0 kills at once")


class TargetSelector(StrictModel):
    """The other side of a partition or directed network fault."""

    namespace: str
    labels: dict[str, str] = Field(min_length=1)


class _NetworkCommon(StrictModel):
    direction: Direction = "to"
    target: TargetSelector | None = None
    external_targets: list[str] = Field(default_factory=list, description="IPs or host names outside the cluster")

    @model_validator(mode="after")
    def _direction_admitted(self) -> _NetworkCommon:
        # Chaos Mesh's webhook rule (kfchaos.faultspec.admission): from/both need the other side.
        problem = admission.direction_problem(
            self.direction,
            self.target is not None,
            bool(self.external_targets),
            isinstance(self, NetworkPartitionParams),
        )
        if problem:
            raise ValueError(problem)
        return self


class NetworkDelayParams(_NetworkCommon):
    latency: Duration
    jitter: Duration = 0.0
    correlation: Percent = 0.0


class NetworkLossParams(_NetworkCommon):
    loss: Percent
    correlation: Percent = 0.0


class NetworkDuplicateParams(_NetworkCommon):
    duplicate: Percent
    correlation: Percent = 0.0


class NetworkCorruptParams(_NetworkCommon):
    corrupt: Percent
    correlation: Percent = 0.0


class NetworkBandwidthParams(_NetworkCommon):
    rate: str = Field(description="a whole number with a unit: 1500kbps, 10mbit (Chaos Mesh refuses 1.5mbps)")
    # The CRD declares both int32; the API server refuses larger values.
    limit: int = Field(ge=1, le=2**31 - 1, description="bytes that can be queued")
    buffer: int = Field(ge=1, le=2**31 - 1, description="bucket size in bytes")

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str) -> str:
        problem = admission.rate_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class NetworkPartitionParams(_NetworkCommon):
    direction: Direction = "both"

    @model_validator(mode="after")
    def _has_other_side(self) -> NetworkPartitionParams:
        if self.target is None and not self.external_targets:
            raise ValueError("a partition needs a target selector or external_targets")
        return self


# Stress workers: 1..64 is kfchaos's own limit. Chaos Mesh's webhook never checks workers (stresschaos_webhook.go
# Stressor.Validate lacks the FieldValidator signature, so api/genericwebhook does not call it); its CRD caps them
# at 8192 and admits 0 or negative values.
_WORKERS = "stress-ng workers, 1 to 64 (kfchaos's own limit; Chaos Mesh admits up to 8192)"


def _workers(value: int) -> int:
    # The message says the limit is kfchaos's, so a user who reads Chaos Mesh's docs knows why it differs
    # (the real webhooks admit 0 and 8192: tests/cluster/test_admission_agreement.py).
    if not 1 <= value <= 64:
        raise ValueError(
            f"workers {value} must be 1 to 64 (kfchaos's own rule; Chaos Mesh's webhook does not check workers, "
            "its CRD caps them at 8192)"
        )
    return value


# ge/le stay in the JSON schema (`kfchaos schema`); the validator gives the message.
Workers = Annotated[int, AfterValidator(_workers), Field(json_schema_extra={"minimum": 1, "maximum": 64})]


class StressMemoryParams(StrictModel):
    size: Size = Field(description="memory to take per worker: 256MB, 1GiB or a share of the limit such as 80%")
    workers: Workers = Field(1, description=_WORKERS)
    oom_score_adj: int = Field(0, ge=-1000, le=1000)


class StressCpuParams(StrictModel):
    workers: Workers = Field(1, description=_WORKERS)
    load: int = Field(100, ge=0, le=100, description="percent load per worker")


class _HttpCommon(StrictModel):
    port: int = Field(ge=1, le=65535)
    path: str = "*"
    method: str | None = Field(None, description="GET, POST, PUT, DELETE, PATCH, HEAD, OPTIONS, TRACE or CONNECT")
    code: int | None = Field(None, ge=100, le=599, description="only responses with this status (target Response)")
    target: HttpTarget = "Request"

    @model_validator(mode="after")
    def _method_admitted(self) -> _HttpCommon:
        problem = admission.http_method_problem(self.method, self.target)
        if problem:
            raise ValueError(problem)
        return self


class HttpAbortParams(_HttpCommon):
    pass


class HttpDelayParams(_HttpCommon):
    delay: Duration


class HttpReplaceParams(_HttpCommon):
    replace_code: int | None = Field(None, ge=100, le=599)
    replace_body: str | None = None
    replace_headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _replaces_something(self) -> HttpReplaceParams:
        if self.replace_code is None and self.replace_body is None and not self.replace_headers:
            raise ValueError("http-replace needs replace_code, replace_body or replace_headers")
        return self


class _IoCommon(StrictModel):
    volume_path: str = Field(description="mount point of the volume inside the container")
    path: str | None = Field(None, description="files to affect (glob); default: the whole volume")
    percent: int = Field(100, ge=1, le=100, description="share of IO operations affected")
    methods: list[str] = Field(default_factory=list)


class IoLatencyParams(_IoCommon):
    delay: Duration


class IoFaultParams(_IoCommon):
    errno: int = Field(ge=1, le=133, description="errno returned, e.g. 5 (EIO) or 28 (ENOSPC)")


class IoAttrOverrideParams(_IoCommon):
    perm: int | None = Field(None, ge=0, le=0o7777)
    size: int | None = Field(None, ge=0)
    nlink: int | None = Field(None, ge=0, le=2**31 - 1)  # int32 in the CRD

    @model_validator(mode="after")
    def _overrides_something(self) -> IoAttrOverrideParams:
        if self.perm is None and self.size is None and self.nlink is None:
            raise ValueError("io-attr-override needs perm, size or nlink")
        return self


class IoMistakeParams(_IoCommon):
    """IOChaos action `mistake`: reads and writes of the volume's files come back with wrong bytes, as a failing
    disk or a torn model cache gives them: 1 to `max_occurrences` segments of up to `max_length` bytes each, filled
    with zeros or random octets (chaos-mesh api/v1alpha1/iochaos_types.go MistakeSpec). For a model server: weights
    or LoRA adapters loaded from a volume while it runs (a restart, a runtime adapter load) read corrupt."""

    filling: Literal["zero", "random"] = Field("random", description="what the wrong bytes are")
    max_occurrences: int = Field(1, ge=1, le=1_000_000, description="at most this many wrong segments per operation")
    max_length: int = Field(64, ge=1, le=1 << 30, description="at most this many bytes in each wrong segment")


class TimeOffsetParams(StrictModel):
    offset: str = Field(description="Go duration, may be negative: -5m, 1h")
    clock_ids: list[str] = Field(default_factory=lambda: ["CLOCK_REALTIME"])

    @field_validator("offset")
    @classmethod
    def _offset(cls, value: str) -> str:
        parse_duration(value.removeprefix("-"))
        return value


class DnsParams(StrictModel):
    patterns: list[str] = Field(min_length=1, description="domain patterns, e.g. 'redis.*' or '*'")


class GpuMemoryPressureParams(StrictModel):
    share: Percent = Field(description="share of the target GPU's memory to hold, e.g. 30%")
    method: Literal["pod", "exec"] = Field(
        "pod",
        description="pod: a short-lived pod on the target's node (needs GPU sharing); exec: in the target container",
    )
    image: str | None = Field(None, description="image with CUDA for the allocator pod; default: the kfchaos image")

    @model_validator(mode="after")
    def _implemented(self) -> GpuMemoryPressureParams:
        # Rendered, but the backend does not run it (it would need pods/exec): refused here rather than
        # passing preflight and failing at apply.
        if self.method == "exec":
            raise ValueError("method exec is not implemented by the backend yet; use method pod")
        return self


class FixedLengthAnswers(StrictModel):
    """`ignore_eos` for the faults whose load is their answers' length: the server generates `max_tokens` whatever
    its end-of-sequence token says, so the load is the one sized. A vLLM sampling extension
    (vllm/entrypoints/openai/completion/protocol.py and chat_completion/protocol.py `ignore_eos`, applied in
    vllm/sampling_params.py); SGLang accepts it too. A server that rejects unknown fields answers 400, so it is off
    unless asked."""

    ignore_eos: bool = Field(
        False, description="ask the server for max_tokens whatever its end-of-sequence token (vLLM's extension)"
    )


class LongContextBurstParams(FixedLengthAnswers):
    """Traffic-side fault: k concurrent requests with m-token contexts, swelling the KV cache."""

    requests: int = Field(ge=1, le=10_000, description="concurrent long-context requests per burst")
    context_tokens: int = Field(ge=1, le=2_000_000)
    max_tokens: int = Field(256, ge=1, le=100_000)
    start: Duration = Field(0.0, description="offset into each active stage when the first burst starts")
    every: Duration | None = Field(None, description="repeat the burst at this interval within the stage")


# ---------------------------------------------------------------- lora-adapter-churn (kfchaos.faults.lorachurn)
# Adapter names go onto the wire as `kfchaos-<name>` (ADAPTER_PREFIX): the churn, the stage end and the exit
# handler only ever unload names with that prefix, so an adapter the operator loaded (--lora-modules, or by
# hand) can never be unloaded by a run, whatever the experiment file says.
ADAPTER_PREFIX = "kfchaos-"
MAX_ADAPTERS = 16
_ADAPTER_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,47}$")
# What vLLM's lora_path may be: a directory on the server (vllm/lora/utils.py get_adapter_absolute_path: an
# existing local path is used as is) or a Hugging Face repo id it downloads (huggingface_hub.snapshot_download).
# kfchaos accepts only an absolute, normalised local path or a plain `owner/name` repo id: no URL schemes,
# no `..`, no `~`, no relative paths, so an experiment file cannot point the server at anything else.
_HF_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_LOCAL_PATH = re.compile(r"^(/[A-Za-z0-9._@+=,-]+)+/?$")


def lora_path_problem(path: str) -> str | None:
    """Why `path` is not a lora_path kfchaos sends (None when it is fine)."""
    if path.startswith("/"):
        parts = path.rstrip("/").split("/")[1:]
        if len(path) > 1024 or not _LOCAL_PATH.match(path) or any(p in (".", "..") for p in parts):
            return (
                f"lora_path {path!r}: a local path must be absolute and plain (letters, digits, . _ - @ + = ,; "
                "no '..', no spaces, at most 1024 characters)"
            )
        return None
    if _HF_REPO_ID.match(path) and ".." not in path:
        return None
    return (
        f"lora_path {path!r} is neither an absolute local path on the server nor a Hugging Face repo id "
        "(owner/name); URLs and relative paths are refused"
    )


class LoraAdapterRef(StrictModel):
    name: str = Field(description=f"adapter name; requests name it as {ADAPTER_PREFIX}<name>")
    path: str = Field(description="lora_path as vLLM loads it: an absolute path on the server or an HF repo id")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _ADAPTER_NAME.match(value):
            raise ValueError(
                f"adapter name {value!r}: lower-case letters, digits, '.', '_' or '-', starting with a letter or "
                "digit, at most 48 characters"
            )
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        problem = lora_path_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @property
    def wire_name(self) -> str:
        return ADAPTER_PREFIX + self.name


class LoraAdapterChurnParams(StrictModel):
    """Traffic-side fault: load and unload LoRA adapters through vLLM's runtime endpoints while requests name
    them (the replayer performs it; kfchaos.faults.lorachurn)."""

    adapters: list[LoraAdapterRef] | None = Field(None, description="the adapters to churn, each a name and a path")
    count: int | None = Field(None, ge=1, le=MAX_ADAPTERS, description="or this many adapters from path_template")
    path_template: str | None = Field(None, description="with count: lora_path with {i} for 0..count-1")
    interval: Duration = Field(description="one churn cycle (unload + load of the next adapter) this often")
    share: Percent | None = Field(
        None, description="requests naming the adapters, as a share of the stage's synthetic rate (default 10%)"
    )
    rate: float | None = Field(
        None, gt=0, le=10_000, description="or requests/s naming the adapters at 100 %, scaled like the traffic"
    )
    prompt_tokens: int = Field(256, ge=1, le=32_768)
    max_tokens: int = Field(16, ge=1, le=4096)
    start: Duration | None = Field(None, description="offset of the first churn cycle into the stage; default interval")

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: float) -> float:
        # Each cycle is two API calls that stall the engine; more than one a second is a load test of the
        # adapter loader, not churn. At most an hour: a slower churn never happens inside one stage.
        if not 1.0 <= value <= 3600.0:
            raise ValueError("interval must be from 1s to 1h")
        return value

    @field_validator("start")
    @classmethod
    def _start(cls, value: float | None) -> float | None:
        if value is not None and not 0.0 <= value <= 3600.0:
            raise ValueError("start must be from 0s to 1h")
        return value

    @model_validator(mode="after")
    def _adapters_given(self) -> LoraAdapterChurnParams:
        if (self.adapters is None) == (self.count is None):
            raise ValueError("give either adapters (names and paths) or count with path_template")
        if self.count is not None:
            if self.path_template is None or self.path_template.count("{i}") != 1:
                raise ValueError("count needs path_template with exactly one {i}")
            problem = lora_path_problem(self.path_template.replace("{i}", "0"))
            if problem:
                raise ValueError(f"path_template: {problem}")
        elif self.path_template is not None:
            raise ValueError("path_template goes with count, not with adapters")
        if self.share is not None and self.rate is not None:
            raise ValueError("give share or rate, not both")
        if self.adapters is not None:
            if not 1 <= len(self.adapters) <= MAX_ADAPTERS:
                raise ValueError(f"adapters: from 1 to {MAX_ADAPTERS}")
            names = [a.name for a in self.adapters]
            if len(set(names)) != len(names):
                raise ValueError("adapters: names must be unique")
        return self

    def resolved(self) -> list[LoraAdapterRef]:
        """The adapters in churn order."""
        if self.adapters is not None:
            return list(self.adapters)
        assert self.count is not None and self.path_template is not None
        return [
            LoraAdapterRef(name=f"adapter-{i}", path=self.path_template.replace("{i}", str(i)))
            for i in range(self.count)
        ]

    @property
    def first_cycle(self) -> float:
        return self.interval if self.start is None else self.start


# Bounds of a client abort storm: one storm is at most this many clients, a slow reader reads at least this
# fast (or it is a stalled connection the request timeout ends, not a reader), and storms repeat no more often
# than this (faster, it is a flood of connections, not a storm).
MAX_STORM_CLIENTS = 10_000
MAX_SLOW_READERS = 1_000
MIN_READ_RATE = 16  # bytes/s
MIN_STORM_EVERY = 1.0  # seconds
MAX_ABORT_AFTER = 3600.0  # seconds; the request timeout ends a stream sooner anyway


class ClientAbortStormParams(FixedLengthAnswers):
    """Traffic-side fault: clients that close their stream mid-generation at once, and slow readers.

    Each storm opens `requests` streams that the client closes after `abort_after_tokens` token chunks (or
    `abort_after` seconds), as a gateway timeout or users closing a tab do in bulk: the server must abort each
    request and free its KV blocks. `slow_readers` streams read only `read_rate` bytes/s from a small receive
    buffer, so the server's writes back up (TCP backpressure) until the request timeout ends them.
    """

    requests: int = Field(0, ge=0, le=MAX_STORM_CLIENTS, description="streams per storm the client closes mid-stream")
    abort_after_tokens: int | None = Field(
        None, ge=1, le=100_000, description="close after this many token chunks (default 8 when abort_after is unset)"
    )
    abort_after: Duration | None = Field(None, description="close this long after sending instead (e.g. 2s)")
    slow_readers: int = Field(0, ge=0, le=MAX_SLOW_READERS, description="streams per storm that read slowly")
    read_rate: int = Field(256, ge=MIN_READ_RATE, le=10_000_000, description="bytes/s a slow reader reads")
    prompt_tokens: int = Field(512, ge=1, le=2_000_000)
    max_tokens: int = Field(256, ge=1, le=100_000)
    start: Duration = Field(0.0, description="offset into each active stage when the first storm starts")
    every: Duration | None = Field(None, description="repeat the storm at this interval within the stage")

    @model_validator(mode="after")
    def _bounded(self) -> ClientAbortStormParams:
        if self.requests + self.slow_readers < 1:
            raise ValueError("a client abort storm needs requests or slow_readers (at least one)")
        if self.abort_after_tokens is not None and self.abort_after is not None:
            raise ValueError("give abort_after_tokens or abort_after, not both")
        if self.abort_after is not None and not 0 < self.abort_after <= MAX_ABORT_AFTER:
            raise ValueError(f"abort_after must be above 0 and at most {MAX_ABORT_AFTER:g}s")
        if self.abort_after_tokens is not None and self.abort_after_tokens >= self.max_tokens:
            # The stream would end by itself before the client closes it: the storm would abort nothing.
            raise ValueError(
                f"abort_after_tokens ({self.abort_after_tokens}) must be below max_tokens ({self.max_tokens})"
            )
        if self.requests and self.abort_after is None and self.max_tokens < 2:
            raise ValueError("aborting after a token needs max_tokens of at least 2 (or give abort_after)")
        if self.every is not None and self.every < MIN_STORM_EVERY:
            raise ValueError(f"every must be at least {MIN_STORM_EVERY:g}s (faster is a connection flood, not a storm)")
        return self

    @property
    def abort_tokens(self) -> int | None:
        """Token chunks after which an aborting client closes: None when it closes after `abort_after` seconds."""
        if self.abort_after is not None:
            return None
        return self.abort_after_tokens if self.abort_after_tokens is not None else max(1, min(8, self.max_tokens - 1))


# ---------------------------------------------------------------- serving-chain faults (traffic side)
# Sizes are bounded by kfchaos.bounds (prompt bytes, requests at once); the generators live in
# kfchaos.traffic.trafficfaults.chain.

TokenizerKind = Literal[
    "over-limit", "near-limit", "no-spaces", "combining-marks", "emoji-zwj", "rtl-mixed", "odd-codepoints"
]
TOKENIZER_KINDS: tuple[TokenizerKind, ...] = (
    "over-limit", "near-limit", "no-spaces", "combining-marks", "emoji-zwj", "rtl-mixed", "odd-codepoints"
)  # fmt: skip


class TokenizerStressParams(StrictModel):
    """Traffic-side fault: prompts that are costly or odd to tokenize, near and over `--max-model-len`."""

    max_model_len: int = Field(
        ge=16, le=10_000_000, description="the target's --max-model-len in tokens (vLLM shows it at /v1/models)"
    )
    kinds: list[TokenizerKind] = Field(default_factory=lambda: list(TOKENIZER_KINDS), min_length=1)
    requests: int = Field(ge=1, le=1000, description="requests per wave; they take the kinds in turn")
    prompt_chars: int = Field(16_384, ge=1, description="length of the unicode and no-spaces prompts (code points)")
    near: Percent = Field(0.95, description="near-limit prompts fill this share of max_model_len - max_tokens")
    over_tokens: int = Field(1024, ge=1, le=1_000_000, description="over-limit prompts exceed the limit by this")
    max_tokens: int = Field(16, ge=1, le=100_000)
    start: Duration = Field(0.0, description="offset into each active stage when the first wave starts")
    every: Duration | None = Field(None, description="repeat the wave at this interval within the stage")

    @model_validator(mode="after")
    def _bounded(self) -> TokenizerStressParams:
        if self.max_tokens >= self.max_model_len:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be below max_model_len ({self.max_model_len})")
        # Word prompts take 4 bytes a token (kfchaos.traffic.trafficfaults.chain); text prompts up to 4 bytes a
        # character.
        largest = max(4 * (self.max_model_len + self.over_tokens), 4 * self.prompt_chars)
        if largest > bounds.MAX_FAULT_PROMPT_BYTES:
            raise ValueError(
                f"a prompt would take {largest} bytes, over the {bounds.MAX_FAULT_PROMPT_BYTES} a fault's prompt may "
                "have (max_model_len + over_tokens and prompt_chars bound it)"
            )
        if self.requests * largest > bounds.MAX_FAULT_WAVE_BYTES:
            raise ValueError(
                f"one wave would send {self.requests} x {largest} bytes, over {bounds.MAX_FAULT_WAVE_BYTES}; "
                "send fewer requests or shorter prompts"
            )
        return self


class TokenRange(StrictModel):
    min: int = Field(ge=1, le=1_000_000)
    max: int = Field(ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> TokenRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class BatchShockParams(FixedLengthAnswers):
    """Traffic-side fault: a step of extra requests in flight at once, `max_tokens` spread wide, held a while."""

    extra_concurrency: Percent | None = Field(
        None, description="extra in-flight requests as a share of the stage's (stage rate x expected_latency)"
    )
    requests: int | None = Field(None, ge=1, description="extra in-flight requests, as a number")
    expected_latency: Duration | None = Field(
        None, description="a request's usual latency: sizes a percentage step (Little's law) and the hold's rate"
    )
    max_tokens: TokenRange = Field(default_factory=lambda: TokenRange(min=16, max=512))
    prompt_tokens: TokenRange = Field(default_factory=lambda: TokenRange(min=256, max=1024))
    start: Duration = Field(0.0, description="offset into each active stage when the step comes")
    hold: Duration | None = Field(
        None, description="keep the extra requests coming this long: requests / expected_latency per second"
    )

    @model_validator(mode="after")
    def _sized(self) -> BatchShockParams:
        if (self.extra_concurrency is None) == (self.requests is None):
            raise ValueError("give exactly one of extra_concurrency (a share, e.g. 30%) or requests (a number)")
        if self.requests is not None and self.requests > bounds.MAX_FAULT_CONCURRENCY:
            raise ValueError(f"requests {self.requests} is over {bounds.MAX_FAULT_CONCURRENCY} at once")
        if self.extra_concurrency == 0:
            raise ValueError("extra_concurrency must be above 0%")
        if self.expected_latency is None and (self.extra_concurrency is not None or self.hold):
            raise ValueError("extra_concurrency and hold need expected_latency (a request's usual latency, e.g. 4s)")
        if self.expected_latency is not None and self.expected_latency <= 0:
            raise ValueError("expected_latency must be longer than zero")
        if 4 * self.prompt_tokens.max > bounds.MAX_FAULT_PROMPT_BYTES:
            raise ValueError(f"prompt_tokens.max would take over {bounds.MAX_FAULT_PROMPT_BYTES} bytes")
        return self


class PrefixCacheThrashParams(FixedLengthAnswers):
    """Traffic-side fault: requests whose long shared prefixes rotate faster than the prefix cache keeps them."""

    prefixes: int = Field(ge=2, le=100_000, description="distinct shared prefixes, taken in turn")
    prefix_tokens: int = Field(ge=16, description="length of each shared prefix in tokens")
    rate: float = Field(gt=0, le=10_000, description="requests per second the fault adds")
    max_tokens: int = Field(16, ge=1, le=100_000)
    start: Duration = Field(0.0, description="offset into each active stage when the rotation starts")
    hold: Duration | None = Field(None, description="how long it lasts; default: to the end of the stage")

    @model_validator(mode="after")
    def _bounded(self) -> PrefixCacheThrashParams:
        if 4 * self.prefix_tokens > bounds.MAX_FAULT_PROMPT_BYTES:
            raise ValueError(
                f"prefix_tokens {self.prefix_tokens} would take over {bounds.MAX_FAULT_PROMPT_BYTES} bytes"
            )
        return self
