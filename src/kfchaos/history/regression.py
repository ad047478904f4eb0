"""Did a pipeline version make a check worse? A stated test per check and stage, and the failure modes that recur.

The test, for each check and stage with a limit: the per-run values of the verified runs of the OLD version against
those of the NEW version, by the one-sided Mann-Whitney U test (scipy.stats.mannwhitneyu) in the direction that
moves toward the check's limit. This is the test Kayenta's judge uses between a baseline and a canary, at its
default 98 % confidence, with the Hodges-Lehmann estimate of the shift (spinnaker/kayenta
kayenta-judge/src/main/scala/com/netflix/kayenta/judge/NetflixACAJudge.scala and
.../judge/classifiers/metric/MannWhitneyClassifier.scala). Unlike Kayenta, which corrects for nothing, the
comparisons of one history are one family: Holm's step-down correction keeps the chance of any false regression
claim at 2 % however many checks and stages are compared.

Which side is worse is read from the runs' own verdicts: a check whose passing runs sit below its limit (and whose
failing runs above) is an upper limit, so a rise is worse; the reverse is a lower limit. A check whose runs do not
say (none passed or failed, or they disagree) is not tested, and says so.

Too few runs is said, never a claim: each side needs MIN_RUNS verified runs with a value, and enough that the test
could reach the corrected confidence at all (with n and m runs the smallest one-sided p-value the exact test can
give is 1 / C(n+m, n): 3 against 3 runs can never go below 0.05).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu

from kfchaos.history.model import Measurement, RunEntry, ordered

CONFIDENCE = 0.98  # Kayenta's default (NetflixACAJudge.scala: MannWhitney at 98 %)
MIN_RUNS = 3  # per side, whatever the correction allows
TEST = "one-sided Mann-Whitney U (scipy.stats.mannwhitneyu), Holm-corrected across checks and stages"

REGRESSION = "regression"
NO_REGRESSION = "no regression"
NOT_ENOUGH = "not enough runs"
NOT_TESTED = "not tested"


@dataclass(frozen=True)
class Comparison:
    check: str
    stage: int | None
    unit: str
    limit: float | None
    worse: str | None  # "higher" or "lower": the side of the values that moves toward the limit
    old_runs: int
    new_runs: int
    old_median: float | None
    new_median: float | None
    shift: float | None  # Hodges-Lehmann: the median of every NEW - OLD difference
    p_value: float | None
    alpha: float | None  # the Holm threshold this comparison was held to
    outcome: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Regressions:
    old: str
    new: str
    test: str
    confidence: float
    min_runs: int
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.outcome == REGRESSION]

    @property
    def tested(self) -> list[Comparison]:
        """The comparisons the test decided (a regression or not): none, and nothing may be claimed either way."""
        return [c for c in self.comparisons if c.outcome in (REGRESSION, NO_REGRESSION)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "old": self.old,
            "new": self.new,
            "test": self.test,
            "confidence": self.confidence,
            "min_runs": self.min_runs,
            "comparisons": [c.to_dict() for c in self.comparisons],
        }


def _values(runs: list[RunEntry], key: tuple[str, int | None]) -> list[float]:
    return [m.value for r in runs for m in r.measurements if m.key == key and m.value is not None]


def worse_side(measured: list[Measurement]) -> str | None:
    """`higher` when the runs' passing values sit at or below the limit and failing ones above; `lower` for the
    reverse; None when the runs do not tell (no PASS or FAIL with a value and a limit, or they disagree)."""
    votes = set()
    for m in measured:
        if m.value is None or m.threshold is None or m.status not in ("PASS", "FAIL") or m.value == m.threshold:
            continue
        below = m.value < m.threshold
        votes.add("higher" if below == (m.status == "PASS") else "lower")
    return votes.pop() if len(votes) == 1 else None


def smallest_p(n: int, m: int) -> float:
    """The smallest one-sided p-value the exact Mann-Whitney U test can give with n and m values."""
    return 1.0 / math.comb(n + m, n)


def runs_needed(alpha: float) -> int:
    """Runs per side (equal sides) for the exact test to be able to reach `alpha` at all."""
    k = MIN_RUNS
    while smallest_p(k, k) > alpha:
        k += 1
    return k


def compare(runs: list[RunEntry], old: str, new: str) -> Regressions:
    """Every check and stage with a limit, OLD version's verified runs against NEW's."""
    verified = [r for r in runs if r.verified]
    before = [r for r in verified if r.pipeline_version == old]
    after = [r for r in verified if r.pipeline_version == new]
    measured: dict[tuple[str, int | None], list[Measurement]] = defaultdict(list)
    for run in ordered(before + after):
        for m in run.measurements:
            if m.gating:
                measured[m.key].append(m)
    drafts: list[dict[str, Any]] = []
    for key, items in measured.items():
        old_values, new_values = _values(before, key), _values(after, key)
        limits = [m.threshold for m in items if m.threshold is not None]
        draft: dict[str, Any] = {
            "check": key[0],
            "stage": key[1],
            "unit": items[-1].unit,
            "limit": limits[-1] if limits else None,
            "worse": worse_side(items),
            "old_runs": len(old_values),
            "new_runs": len(new_values),
            "old_median": float(np.median(old_values)) if old_values else None,
            "new_median": float(np.median(new_values)) if new_values else None,
            "shift": _hodges_lehmann(old_values, new_values),
            "values": (old_values, new_values),
        }
        drafts.append(draft)
    testable = [d for d in drafts if _why_not_tested(d) is None and min(d["old_runs"], d["new_runs"]) >= MIN_RUNS]
    family_alpha = 1.0 - CONFIDENCE
    first_alpha = family_alpha / max(1, len(testable))
    for draft in testable:
        old_values, new_values = draft["values"]
        alternative = "greater" if draft["worse"] == "higher" else "less"
        if smallest_p(len(new_values), len(old_values)) > first_alpha:
            continue  # said below: too few runs to reach the confidence over this many comparisons
        result = mannwhitneyu(new_values, old_values, alternative=alternative)
        draft["p_value"] = 1.0 if math.isnan(result.pvalue) else float(result.pvalue)  # all values equal: no shift
    _holm([d for d in testable if "p_value" in d], family_alpha)
    comparisons = [_conclude(d, first_alpha) for d in drafts]
    order = {REGRESSION: 0, NO_REGRESSION: 1, NOT_ENOUGH: 2, NOT_TESTED: 3}
    comparisons.sort(
        key=lambda c: (
            order[c.outcome],
            c.p_value if c.p_value is not None else 2.0,
            c.check,
            -1 if c.stage is None else c.stage,
        )
    )
    return Regressions(old, new, TEST, CONFIDENCE, MIN_RUNS, comparisons)


def _hodges_lehmann(old: list[float], new: list[float]) -> float | None:
    if not old or not new:
        return None
    return float(np.median(np.subtract.outer(np.asarray(new), np.asarray(old))))


def _why_not_tested(draft: dict[str, Any]) -> str | None:
    if draft["limit"] is None:
        return "no limit: nothing tells worse from better"
    if draft["worse"] is None:
        return "its runs do not show which side of the limit is worse (none passed or failed with a value)"
    return None


def _holm(drafts: list[dict[str, Any]], family_alpha: float) -> None:
    """Holm's step-down: the i-th smallest p-value (from 0) is held to alpha / (m - i), until one is not below it."""
    m = len(drafts)
    rejecting = True
    for i, draft in enumerate(sorted(drafts, key=lambda d: d["p_value"])):
        draft["alpha"] = family_alpha / (m - i)
        rejecting = rejecting and draft["p_value"] <= draft["alpha"]
        draft["rejected"] = rejecting


def _conclude(draft: dict[str, Any], first_alpha: float) -> Comparison:
    n_old, n_new = draft["old_runs"], draft["new_runs"]
    why_not = _why_not_tested(draft)
    p_value, alpha = draft.get("p_value"), draft.get("alpha")
    if why_not is not None:
        outcome, why = NOT_TESTED, why_not
    elif p_value is None:
        need = runs_needed(first_alpha)
        outcome = NOT_ENOUGH
        why = (
            f"{n_old} old and {n_new} new runs with a value; {need} a side needed to reach "
            f"{CONFIDENCE:.0%} confidence over the comparisons made"
        )
    elif draft.get("rejected"):
        outcome = REGRESSION
        why = f"{draft['worse']} values after the bump: p = {p_value:.2g} <= {alpha:.2g}"
    else:
        outcome = NO_REGRESSION
        why = f"p = {p_value:.2g} > {alpha:.2g}"
    return Comparison(
        check=draft["check"],
        stage=draft["stage"],
        unit=draft["unit"],
        limit=draft["limit"],
        worse=draft["worse"],
        old_runs=n_old,
        new_runs=n_new,
        old_median=draft["old_median"],
        new_median=draft["new_median"],
        shift=draft["shift"],
        p_value=p_value,
        alpha=alpha,
        outcome=outcome,
        why=why,
    )


# --- failure modes --------------------------------------------------------------------------------------------

_FIGURES = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?", re.I)


@dataclass(frozen=True)
class FailureMode:
    status: str  # FAIL or INCONCLUSIVE
    check: str
    stage: int | None
    reason: str  # the reason with its figures replaced by "#": two runs' reasons that differ only in figures match
    runs: int
    versions: list[str]
    last_run: str
    last_reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def failure_modes(runs: list[RunEntry]) -> list[FailureMode]:
    """Every gating check that did not pass, in verified runs, grouped by status, check, stage and reason (figures
    aside): failures first, most frequent first; then the checks that could not be judged (INCONCLUSIVE), likewise."""
    groups: dict[tuple[str, str, int | None, str], list[tuple[RunEntry, Measurement]]] = defaultdict(list)
    for run in ordered([r for r in runs if r.verified]):
        for m in run.measurements:
            if m.gating and m.status != "PASS":
                groups[(m.status, m.check, m.stage, _FIGURES.sub("#", m.reason))].append((run, m))
    modes = []
    for (status, check, stage, reason), seen in groups.items():
        versions = list(dict.fromkeys(r.pipeline_version or "unknown" for r, _ in seen))
        last_run, last = seen[-1]
        modes.append(
            FailureMode(
                status, check, stage, reason, len({r.run_id for r, _ in seen}), versions, last_run.run_id, last.reason
            )
        )
    modes.sort(key=lambda f: (f.status != "FAIL", -f.runs, f.check, -1 if f.stage is None else f.stage))
    return modes
