"""The experiment format: chaos as code, one YAML file per experiment in Git.

The model (`Experiment`) and its own checks: `model_problems(document)` lists every problem as
FILE:LINE: field.path: message. Validation is strict (unknown fields are errors) and safety rules that
can be decided from the file alone (protected namespaces, empty selectors, fault durations, stages) are
enforced here, before anything can reach a cluster. Loading a file (`load_experiment`), with the checks that
need the renderer and the safety guards as well, is kfchaos.validate: the one validator above both.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import re
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    BeforeValidator,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from kfchaos.errors import Path, Problem
from kfchaos.faultspec.admission import mode_value_problem
from kfchaos.faultspec.kinds import PARAMS_BY_TYPE, PARAMS_OPTIONAL, TRAFFIC_SIDE_TYPES
from kfchaos.types import DnsLabel, Duration, Percent, StrictModel, check_label
from kfchaos.units import parse_duration, parse_percent
from kfchaos.yamlsource import YamlDocument

API_VERSION = "kfchaos.io/v1alpha1"
DEFAULT_STAGES = (10, 30, 60, 90, 100)
MAX_SHARDS = 32  # spec.traffic.shards (TrafficSpec.shards says why)
DEFAULT_PROTECTED_NAMESPACES = (
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "kubeflow",
    "chaos-mesh",
    "istio-system",
    "cert-manager",
)
DEFAULT_MAX_POD_PERCENT = 0.5
DEFAULT_WAIT_FOR_TARGET = 7200.0
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$")


def _context(info: ValidationInfo) -> dict[str, Any]:
    return info.context if isinstance(info.context, dict) else {}


def _refuse_protected(namespace: str, info: ValidationInfo) -> str:
    protected = _context(info).get("protected_namespaces", DEFAULT_PROTECTED_NAMESPACES)
    if namespace in protected:
        raise ValueError(
            f"namespace {namespace!r} is protected (safety.protected_namespaces); chaos is never injected there"
        )
    return namespace


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        check_label(key, value)
    return labels


# ---------------------------------------------------------------- metadata


class Metadata(StrictModel):
    name: DnsLabel = Field(description="Experiment name; also the pipeline name and a Kubernetes label value")
    version: str = Field(description="Semantic version of the experiment; bump it when the experiment changes")
    owner: str = Field(min_length=1, description="Team or person on call for this experiment")
    description: str = ""
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("version")
    @classmethod
    def _semver(cls, value: str) -> str:
        if not _SEMVER.match(value):
            raise ValueError(f"version {value!r} must be a semantic version such as 1.0.0")
        return value

    _labels = field_validator("labels")(classmethod(lambda cls, v: _check_labels(v)))


# ---------------------------------------------------------------- target


class LabelExpression(StrictModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelExpression:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class Selector(StrictModel):
    """Which pods: labels (and optional set expressions) in one namespace. An empty selector would hit every pod."""

    labels: dict[str, str] = Field(default_factory=dict)
    expressions: list[LabelExpression] = Field(default_factory=list)

    _labels = field_validator("labels")(classmethod(lambda cls, v: _check_labels(v)))

    @model_validator(mode="after")
    def _not_empty(self) -> Selector:
        if not self.labels and not self.expressions:
            raise ValueError("empty selector refused: it would select every pod in the namespace; give labels")
        return self


class Dependency(StrictModel):
    name: DnsLabel
    url: str | None = Field(None, description="HTTP endpoint to probe during the run")
    latency_query: str | None = Field(None, description="PromQL giving this dependency's P99 latency in seconds")


class Auth(StrictModel):
    """Target credentials come from an environment variable (a Kubernetes Secret in the cluster), never the file."""

    type: Literal["bearer", "header"] = "bearer"
    env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="environment variable holding the secret")
    header: str = "Authorization"


# A base URL the replayer can send to: scheme http or https, a host, an optional path.
ENDPOINT_PATTERN = r"^https?://[^\s/]+(/\S*)?$"


def endpoint_problem(url: str) -> str | None:
    """Why `url` is not a base URL to send to, in plain words with the fix; None when it is one. The one rule for
    spec.target.endpoint and every --target."""
    if re.match(ENDPOINT_PATTERN, url):
        return None
    if "://" not in url:
        return f"{url!r} has no scheme: give a URL, e.g. http://{url.strip() or '127.0.0.1:8000'}"
    return f"{url!r} is not an http:// or https:// URL with a host (e.g. http://127.0.0.1:8000), without spaces"


def _endpoint(url: str) -> str:
    problem = endpoint_problem(url)
    if problem:
        raise ValueError(problem)
    return url


class Target(StrictModel):
    namespace: DnsLabel
    selector: Selector
    # The pattern is in the JSON Schema for editors; the check itself is endpoint_problem, which says the fix.
    endpoint: str = Field(json_schema_extra={"pattern": ENDPOINT_PATTERN}, description="base URL the replay sends to")
    api: Literal["http", "openai-completions", "openai-chat"] = "http"
    model: str | None = Field(None, description="model name for OpenAI-compatible APIs")
    timeout: Duration = 30.0
    auth: Auth | None = None
    dependencies: list[Dependency] = Field(default_factory=list)

    _protected = field_validator("namespace")(classmethod(lambda cls, v, info: _refuse_protected(v, info)))
    _url = field_validator("endpoint")(classmethod(lambda cls, v: _endpoint(v)))

    @model_validator(mode="after")
    def _model_for_llm(self) -> Target:
        if self.api != "http" and not self.model:
            raise ValueError(f"api {self.api} needs target.model (the model name sent in each request)")
        return self


# ---------------------------------------------------------------- traffic


class TokenLengths(StrictModel):
    distribution: Literal["fixed", "uniform", "normal", "lognormal", "empirical"] = "lognormal"
    mean: float = Field(gt=0)
    stddev: float = Field(0.0, ge=0)
    min: int = Field(1, ge=1)
    max: int = Field(32768, ge=1)
    quantiles: list[Annotated[float, Field(ge=0, le=2**31 - 1)]] = Field(
        default_factory=list,
        max_length=1001,
        description="empirical: lengths at evenly spaced quantiles from 0 to 1 (as `kfchaos traffic fit` writes)",
    )

    @model_validator(mode="after")
    def _bounds(self) -> TokenLengths:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        if self.distribution == "empirical":
            if len(self.quantiles) < 2:
                raise ValueError("distribution empirical needs at least 2 quantiles (lengths at 0 % ... 100 %)")
            if any(b < a for a, b in itertools.pairwise(self.quantiles)):
                raise ValueError("quantiles must not decrease")
        return self


class SystemPrompts(StrictModel):
    """A small set of long system prompts shared by many conversations (inference-perf's shared_prefix
    `num_groups` x `system_prompt_len`, guidellm's `prefix_buckets`)."""

    count: int = Field(4, ge=1, le=10_000, description="distinct system prompts")
    tokens: TokenLengths = TokenLengths(distribution="fixed", mean=1024)
    share: Percent = Field(1.0, description="share of conversations that start with one")


class Conversations(StrictModel):
    """Multi-turn chats: turn k's prompt is the system prompt, turns 1..k-1 (question and answer) and a new question."""

    turns: TokenLengths = TokenLengths(distribution="fixed", mean=1, max=1000)
    think_time: Duration = Field(30.0, description="mean gap between a conversation's turns (exponential)")
    max_context_tokens: int = Field(
        32768, ge=1, description="older turns drop out of the history beyond this (as chat front-ends trim)"
    )

    @field_validator("turns")
    @classmethod
    def _turns_bounded(cls, turns: TokenLengths) -> TokenLengths:
        if turns.max > 1000:
            raise ValueError("turns.max must be at most 1000 (a conversation's history is built per request)")
        return turns

    @field_validator("think_time")
    @classmethod
    def _think(cls, value: float) -> float:
        if not 0 < value <= 86400:
            raise ValueError("think_time must be above zero and at most 24h")
        return value


class Tenant(StrictModel):
    """One tenant of the mix: its share of conversations, the model name (a LoRA adapter in vLLM) it sends,
    and optionally its own system prompts and lengths (inference-perf's `load.lora_traffic_split`)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
    weight: float = Field(gt=0, le=1_000_000)
    model: str | None = Field(
        None, description="model name sent in its requests (a LoRA adapter name); default target.model"
    )
    system_prompts: SystemPrompts | None = None
    prompt_tokens: TokenLengths | None = None
    output_tokens: TokenLengths | None = None


class Synthetic(StrictModel):
    rate: float | None = Field(
        None, gt=0, le=1_000_000, description="requests per second at 100 % (default with fit_from: the recorded rate)"
    )
    arrival: Literal["poisson", "gamma", "constant", "recorded"] = "poisson"
    burstiness: float = Field(1.0, gt=0, description="gamma shape; below 1 is burstier than Poisson")
    daily_shape: bool = Field(False, description="modulate the rate by a daily curve (peak in the afternoon)")
    prompt_tokens: TokenLengths = TokenLengths(mean=512, stddev=256)
    output_tokens: TokenLengths = TokenLengths(mean=128, stddev=64)
    long_context_share: Percent = 0.0
    long_context_tokens: int = Field(32768, ge=1)
    path: str = "/"
    fit_from: str | None = Field(
        None, description="a recording (relative to the experiment file) to fit lengths, rate and arrivals from"
    )
    fit_format: Literal["jsonl", "sharegpt"] = "jsonl"
    fit_lengths: Literal["empirical", "lognormal"] = Field("empirical", description="which fit of the lengths to use")
    conversations: Conversations | None = None
    system_prompts: SystemPrompts | None = None
    tenants: list[Tenant] = Field(default_factory=list, max_length=1000)
    tenant_header: str = Field("X-Tenant", pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

    @model_validator(mode="after")
    def _sources(self) -> Synthetic:
        if self.rate is None and self.fit_from is None:
            raise ValueError("give rate (requests per second at 100 %), or fit_from to take the recorded rate")
        if self.arrival == "recorded" and (self.fit_from is None or self.fit_format != "jsonl"):
            raise ValueError("arrival recorded resamples the gaps of fit_from, a jsonl recording (with timestamps)")
        if self.rate is None and self.fit_format != "jsonl":
            raise ValueError("a sharegpt prompt set has no times: give rate")
        names = [t.name for t in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError("tenant names must be unique")
        return self

    @property
    def realistic(self) -> bool:
        """Whether the workload generator (kfchaos.traffic.workload) makes these requests, not the plain one."""
        return bool(
            self.conversations or self.system_prompts or self.tenants or self.fit_from or self.arrival == "recorded"
        )


def _credential_names(value: Any) -> Any:
    """allow_credentials names the recorded credential headers to keep; `false` (the old form) keeps none, and `true`
    (the old form, every credential the recording holds) is refused: the names say what is sent."""
    if value is False or value is None:
        return []
    if value is True:
        raise ValueError(
            "name the recorded credential headers to keep, e.g. [Authorization]: `true` would send every "
            "credential the recording holds"
        )
    if isinstance(value, list):
        for name in value:
            if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
    return value


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an RFC 9110 token


class Headers(StrictModel):
    add: dict[str, str] = Field(default_factory=dict)
    strip: list[str] = Field(default_factory=list)
    allow_credentials: Annotated[list[str], BeforeValidator(_credential_names)] = Field(
        default_factory=list,
        description="recorded credential headers to keep, by name (Authorization, Cookie, an API key's header...); "
        "every other one is dropped",
    )


class Traffic(StrictModel):
    file: str | None = Field(None, description="recorded traffic, relative to the experiment file")
    format: Literal["jsonl", "nginx", "envoy", "gor", "sharegpt"] = "jsonl"
    synthetic: Synthetic | None = None
    stages: list[Annotated[int, Field(ge=1, le=100)]] = Field(
        default_factory=lambda: list(DEFAULT_STAGES), min_length=1, description="percent of the recorded rate"
    )
    stage_duration: Duration = 1200.0
    warmup: Duration = 60.0
    seed: int = Field(0, ge=0)
    rate_scale: float = Field(1.0, gt=0, le=1000)
    speed: float = Field(1.0, gt=0, le=1000, description="time compression of the recording")
    loop: bool = Field(True, description="start the recording again when a stage is longer than it")
    concurrency_limit: int = Field(10_000, ge=1)
    max_send_lag_p99: Duration = Field(0.050, description="replayer behind schedule beyond this -> stage INVALID")
    headers: Headers = Headers()
    # Fleet scale (issue 15 §4): each stage replays in this many parallel pods (`--shard i/n`, hash partition),
    # all sending on one schedule that starts `shard_start_lead` after the stage's start task (kfchaos.steps
    # .shards). 1 keeps one replay task per stage. `concurrency_limit` bounds each shard's process.
    # At most MAX_SHARDS: the fan-out is one task per shard per stage in the compiled pipeline (kfchaos.kfp.
    # pipelines.chaos_experiment), about 22 KB of IR per shard over the 5-stage ramp (777 KB at 32), and the Workflow
    # KFP's server makes of it is one Kubernetes object, which etcd holds to 1.5 MiB by default. Where between 32 and
    # the old cap of 256 that breaks was not measured: a guess kept on the safe side.
    shards: int = Field(1, ge=1, le=MAX_SHARDS, description="parallel replay pods per stage (one task a shard)")
    shard_start_lead: Duration = Field(60.0, description="time for the shard pods to start before the stage starts")

    @field_validator("stages")
    @classmethod
    def _increasing(cls, stages: list[int]) -> list[int]:
        if any(b <= a for a, b in itertools.pairwise(stages)):
            raise ValueError(f"stages must be strictly increasing percentages, got {stages}")
        return stages

    @field_validator("stage_duration")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("stage_duration must be longer than zero")
        return value

    @field_validator("shard_start_lead")
    @classmethod
    def _lead(cls, value: float) -> float:
        if not 0 < value <= 3600:
            raise ValueError("shard_start_lead must be longer than zero and at most 1h")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Traffic:
        if (self.file is None) == (self.synthetic is None):
            raise ValueError("give exactly one traffic source: file (a recording) or synthetic")
        return self


# ---------------------------------------------------------------- faults

FaultMode = Literal["one", "all", "fixed", "fixed-percent", "random-max-percent"]


class FaultBase(StrictModel):
    if TYPE_CHECKING:  # set per catalog type by _fault_model
        type: str
        params: StrictModel

    name: DnsLabel = Field(description="unique within the experiment; part of the Chaos Mesh object name")
    selector: Selector | None = Field(None, description="default: the target's selector")
    namespace: DnsLabel | None = Field(None, description="default: the target's namespace")
    mode: FaultMode = "one"
    value: str | None = Field(None, description="count for fixed, percent for the percent modes")
    containers: list[str] = Field(default_factory=list)
    duration: Duration | None = Field(None, description="default: the span of the stages it is active in")
    stages: list[int] | None = Field(None, description="stage percents during which it is active; default all")

    _protected = field_validator("namespace")(
        classmethod(lambda cls, v, info: v if v is None else _refuse_protected(v, info))
    )

    @field_validator("duration")
    @classmethod
    def _within_safety(cls, value: float | None, info: ValidationInfo) -> float | None:
        limit = _context(info).get("max_fault_duration")
        if value is not None and value <= 0:
            raise ValueError("duration must be longer than zero")
        if value is not None and limit is not None and value > limit:
            raise ValueError(f"duration exceeds safety.max_fault_duration ({limit:g}s); shorten it or raise the limit")
        return value

    @field_validator("stages")
    @classmethod
    def _known_stages(cls, value: list[int] | None, info: ValidationInfo) -> list[int] | None:
        known = _context(info).get("stages")
        if value is not None and known is not None:
            unknown = [s for s in value if s not in known]
            if unknown:
                raise ValueError(f"stages {unknown} are not among traffic.stages {list(known)}")
        if value is not None and not value:
            raise ValueError("stages must not be empty; leave it out for all stages")
        return value

    @model_validator(mode="after")
    def _mode_value(self, info: ValidationInfo) -> FaultBase:
        # Without a context (an Experiment built in code) the default limit holds, never a laxer one.
        max_percent = _context(info).get("max_pod_percent", DEFAULT_MAX_POD_PERCENT)
        if self.mode in ("one", "all"):
            if self.value is not None:
                raise ValueError(f"mode {self.mode} takes no value")
            if self.mode == "all" and max_percent < 1.0:
                raise ValueError(
                    f"mode all exceeds safety.max_pod_percent ({max_percent * 100:g}%); "
                    "use fixed-percent or raise the limit"
                )
            return self
        # Chaos Mesh's webhook parses the value with strconv.Atoi (kfchaos.faultspec.admission).
        problem = mode_value_problem(self.mode, self.value)
        if problem:
            raise ValueError(problem)
        assert self.value is not None
        if self.mode != "fixed" and int(self.value) / 100 > max_percent:
            raise ValueError(f"value {self.value}% exceeds safety.max_pod_percent ({max_percent * 100:g}%)")
        return self

    @property
    def cluster_side(self) -> bool:
        """Whether this fault becomes a cluster object (Chaos Mesh or a GPU pod) rather than traffic."""
        return getattr(self, "type", "") not in TRAFFIC_SIDE_TYPES


def _fault_model(fault_type: str, params_model: type[StrictModel]) -> type[FaultBase]:
    name = "".join(part.capitalize() for part in fault_type.split("-")) + "Fault"
    params_field: Any = (
        (params_model, Field(default_factory=params_model)) if fault_type in PARAMS_OPTIONAL else (params_model, ...)
    )
    tag: Any = Literal[fault_type]
    model: type[FaultBase] = create_model(name, __base__=FaultBase, type=(tag, ...), params=params_field)
    return model


FAULT_MODELS: dict[str, type[FaultBase]] = {t: _fault_model(t, m) for t, m in PARAMS_BY_TYPE.items()}
if TYPE_CHECKING:
    Fault = FaultBase
else:
    Fault = Annotated[Union[tuple(FAULT_MODELS.values())], Field(discriminator="type")]  # noqa: UP007


# ---------------------------------------------------------------- SLOs, abort rules


class Slo(StrictModel):
    p99_drift_max: Percent = Field(0.15, description="P99 latency drift allowed against the baseline P99")
    p99_max: Duration | None = 0.200
    error_rate_max: Percent = 0.005
    timeout_rate_max: Percent = 0.01
    oom_kill_rate_max: Percent = Field(0.00001, description="OOM kills per request served")
    ttft_p99_max: Duration | None = None
    itl_p99_max: Duration | None = None
    tpot_p99_max: Duration | None = None
    min_samples: int = Field(300, ge=1, description="fewer requests than this in a stage -> INCONCLUSIVE")
    confidence: Percent = Field(0.95, description="confidence level of the intervals")
    recovery_max: Duration | None = Field(None, description="longest acceptable time until SLOs hold again")
    excluded_statuses: list[Annotated[int, Field(ge=400, le=599)]] = Field(
        default_factory=list,
        max_length=200,
        description="HTTP statuses (400-599) neither success nor error: out of every rate and latency sample; "
        "by default every status >= 400, 429 and 503 included, is an error (docs/verdict.md, Accounting)",
    )

    @field_validator("confidence")
    @classmethod
    def _sane_confidence(cls, value: float) -> float:
        if not 0.5 <= value < 1:
            raise ValueError("confidence must be at least 50% and below 100%")
        return value


AbortMetric = Literal["timeout_rate", "error_rate", "p99_latency", "ttft_p99", "dependency_p99", "oom_kills"]
_RATE_METRICS = {"timeout_rate", "error_rate"}


class AbortRule(StrictModel):
    """Stop the ramp when `metric` is above `above` in `consecutive` windows of length `window`."""

    metric: AbortMetric
    above: str = Field(description="a percentage for rates, a duration for latencies, a count for oom_kills")
    window: Duration = 30.0
    consecutive: int = Field(1, ge=1)
    dependency: str | None = Field(None, description="for dependency_p99: a dependency name or 'any'")

    @model_validator(mode="after")
    def _threshold_kind(self) -> AbortRule:
        if self.metric in _RATE_METRICS:
            parse_percent(self.above)
        elif self.metric == "oom_kills":
            if not self.above.isdigit():
                raise ValueError(f"above {self.above!r} must be a whole number of OOM kills")
        else:
            parse_duration(self.above)
        if self.metric == "dependency_p99" and not self.dependency:
            raise ValueError("metric dependency_p99 needs dependency (a name from target.dependencies, or any)")
        if self.metric != "dependency_p99" and self.dependency:
            raise ValueError("dependency applies only to metric dependency_p99")
        return self

    @property
    def threshold(self) -> float:
        """The threshold as a number: a fraction, seconds, or a count."""
        if self.metric in _RATE_METRICS:
            return parse_percent(self.above)
        if self.metric == "oom_kills":
            return float(self.above)
        return parse_duration(self.above)


# ---------------------------------------------------------------- baseline, safety, schedule


class TimeWindow(StrictModel):
    start: str = Field(description="RFC 3339 time, e.g. 2026-11-30T14:00:00Z")
    end: str

    @model_validator(mode="after")
    def _ordered(self) -> TimeWindow:
        from datetime import datetime

        try:
            start = datetime.fromisoformat(self.start.replace("Z", "+00:00"))
            end = datetime.fromisoformat(self.end.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"times must be RFC 3339 ({exc})") from None
        if start.tzinfo is None or end.tzinfo is None:
            raise ValueError("times need a time zone (Z or +01:00): a bare time is ambiguous")
        if end <= start:
            raise ValueError("end must be after start")
        return self


class Capture(StrictModel):
    prometheus: str = Field(pattern=r"^https?://\S+$")
    days: int = Field(7, ge=1, le=90, description="at least 7 unless short_history says why")
    short_history: str | None = Field(
        None,
        min_length=1,
        description="why fewer than 7 days (or less history than asked) will do: recorded in the "
        "baseline and shown in every verdict that uses it",
    )
    end: str | None = Field(None, description="RFC 3339; default: now")
    step: Duration = 60.0
    release_windows: list[TimeWindow] = Field(default_factory=list)
    release_margin: Duration = 1800.0
    detect_releases: bool = Field(
        True,
        description="exclude the releases the cluster's series show: a Deployment generation change, a new "
        "image id, a new ReplicaSet (kfchaos.metrics.releases)",
    )

    @model_validator(mode="after")
    def _a_week(self) -> Capture:
        if self.days < 7 and not self.short_history:
            raise ValueError(
                f"days {self.days}: a baseline stands for at least 7 days of production, releases excluded; "
                "give short_history with the reason to accept fewer (it is recorded in the baseline and shown "
                "in every verdict that uses it)"
            )
        return self


class BaselineSource(StrictModel):
    file: str | None = Field(None, description="the baseline file, relative to the experiment file")
    capture: Capture | None = None

    @model_validator(mode="after")
    def _some_source(self) -> BaselineSource:
        if self.file is None and self.capture is None:
            raise ValueError("give baseline.file, baseline.capture, or both (capture then writes the file)")
        return self


class Safety(StrictModel):
    protected_namespaces: list[str] = Field(default_factory=lambda: list(DEFAULT_PROTECTED_NAMESPACES))
    max_fault_duration: Duration = Field(7200.0, description="no fault object lives longer than this")
    max_pod_percent: Percent = Field(
        DEFAULT_MAX_POD_PERCENT, description="largest share of matching pods a fault may hit"
    )
    dry_run: bool = Field(False, description="validate everything server-side, inject nothing")
    # A run queued behind one run of the default shape (five 20-minute stages, a warm-up and a recovery probe:
    # under two hours) gets its turn; one queued behind more gives up rather than hold a nightly slot or a
    # pull-request gate for hours (docs/running-on-a-cluster.md, "Runs that share a target").
    wait_for_target: Duration = Field(
        DEFAULT_WAIT_FOR_TARGET,
        description="how long a run queues for its target while another run holds it; then it ends INCONCLUSIVE "
        "'target busy' having touched nothing (0s: do not queue)",
    )


class EvidenceOptions(StrictModel):
    """The OOM evidence bundle (docs/verdict.md "The OOM evidence bundle"): what it may do beyond reading."""

    exec_nvidia_smi: bool = Field(
        False,
        description="run `nvidia-smi --query-compute-apps` in the serving pod after an OOM (needs create pods/exec: "
        "manifests/optional/evidence-exec.yaml)",
    )
    log_tail_lines: int = Field(
        200, ge=0, le=5000, description="lines of the killed container's previous log kept (needs get pods/log)"
    )


class Schedule(StrictModel):
    cron: str = Field(description="6 fields, seconds first, as KFP's backend reads it: '0 0 2 * * *'")
    enabled: bool = True

    @field_validator("cron")
    @classmethod
    def _six_fields(cls, value: str) -> str:
        if value.startswith("@"):
            return value
        fields = value.split()
        if len(fields) == 5:
            raise ValueError(
                f"cron {value!r} has 5 fields; KFP reads 6 with seconds first, so it would run at the wrong "
                f"times. Write '0 {value}'"
            )
        if len(fields) != 6:
            raise ValueError(f"cron {value!r} must have 6 fields (seconds minutes hours day month weekday)")
        return value


# ---------------------------------------------------------------- experiment


class ExperimentSpec(StrictModel):
    target: Target
    traffic: Traffic
    faults: list[Fault] = Field(default_factory=list)
    slo: Slo = Slo()
    abort: list[AbortRule] = Field(default_factory=list)
    baseline: BaselineSource
    safety: Safety = Safety()
    evidence: EvidenceOptions = EvidenceOptions()
    # Schedules have one place: manifests/schedules.yaml (`kfchaos schedule sync`). The key is still
    # recognised so that an old experiment gets this message instead of a bare "unknown field".
    schedule: None = Field(None, description="not here: recurring runs live in manifests/schedules.yaml")

    @field_validator("schedule", mode="before")
    @classmethod
    def _schedule_lives_elsewhere(cls, value: object) -> None:
        if value is not None:
            raise ValueError(
                "schedules live in one place, manifests/schedules.yaml (applied by `kfchaos schedule sync`); "
                "move this cron there and remove spec.schedule"
            )
        return None

    @model_validator(mode="after")
    def _cross_checks(self) -> ExperimentSpec:
        names = [f.name for f in self.faults]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"fault names must be unique; repeated: {', '.join(duplicates)}")
        deps = {d.name for d in self.target.dependencies}
        for rule in self.abort:
            if rule.dependency not in (None, "any") and rule.dependency not in deps:
                raise ValueError(f"abort rule names dependency {rule.dependency!r}, not in target.dependencies")
        return self


class Experiment(StrictModel):
    apiVersion: Literal["kfchaos.io/v1alpha1"]
    kind: Literal["Experiment"]
    metadata: Metadata
    spec: ExperimentSpec

    def fault_namespace(self, fault: FaultBase) -> str:
        return fault.namespace or self.spec.target.namespace

    def fault_selector(self, fault: FaultBase) -> Selector:
        return fault.selector or self.spec.target.selector

    def fault_stages(self, fault: FaultBase) -> list[int]:
        return list(fault.stages) if fault.stages is not None else list(self.spec.traffic.stages)


# ---------------------------------------------------------------- loading


def _lenient_context(data: Any) -> dict[str, Any]:
    """Settings that validators of other sections need, read leniently so one bad value reports once."""
    context: dict[str, Any] = {}
    spec = data.get("spec") if isinstance(data, dict) else None
    if not isinstance(spec, dict):
        return context
    safety = spec.get("safety")
    if isinstance(safety, dict):
        protected = safety.get("protected_namespaces")
        if isinstance(protected, list) and all(isinstance(n, str) for n in protected):
            context["protected_namespaces"] = tuple(protected)
        for key, parse in (("max_fault_duration", parse_duration), ("max_pod_percent", parse_percent)):
            if key in safety:
                with contextlib.suppress(ValueError):
                    context[key] = parse(safety[key])
    context.setdefault("max_fault_duration", 7200.0)
    traffic = spec.get("traffic")
    if isinstance(traffic, dict):
        stages = traffic.get("stages", list(DEFAULT_STAGES))
        if isinstance(stages, list) and all(isinstance(s, int) for s in stages):
            context["stages"] = tuple(stages)
    return context


def _clean_loc(loc: tuple[str | int, ...]) -> Path:
    """Drop pydantic's union-tag and validator-internal segments so the path matches the YAML."""
    out: list[str | int] = []
    for index, part in enumerate(loc):
        previous = loc[index - 1] if index else None
        if isinstance(part, str) and part in FAULT_MODELS and isinstance(previous, int):
            continue
        if isinstance(part, str) and part.startswith(("function-", "constrained-", "lax-", "json-or-python")):
            continue
        out.append(part)
    return tuple(out)


def _message(error: Any) -> str:
    kind = error["type"]
    message = str(error["msg"])
    if kind == "extra_forbidden":
        return "unknown field (not part of the experiment format; check the spelling)"
    if kind == "missing":
        return "required field is missing"
    if kind == "union_tag_invalid":
        known = ", ".join(sorted(FAULT_MODELS))
        return f"unknown fault type {error['input'].get('type')!r}; known types: {known}"
    if kind == "union_tag_not_found":
        return "fault needs a type"
    return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def model_problems(document: YamlDocument) -> tuple[Experiment | None, list[Problem]]:
    """The experiment as the model reads it, or every problem the model finds, in file order. The checks that
    need the renderer and the safety guards (kfchaos.faults) are kfchaos.validate's, which builds on this."""
    data = document.data
    if not isinstance(data, dict):
        kind = type(data).__name__ if data is not None else "null"
        return None, [document.problem((), f"expected a mapping (an Experiment document), got {kind}")]
    try:
        experiment = Experiment.model_validate(data, context=_lenient_context(data))
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            path = _clean_loc(error["loc"])
            problems.append(document.problem(path, _message(error)))
        unique = list(dict.fromkeys(problems))
        return None, sorted(unique, key=lambda p: p.line)
    return experiment, []


def experiment_relative(experiment_file: str | FsPath, value: str) -> FsPath:
    """The one rule for every path written in an experiment (traffic.file, traffic.synthetic.fit_from,
    baseline.file): as written when absolute, else relative to the folder that holds the experiment file --
    never to the current directory or the repository root, so a file means the same from wherever it is run."""
    path = FsPath(value)
    return path if path.is_absolute() else FsPath(experiment_file).parent / path


def baseline_path(experiment_file: str | FsPath, experiment: Experiment) -> FsPath | None:
    """Where spec.baseline.file lies (experiment_relative), or None when the experiment names none."""
    name = experiment.spec.baseline.file
    return experiment_relative(experiment_file, name) if name else None


def experiment_hash(path: str | FsPath) -> str:
    """sha256 of the file's bytes: what the audit record and the pipeline version pin."""
    return "sha256:" + hashlib.sha256(FsPath(path).read_bytes()).hexdigest()


def json_schema() -> dict[str, Any]:
    """JSON Schema of the experiment format, for editors (YAML language server) and `kfchaos schema`."""
    schema = TypeAdapter(Experiment).json_schema(mode="validation")
    _defaults_as_written(schema)
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    schema["$id"] = "https://kfchaos.io/schema/experiment-v1alpha1.json"
    schema["title"] = "kfchaos Experiment"
    return schema


def _defaults_as_written(node: Any) -> None:
    """Write defaults of duration and percent fields as a user would (`20m`, `0.5%`), not as the floats the
    model holds (`1200.0`, `0.005`): a default must satisfy its own field's pattern, or editors flag it."""
    from kfchaos.types import DURATION_PATTERN, PERCENT_PATTERN
    from kfchaos.units import format_duration, format_percent

    if isinstance(node, list):
        for item in node:
            _defaults_as_written(item)
        return
    if not isinstance(node, dict):
        return
    default = node.get("default")
    if isinstance(default, int | float) and not isinstance(default, bool):
        patterns = {node.get("pattern"), *(o.get("pattern") for o in node.get("anyOf", []) if isinstance(o, dict))}
        if DURATION_PATTERN in patterns:
            node["default"] = format_duration(float(default))
        elif PERCENT_PATTERN in patterns:
            node["default"] = format_percent(float(default))
    for value in node.values():
        _defaults_as_written(value)
