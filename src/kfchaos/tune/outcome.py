"""One configuration's run, read back from its run folder: the verdict per stage, the breakpoint, OOM kills and
goodput.

The breakpoint is the highest load stage that still PASSed under the faults: the last stage of the unbroken run of
PASSes from the ramp's first stage (a stage after a FAIL or an INCONCLUSIVE one is not evidence of holding: the
ramp may have been stopped there, and the load between was not held). None when the first stage did not PASS.
The idea is vLLM's SLA sweep's (vllm-project/vllm, docs/benchmarking/sweeps.md: the largest value before the SLA
breaks), without its interpolation between measured points: a breakpoint here is a stage that was run and judged.
Goodput and P99 per stage are the report's (kfchaos.report.data.stage_figures: goodput is the requests that
succeeded within the per-request latency SLOs per request sent; P99 is over the requests sent, one that never
completed counted as infinite, as the verdict counts it), so the table, the frontier chart and the run's report agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfchaos.report.data import check_of, load_frame, stage_figures, stages_of
from kfchaos.rundir import layout
from kfchaos.spec import Slo

NOT_RUN = "NOT RUN"  # a stage of the ramp the run never reached (an abort rule stopped it before)


@dataclass(frozen=True)
class StageOutcome:
    stage: int
    status: str  # PASS, FAIL, INCONCLUSIVE, or NOT_RUN
    requests: int = 0
    goodput: float | None = None  # share of sent requests within every per-request SLO
    oom_kills: int | None = None  # counted by the verdict's oom_kill_rate check in the stage's window
    p99: float | None = None  # seconds over the requests sent; math.inf when requests at the 99th never completed

    @property
    def judged(self) -> bool:
        return self.status != NOT_RUN

    def to_dict(self) -> dict[str, Any]:
        infinite = self.p99 is not None and math.isinf(self.p99)
        return {
            "stage": self.stage,
            "status": self.status,
            "requests": self.requests,
            "goodput": self.goodput,
            "oom_kills": self.oom_kills,
            # JSON has no infinity: an unbounded P99 is null with p99_infinite true; null alone is not measured.
            "p99": None if infinite else self.p99,
            "p99_infinite": infinite,
        }


@dataclass(frozen=True)
class ConfigOutcome:
    """The result of one configuration's chaos run."""

    name: str
    settings: str  # the configuration as flags
    cost: float
    status: str  # the run's verdict (every stage and the experiment-wide checks)
    stages: list[StageOutcome]
    oom_kills: int  # the most either the verdict or the runner saw: one OOM kill makes it unrecommendable
    run_dir: str
    reasons: list[str] = field(default_factory=list)

    @property
    def breakpoint(self) -> int | None:
        held = None
        for stage in self.stages:
            if stage.status != "PASS":
                break
            held = stage.stage
        return held

    @property
    def holds_ramp(self) -> bool:
        """The whole run PASSed: every stage up to the top one, and the experiment-wide checks (recovery, ...)."""
        return self.status == "PASS" and bool(self.stages) and self.breakpoint == self.stages[-1].stage

    def goodput_at(self, stage: int | None) -> float | None:
        return next((s.goodput for s in self.stages if s.stage == stage), None)

    @property
    def highest_judged(self) -> StageOutcome | None:
        """The highest load stage the run reached and judged: where the frontier chart places the configuration."""
        return next((s for s in reversed(self.stages) if s.judged), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "settings": self.settings,
            "cost": self.cost,
            "status": self.status,
            "breakpoint": self.breakpoint,
            "oom_kills": self.oom_kills,
            "stages": [s.to_dict() for s in self.stages],
            "run_dir": self.run_dir,
            "reasons": self.reasons,
        }


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _p99(value: float) -> float | None:
    """A stage's P99 as measured: infinity kept (requests that never completed), NaN (not measured) as None."""
    return None if math.isnan(value) else float(value)


def stage_outcomes(verdict: dict[str, Any], records: Path | None, slo: Slo, ramp: list[int]) -> list[StageOutcome]:
    """Per stage of the planned ramp, in order: its verdict, goodput and OOM kills (NOT_RUN where never reached)."""
    judged = {int(s["stage"]): s for s in stages_of(verdict)}
    frame = load_frame(records) if records is not None and records.is_file() else None
    figures = {f.stage: f for f in stage_figures(verdict, frame, slo)}
    out = []
    for stage in ramp:
        found = judged.get(stage)
        if found is None:
            out.append(StageOutcome(stage, NOT_RUN))
            continue
        kills = (check_of(found, "oom_kill_rate").get("details") or {}).get("oom_kills")
        figure = figures.get(stage)
        out.append(
            StageOutcome(
                stage,
                str(found.get("status", "INCONCLUSIVE")),
                int(found.get("requests", 0) or 0),
                _finite(figure.goodput) if figure is not None else None,
                int(kills) if isinstance(kills, int | float) else None,
                _p99(figure.p99) if figure is not None else None,
            )
        )
    return out


def from_run_folder(
    name: str,
    settings: str,
    cost: float,
    folder: Path,
    slo: Slo,
    ramp: list[int],
    oom_kills_seen: int = 0,
    reasons: list[str] | None = None,
) -> ConfigOutcome:
    """The configuration's outcome from its run folder (kfchaos.rundir); `oom_kills_seen` is what the runner itself
    counted (the demo server's supervisor), taken when it is more than the verdict's count."""
    run = layout.open_run(folder)
    verdict = run.verdict()
    stages = stage_outcomes(verdict, run.file(layout.RECORDS), slo, ramp)
    counted = sum(s.oom_kills or 0 for s in stages)
    return ConfigOutcome(
        name,
        settings,
        cost,
        str(verdict.get("status", "INCONCLUSIVE")),
        stages,
        max(counted, oom_kills_seen),
        str(folder),
        list(reasons if reasons is not None else verdict.get("reasons", []))[:6],
    )


def without_run(
    name: str, settings: str, cost: float, ramp: list[int], reason: str, oom_kills_seen: int = 0
) -> ConfigOutcome:
    """A configuration whose run left no run folder: nothing was judged, so nothing is held."""
    return ConfigOutcome(
        name, settings, cost, "INCONCLUSIVE", [StageOutcome(s, NOT_RUN) for s in ramp], oom_kills_seen, "", [reason]
    )
