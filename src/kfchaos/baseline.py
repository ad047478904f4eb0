"""The baseline file (baselines/<name>.yaml): what normal looks like, its format and the checks a loaded one passes.

A baseline carries its provenance (server, queries, window, exclusions, step, captured_at) and a content
hash over everything else, so an edited file is refused and an old one is flagged -- never used silently.
`load_baseline()` checks it; kfchaos.baselinecapture produces one from Prometheus.

The model is apart from the capture so that what only reads a baseline (the verdict and the report and audit
above it, the control, the run folder, the steps) does not pull in the metrics client: this module imports the
experiment model and the file helpers only, and sits in the model layer just above `spec` (docs/architecture.md).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from kfchaos import safefile
from kfchaos.errors import KfchaosError, SpecError
from kfchaos.spec import Experiment
from kfchaos.types import StrictModel as _StrictModel
from kfchaos.yamlsource import load_yaml, read_source


class StrictModel(_StrictModel):
    """Every baseline figure is a finite measurement: `.nan` or `.inf` in the file is an input error (issue 13)."""

    model_config = ConfigDict(allow_inf_nan=False)


API_VERSION = "kfchaos.io/v1alpha1"
STALE_AFTER = timedelta(days=30)
# The latency series a baseline summarises (each checked against the sense bounds, at capture and at load).
LATENCY_SERIES = ("latency_p99", "ttft_p99", "itl_p99")


def parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"time {text!r} needs a time zone (Z or +01:00)")
    return value


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class BaselineError(KfchaosError):
    """A baseline file cannot be used: unreadable, invalid, or its content does not match its hash."""


def _rfc3339(value: str) -> str:
    parse_time(value)
    return value


class Exclusion(StrictModel):
    start: str
    end: str
    source: Literal["explicit", "detected"] = "explicit"
    reason: str = ""

    _times = field_validator("start", "end")(classmethod(lambda cls, v: _rfc3339(v)))


class Window(StrictModel):
    start: str
    end: str

    _times = field_validator("start", "end")(classmethod(lambda cls, v: _rfc3339(v)))


class Provenance(StrictModel):
    prometheus: str = Field(description="server the baseline was captured from")
    queries: dict[str, str] = Field(description="PromQL of each series, as sent")
    window: Window
    step: float = Field(gt=0, description="seconds between evaluations")
    release_margin: float = Field(0.0, ge=0, description="seconds excluded on each side of a release window")
    exclusions: list[Exclusion] = Field(default_factory=list)


class SeriesStat(StrictModel):
    """A robust summary of one per-interval series (e.g. the P99 of each 5-minute interval)."""

    median: float
    spread: float = Field(ge=0, description="median absolute deviation x 1.4826 (a robust standard deviation)")
    p10: float
    p90: float
    intervals: int = Field(ge=0, description="intervals the statistic is over, after exclusions")
    unit: str = "s"


class Totals(StrictModel):
    requests: float = Field(ge=0)
    errors: float | None = Field(None, ge=0)
    error_rate: float | None = Field(None, ge=0, le=1)
    oom_kills: float | None = Field(None, ge=0)
    oom_kill_rate: float | None = Field(None, ge=0)


class LatencyHistogram(StrictModel):
    """The bucket bounds of the histogram behind latency_p99, read at capture: what it can resolve."""

    query: str = Field(description="the PromQL that listed the bounds")
    bounds: list[float] = Field(description="finite `le` bounds in seconds, ascending (+Inf left out)")


class ControlStage(StrictModel):
    """One stage rate of the control replay: exact figures from its per-request records."""

    stage: int = Field(ge=1, le=100, description="percent of the recorded rate")
    rate: float = Field(ge=0, description="requests per second planned")
    sent: int = Field(ge=0)
    succeeded: int = Field(ge=0)
    errors: int = Field(ge=0)
    timeouts: int = Field(ge=0)
    samples: int = Field(ge=0, description="latencies behind the quantiles: successes plus timeouts (as +inf)")
    latency_p50: float | None = Field(None, ge=0)
    latency_p99: float | None = Field(None, ge=0, description="exact empirical P99 (inverted CDF), seconds")
    latency_p99_interval: list[float] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="order-statistic interval of the P99 at `confidence`; null with too few samples",
    )
    ttft_p99: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _interval_brackets_the_p99(self) -> ControlStage:
        if self.latency_p99_interval is not None:
            low, high = self.latency_p99_interval
            if not (0 <= low <= high and math.isfinite(high)):
                raise ValueError(f"latency_p99_interval {self.latency_p99_interval}: need 0 <= low <= high, finite")
            if self.latency_p99 is None or not low <= self.latency_p99 <= high:
                raise ValueError("latency_p99 must lie inside latency_p99_interval")
        return self


class ControlBaseline(StrictModel):
    """A fault-free replay of the experiment's traffic at its stage rates by kfchaos's own client: the same
    client, the same traffic and the same latency definition as the run it is compared with."""

    captured_at: str
    target: str = Field(description="endpoint replayed against (credentials stripped)")
    stage_duration: float = Field(gt=0, description="seconds replayed at each stage rate")
    confidence: float = Field(gt=0, lt=1)
    records: str = Field(description="file name of the control's per-request records (Parquet)")
    records_sha256: str = Field(description="sha256 of that file's bytes")
    stages: list[ControlStage]

    _captured = field_validator("captured_at")(classmethod(lambda cls, v: _rfc3339(v)))

    def stage(self, percent: int) -> ControlStage | None:
        return next((s for s in self.stages if s.stage == percent), None)


class SenseBounds(StrictModel):
    """The bounds every value from Prometheus was checked against before this baseline was sealed: a server's
    answer outside them (a latency of 1e300 s, a rate of 3, a point dated 2100) is refused at capture."""

    latency_max_s: float = Field(gt=0, description="no latency beyond the request timeout (spec.target.timeout)")
    latency_min_s: float = Field(0.0, description="no negative latency")
    points_from: str = Field(description="no point before the window's start less one step")
    points_to: str = Field(description="no point after the window's end plus one step")
    rate_max: float = Field(1.0, description="an error rate is a share: [0, 1]")
    count_min: float = Field(0.0, description="request, error and OOM-kill counts are never negative")

    _times = field_validator("points_from", "points_to")(classmethod(lambda cls, v: _rfc3339(v)))


class Coverage(StrictModel):
    """How much production the baseline stands for (docs/verdict.md, "Baseline coverage")."""

    requested_days: int = Field(ge=1, description="capture.days")
    data_from: str = Field(description="first evaluation of the latency series with data in the window")
    data_to: str = Field(description="last one")
    covered_days: float = Field(ge=0, description="days from data_from to data_to (one step added)")
    excluded_s: float = Field(ge=0, description="seconds of that span removed as release windows")
    kept_intervals: int = Field(ge=0, description="latency intervals the statistics are over")
    override: str | None = Field(
        None, description="why fewer than MIN_DAYS days, or less history than asked, were accepted"
    )

    _times = field_validator("data_from", "data_to")(classmethod(lambda cls, v: _rfc3339(v)))


class BaselineScope(StrictModel):
    """Whose production a baseline stands for (docs/verdict.md, "Whose baseline"): the experiment's target as it
    was at capture. A verdict refuses a baseline whose namespace, model or selector is not its experiment's."""

    namespace: str
    model: str | None = Field(None, description="target.model: vLLM's series were kept to it (model_name)")
    selector: dict[str, Any] = Field(default_factory=dict, description="target.selector (labels, expressions)")
    pods: list[str] = Field(default_factory=list, description="the pods kept to (--pod, or the model's)")
    endpoint: str | None = Field(None, description="target.endpoint (for information: one service has many URLs)")

    @classmethod
    def of(cls, experiment: Experiment, pods: Sequence[str] = ()) -> BaselineScope:
        target = experiment.spec.target
        return cls(
            namespace=target.namespace,
            model=target.model,
            selector=target.selector.model_dump(mode="json"),
            pods=list(pods),
            endpoint=target.endpoint,
        )

    def describe(self) -> str:
        labels = ",".join(f"{k}={v}" for k, v in sorted((self.selector.get("labels") or {}).items()))
        model = f", model {self.model!r}" if self.model else ", no model"
        return f"namespace {self.namespace!r}{model}, selector {labels or self.selector}"


def scope_problems(baseline: Baseline, experiment: Experiment) -> list[str]:
    """Why `baseline` is not this experiment's target's (empty when it is). A baseline without a recorded scope
    (captured before kfchaos recorded one) cannot be checked: `scope_warning` says so."""
    problems = []
    if baseline.experiment != experiment.metadata.name:
        problems.append(f"experiment: {baseline.experiment!r} is another experiment than {experiment.metadata.name!r}")
    if baseline.scope is not None:
        here = BaselineScope.of(experiment)
        for field in ("namespace", "model", "selector"):
            if getattr(baseline.scope, field) != getattr(here, field):
                problems.append(
                    f"scope.{field}: captured for {getattr(baseline.scope, field)!r}, the experiment's target has "
                    f"{getattr(here, field)!r}"
                )
    return problems


def scope_warning(baseline: Baseline) -> str | None:
    if baseline.scope is not None:
        return None
    return (
        "baseline scope: not recorded (captured before kfchaos recorded one): whether it is this target's "
        "namespace, model and selector is not checked; capture it again"
    )


class Precision(StrictModel):
    """How many requests the latency intervals rest on (docs/verdict.md, "How sure the baseline is"): each
    interval's P99 is taken from the requests of that interval alone, and a P99 of a few requests is their
    slowest one, not the tail."""

    step: float = Field(gt=0, description="seconds of each interval")
    intervals: int = Field(ge=0, description="kept intervals with a latency P99 and a request count")
    requests_min: float = Field(ge=0, description="requests in the sparsest of them")
    requests_p10: float = Field(ge=0)
    requests_median: float = Field(ge=0, description="requests in the median interval")
    requests_total: float = Field(ge=0)


# Left out of the hash while absent: older files verify.
OPTIONAL_SECTIONS = ("latency_histogram", "control", "sense", "coverage", "scope", "precision")


class Baseline(StrictModel):
    apiVersion: Literal["kfchaos.io/v1alpha1"] = "kfchaos.io/v1alpha1"
    kind: Literal["Baseline"] = "Baseline"
    experiment: str
    captured_at: str
    provenance: Provenance
    series: dict[str, SeriesStat]
    totals: Totals
    warnings: list[str] = Field(default_factory=list, description="caveats found at capture (e.g. wide buckets)")
    latency_histogram: LatencyHistogram | None = None
    control: ControlBaseline | None = Field(None, description="`kfchaos baseline control`: the drift reference")
    sense: SenseBounds | None = Field(None, description="the bounds the captured values were checked against")
    coverage: Coverage | None = None
    scope: BaselineScope | None = Field(None, description="whose production: the target at capture")
    precision: Precision | None = Field(None, description="the requests each latency interval rests on")
    content_hash: str = ""

    _captured = field_validator("captured_at")(classmethod(lambda cls, v: _rfc3339(v)))

    def nonsense(self) -> str | None:
        """Why the figures make no sense, if they do not: latencies negative, out of order or beyond the bound
        the file states; more errors than requests. A hash anyone can recompute proves no sense, so a loaded
        file is checked too, not only a capture."""
        most = self.sense.latency_max_s if self.sense else math.inf
        for name in LATENCY_SERIES:
            stat = self.series.get(name)
            if stat is not None and not 0 <= stat.p10 <= stat.median <= stat.p90 <= most:
                return (
                    f"series.{name}: need 0 <= p10 <= median <= p90 <= {most:g}s (got {stat.p10:g}, "
                    f"{stat.median:g}, {stat.p90:g}): not a latency"
                )
        if self.totals.errors is not None and self.totals.errors > self.totals.requests:
            return f"totals: {self.totals.errors:g} errors out of {self.totals.requests:g} requests: not a rate"
        return None

    def p99(self, name: str = "latency_p99") -> float | None:
        stat = self.series.get(name)
        return stat.median if stat else None

    def computed_hash(self) -> str:
        body = self.model_dump(mode="json", exclude={"content_hash"})
        for section in OPTIONAL_SECTIONS:
            if body.get(section) is None:
                body.pop(section, None)
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()

    def sealed(self) -> Baseline:
        return self.model_copy(update={"content_hash": self.computed_hash()})

    def to_yaml(self) -> str:
        header = (
            f"# Baseline for experiment {self.experiment}, captured {self.captured_at} by `kfchaos baseline capture`.\n"
            "# Do not edit: content_hash covers every field, and an edited file is refused. Capture again instead.\n"
        )
        return header + yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        safefile.write_text(path, self.sealed().to_yaml())
        return path

    def summary(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "captured_at": self.captured_at,
            "prometheus": self.provenance.prometheus,
            "window": self.provenance.window.model_dump(),
            "content_hash": self.content_hash,
            "latency_p99": self.p99(),
            "latency_buckets": self.latency_histogram.bounds if self.latency_histogram else None,
            "coverage": self.coverage.model_dump(mode="json") if self.coverage else None,
            "scope": self.scope.model_dump(mode="json") if self.scope else None,
            "precision": self.precision.model_dump(mode="json") if self.precision else None,
            "control": None
            if self.control is None
            else {
                "captured_at": self.control.captured_at,
                "records_sha256": self.control.records_sha256,
                "stages": [s.model_dump(mode="json") for s in self.control.stages],
            },
        }


def for_experiment(baseline: Baseline, experiment: str, records: str | None = None) -> Baseline:
    """The same figures, sealed as the baseline of `experiment`, its control's records file named `records`. For
    `kfchaos init`: the starter replays the very traffic, ramp and target the demo stack's control was recorded
    with, so these figures are the new experiment's own, and its records get a file of their own."""
    control = baseline.control
    if control is not None and records is not None:
        control = control.model_copy(update={"records": records})
    return baseline.model_copy(update={"experiment": experiment, "control": control}).sealed()


def control_records_beside(baseline: Baseline, path: Path) -> Path | None:
    """The control's records file the baseline at `path` names (a bare file name beside it), if it is there."""
    name = baseline.control.records if baseline.control else ""
    if not name or Path(name).name != name:
        return None  # a bare file name only: never a path out of the baseline's folder
    found = path.parent / name
    return found if found.is_file() else None


def check_control_records(baseline: Baseline, records: Path, baseline_file: Path | str) -> None:
    """Refuse a records file that is not the one the baseline's control measured (control.records_sha256): the
    report would draw another control's requests beside this baseline's figures."""
    if baseline.control is None:
        return
    digest = hashlib.sha256()
    with records.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != baseline.control.records_sha256:
        raise BaselineError(
            f"{records}: sha256 {digest.hexdigest()} is not control.records_sha256 {baseline.control.records_sha256} "
            f"of {baseline_file}: these are another control's records (written over by a later `kfchaos init` or "
            "`kfchaos baseline control`?); record the control again (`kfchaos baseline control`)"
        )


def load_baseline(
    path: str | Path, *, now: datetime | None = None, stale_after: timedelta = STALE_AFTER
) -> tuple[Baseline, list[str]]:
    """The baseline in `path` and warnings (stale). Raises BaselineError or SpecError (file:line: field); also
    BaselineError when the control's records file beside it is not the one it measured (records_sha256)."""
    path = Path(path)
    try:
        raw = read_source(path)
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror or exc}") from None
    document = load_yaml(raw, str(path))
    if not isinstance(document.data, dict):
        raise SpecError([document.problem((), "expected a mapping (a Baseline document)")])
    try:
        baseline = Baseline.model_validate(document.data)
    except ValidationError as exc:
        problems = [
            document.problem(tuple(e["loc"]), str(e["msg"]).removeprefix("Value error, "))
            for e in exc.errors(include_url=False)
        ]
        raise SpecError(sorted(problems, key=lambda p: p.line)) from None
    if not baseline.content_hash:
        raise SpecError([document.problem(("content_hash",), "missing: capture it with `kfchaos baseline capture`")])
    if baseline.computed_hash() != baseline.content_hash:
        raise BaselineError(
            f"{path}: content does not match content_hash (edited after capture?); "
            f"recorded {baseline.content_hash}, computed {baseline.computed_hash()}. Capture it again."
        )
    nonsense = baseline.nonsense()
    if nonsense:
        raise BaselineError(f"{path}: {nonsense}; capture it again")
    records = control_records_beside(baseline, path)
    if records is not None:
        check_control_records(baseline, records, path)
    warnings = []
    try:
        captured = parse_time(baseline.captured_at)
    except ValueError as exc:
        raise BaselineError(f"{path}: captured_at: {exc}") from None
    age = (now or datetime.now(UTC)) - captured
    if age > stale_after:
        warnings.append(
            f"{path}: baseline is stale: captured {baseline.captured_at}, {age.days} days ago "
            f"(older than {stale_after.days} days); capture it again"
        )
    return baseline, warnings
