"""Parameters of each catalog fault type, as written in an experiment's `faults[].params`.

One model per type; the experiment format (kfchaos.spec) builds its tagged union from `PARAMS_BY_TYPE`,
so a new fault type is one model here plus its renderer. This module must not import kfchaos.spec.
Field names are snake_case like the rest of the experiment format; renderers map them to the Chaos Mesh
CRD's camelCase fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from kfchaos.faults import admission
from kfchaos.types import Duration, Percent, StrictModel

Direction = Literal["to", "from", "both"]
HttpTarget = Literal["Request", "Response"]
_SIZE = re.compile(r"^\d+(\.\d+)?(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB|%)$")


def _size(value: str) -> str:
    if not _SIZE.match(value):
        raise ValueError(f"size {value!r} must be a number with a unit (B, KB, MB, GB, KiB, MiB, GiB) or a percentage")
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
        # Chaos Mesh's webhook rule (kfchaos.faults.admission): from/both need the other side.
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


class StressMemoryParams(StrictModel):
    size: Size = Field(description="memory to take per worker: 256MB, 1GiB or a share of the limit such as 80%")
    workers: int = Field(1, ge=1, le=64)
    oom_score_adj: int = Field(0, ge=-1000, le=1000)


class StressCpuParams(StrictModel):
    workers: int = Field(1, ge=1, le=64)
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


class TimeOffsetParams(StrictModel):
    offset: str = Field(description="Go duration, may be negative: -5m, 1h")
    clock_ids: list[str] = Field(default_factory=lambda: ["CLOCK_REALTIME"])

    @field_validator("offset")
    @classmethod
    def _offset(cls, value: str) -> str:
        from kfchaos.units import parse_duration

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


class LongContextBurstParams(StrictModel):
    """Traffic-side fault: k concurrent requests with m-token contexts, swelling the KV cache."""

    requests: int = Field(ge=1, le=10_000, description="concurrent long-context requests per burst")
    context_tokens: int = Field(ge=1, le=2_000_000)
    max_tokens: int = Field(256, ge=1, le=100_000)
    start: Duration = Field(0.0, description="offset into each active stage when the first burst starts")
    every: Duration | None = Field(None, description="repeat the burst at this interval within the stage")


# ---------------------------------------------------------------- serving-chain faults (traffic side)
# Sizes are bounded by kfchaos.traffic.bounds (prompt bytes, requests at once); the generators live in
# kfchaos.traffic.faults_chain.

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
        from kfchaos.traffic import bounds

        if self.max_tokens >= self.max_model_len:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be below max_model_len ({self.max_model_len})")
        # Word prompts take 4 bytes a token (kfchaos.traffic.faults_chain); text prompts up to 4 bytes a character.
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


class BatchShockParams(StrictModel):
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
        from kfchaos.traffic import bounds

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


class PrefixCacheThrashParams(StrictModel):
    """Traffic-side fault: requests whose long shared prefixes rotate faster than the prefix cache keeps them."""

    prefixes: int = Field(ge=2, le=100_000, description="distinct shared prefixes, taken in turn")
    prefix_tokens: int = Field(ge=16, description="length of each shared prefix in tokens")
    rate: float = Field(gt=0, le=10_000, description="requests per second the fault adds")
    max_tokens: int = Field(16, ge=1, le=100_000)
    start: Duration = Field(0.0, description="offset into each active stage when the rotation starts")
    hold: Duration | None = Field(None, description="how long it lasts; default: to the end of the stage")

    @model_validator(mode="after")
    def _bounded(self) -> PrefixCacheThrashParams:
        from kfchaos.traffic import bounds

        if 4 * self.prefix_tokens > bounds.MAX_FAULT_PROMPT_BYTES:
            raise ValueError(
                f"prefix_tokens {self.prefix_tokens} would take over {bounds.MAX_FAULT_PROMPT_BYTES} bytes"
            )
        return self


PARAMS_BY_TYPE: dict[str, type[StrictModel]] = {
    "pod-kill": PodKillParams,
    "pod-failure": NoParams,
    "container-kill": NoParams,
    "network-delay": NetworkDelayParams,
    "network-loss": NetworkLossParams,
    "network-duplicate": NetworkDuplicateParams,
    "network-corrupt": NetworkCorruptParams,
    "network-bandwidth": NetworkBandwidthParams,
    "network-partition": NetworkPartitionParams,
    "stress-memory": StressMemoryParams,
    "stress-cpu": StressCpuParams,
    "http-abort": HttpAbortParams,
    "http-delay": HttpDelayParams,
    "http-replace": HttpReplaceParams,
    "io-latency": IoLatencyParams,
    "io-fault": IoFaultParams,
    "io-attr-override": IoAttrOverrideParams,
    "time-offset": TimeOffsetParams,
    "dns-error": DnsParams,
    "dns-random": DnsParams,
    "gpu-memory-pressure": GpuMemoryPressureParams,
    "long-context-burst": LongContextBurstParams,
    "tokenizer-stress": TokenizerStressParams,
    "batch-shock": BatchShockParams,
    "prefix-cache-thrash": PrefixCacheThrashParams,
}

# Types whose params are all optional: `params` may be left out.
PARAMS_OPTIONAL = {"pod-kill", "pod-failure", "container-kill", "stress-cpu"}

# Faults the load generator performs itself; they create no cluster object.
TRAFFIC_SIDE_TYPES = {"long-context-burst", "tokenizer-stress", "batch-shock", "prefix-cache-thrash"}
