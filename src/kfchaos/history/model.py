"""One run as history sees it: the checks of its verdict (docs/verdict.md's kfchaos.Verdict: experiment-wide
`checks` and per-stage `stages[].checks`), its OOM kills, the pipeline version it ran and whether it was verified.

A run that cannot be verified (its seal or audit record does not hold, or its verdict cannot be read) is kept, with
the reasons, and shown as such; its figures are never counted in a comparison or a failure-mode ranking.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

OOM_CHECK = "oom_kill_rate"  # kfchaos.verdict.checks.oom_check: details.oom_kills per stage
STATUSES = ("PASS", "FAIL", "INCONCLUSIVE")


@dataclass(frozen=True)
class Measurement:
    """One check of one run: `stage` is the load percent, None for an experiment-wide check."""

    check: str
    stage: int | None
    status: str
    value: float | None
    threshold: float | None
    unit: str
    reason: str
    gating: bool = True

    @property
    def key(self) -> tuple[str, int | None]:
        return (self.check, self.stage)


@dataclass(frozen=True)
class RunEntry:
    """One run of the experiment. `version_from` says where `pipeline_version` was read: the compiled pipeline the
    run names ("pipeline"), else the experiment's metadata.version, which is the version its pipeline is compiled
    under (kfchaos.kfp.compile: one pipeline per experiment, versioned metadata.version)."""

    run_id: str
    source: str
    started_at: float | None
    pipeline_version: str | None
    version_from: str
    status: str | None
    verified: bool
    unverified_because: list[str] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    oom_kills: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _measurement(check: Any, stage: int | None) -> Measurement | None:
    if not isinstance(check, dict) or not isinstance(check.get("name"), str):
        return None
    status = check.get("status")
    return Measurement(
        check=check["name"],
        stage=stage,
        status=status if status in STATUSES else "INCONCLUSIVE",
        value=_number(check.get("value")),
        threshold=_number(check.get("threshold")),
        unit=str(check.get("unit") or ""),
        reason=str(check.get("reason") or ""),
        gating=check.get("gating", True) is not False,
    )


def measurements(verdict: dict[str, Any]) -> list[Measurement]:
    """Every check of a kfchaos.Verdict document, stage checks first (in stage order), then experiment-wide."""
    out: list[Measurement] = []
    stages = verdict.get("stages")
    for stage in stages if isinstance(stages, list) else []:
        percent = stage.get("stage") if isinstance(stage, dict) else None
        if not isinstance(percent, int) or isinstance(percent, bool):
            continue
        for check in stage.get("checks") or []:
            found = _measurement(check, percent)
            if found is not None:
                out.append(found)
    for check in verdict.get("checks") or []:
        found = _measurement(check, None)
        if found is not None:
            out.append(found)
    return out


def oom_kills(verdict: dict[str, Any]) -> float | None:
    """OOM events the verdict counted (host OOM kills plus GPU OOM crashes: the OOM check's `oom_kills`), the most
    any stage counted, or None when no stage measured them: never a 0 for "not measured". Not the sum: a stage counts
    events up to one scrape interval after its end (kfchaos.metrics.snapshot, `grace`), so one kill at a stage's
    end is counted by the next stage too; the largest stage count is a lower bound where kills fall in several."""
    counts = []
    for stage in verdict.get("stages") or []:
        for check in (stage.get("checks") or []) if isinstance(stage, dict) else []:
            if isinstance(check, dict) and check.get("name") == OOM_CHECK:
                count = _number((check.get("details") or {}).get("oom_kills"))
                if count is not None:
                    counts.append(count)
    return max(counts) if counts else None


def pipeline_version(pipeline: Any, experiment_version: Any) -> tuple[str | None, str]:
    """(version, where it was read): the run's compiled pipeline, else its experiment's metadata.version."""
    if isinstance(pipeline, dict) and pipeline.get("version"):
        return str(pipeline["version"]), "pipeline"
    if experiment_version:
        return str(experiment_version), "experiment metadata.version"
    return None, "unknown"


def ordered(runs: list[RunEntry]) -> list[RunEntry]:
    """Oldest first; a run without a start time last, by id (a stable order for the strip)."""
    return sorted(runs, key=lambda r: (r.started_at is None, r.started_at or 0.0, r.run_id))


def versions_in_order(runs: list[RunEntry]) -> list[str]:
    """The pipeline versions in the order they first ran."""
    seen: list[str] = []
    for run in ordered(runs):
        if run.pipeline_version is not None and run.pipeline_version not in seen:
            seen.append(run.pipeline_version)
    return seen
