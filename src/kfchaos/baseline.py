"""Baselines: what normal looks like, captured from Prometheus and committed as baselines/<name>.yaml.

A baseline carries its provenance (server, queries, window, exclusions, step, captured_at) and a content
hash over everything else, so an edited file is refused and an old one is flagged -- never used silently.
`capture()` (kfchaos.metrics.capture) produces one; `load_baseline()` checks it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from kfchaos.errors import KfchaosError, SpecError
from kfchaos.types import StrictModel
from kfchaos.yamlsource import load_yaml

API_VERSION = "kfchaos.io/v1alpha1"
STALE_AFTER = timedelta(days=30)


class BaselineError(KfchaosError):
    """A baseline file cannot be used: unreadable, invalid, or its content does not match its hash."""


class Exclusion(StrictModel):
    start: str
    end: str
    source: Literal["explicit", "detected"] = "explicit"
    reason: str = ""


class Window(StrictModel):
    start: str
    end: str


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


class Baseline(StrictModel):
    apiVersion: Literal["kfchaos.io/v1alpha1"] = "kfchaos.io/v1alpha1"
    kind: Literal["Baseline"] = "Baseline"
    experiment: str
    captured_at: str
    provenance: Provenance
    series: dict[str, SeriesStat]
    totals: Totals
    content_hash: str = ""

    def p99(self, name: str = "latency_p99") -> float | None:
        stat = self.series.get(name)
        return stat.median if stat else None

    def computed_hash(self) -> str:
        body = self.model_dump(mode="json", exclude={"content_hash"})
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
        path.write_text(self.sealed().to_yaml())
        return path

    def summary(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "captured_at": self.captured_at,
            "prometheus": self.provenance.prometheus,
            "window": self.provenance.window.model_dump(),
            "content_hash": self.content_hash,
            "latency_p99": self.p99(),
        }


def parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"time {text!r} needs a time zone (Z or +01:00)")
    return value


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_baseline(
    path: str | Path, *, now: datetime | None = None, stale_after: timedelta = STALE_AFTER
) -> tuple[Baseline, list[str]]:
    """The baseline in `path` and warnings (stale). Raises BaselineError or SpecError (file:line: field)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
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
