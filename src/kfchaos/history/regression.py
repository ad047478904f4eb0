"""Did a pipeline version make a check worse? A stated test per check and stage, and the failure modes that recur.

The test, for each check and stage with a limit: the per-run values of the verified runs of the OLD version against
those of the NEW version, one-sided in the direction that moves toward the check's limit. A run is the unit: its
requests are not pooled, because nights differ from one another more than requests within a night tell.

- **Welch's t-test on the log of the per-run values** (Welch 1947, "The generalization of Student's problem when
  several different population variances are involved", Biometrika 34). A latency P99 is a positive quantity whose
  night-to-night changes are multiplicative, so its log is close to normal and a version's effect is a ratio; the
  drift checks (unit "ratio", P99 / reference - 1) are taken as log(1 + value). Unlike a rank test it has no floor
  on its p-value, so three or four runs a side can show a large shift. Welch rather than Student: the versions may
  differ in spread as well as in level.
- **The exact rank-sum test** (Mann-Whitney / Wilcoxon, exact over every relabelling of the runs, ties at mid-rank)
  where the log does not apply: a value at or below zero (an error rate of 0), or no spread to estimate (every run
  the same). Its smallest p-value with n and m runs is 1 / C(n+m, n): 3 against 3 can never go below 0.05.
- **One family, Holm's step-down with Tarone's restriction** (Tarone 1990, "A modified Bonferroni method for
  discrete data", Biometrics 46: 351-357; Holm 1979, Scand. J. Statist. 6: 65-70; the step-down is closed testing
  with Tarone's test as each intersection's local test, as in Roth 1999, J. Statist. Plann. Inference 82: 101-117,
  and Hommel & Krummenauer 1998, Biometrics 54: 673-681). At each step K is the smallest k for which at most k of
  the remaining comparisons can reach alpha / k at all; only those are held to alpha / K, the others cannot make a
  false claim and are not counted. The chance of any false regression claim over every check and stage stays at
  most 2 %, and a rank test that could never reach the level no longer raises every other comparison's bar.

Chosen by simulation (scripts/history_power.py, table in docs/history.md): with about 18 comparisons the old
Mann-Whitney-Holm could claim nothing below 6 runs a side; this holds the 2 % (0.4-0.9 % simulated) and claims a
+50 % P99 in about four histories of five at 4 runs a side, with the tests' night-to-night spread.

Which side is worse is read from the runs' own verdicts: a check whose passing runs sit below its limit (and whose
failing runs above) is an upper limit, so a rise is worse; the reverse is a lower limit. A check whose runs do not
say (none passed or failed, or they disagree) is not tested, and says so.

Too few runs is said, never a claim: each side needs MIN_RUNS verified runs with a value, and a rank-tested
comparison enough that it could reach the level. The count it prints is for the family that will be compared (every
check and stage with a limit and a worse side, whatever its runs so far): with that many runs a side every one of
them is decided, regression or not, so the count does not grow as more checks gather enough runs.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.special import stdtr
from scipy.stats import mannwhitneyu, rankdata

from kfchaos.history.model import Measurement, RunEntry, ordered

CONFIDENCE = 0.98  # Kayenta's default (NetflixACAJudge.scala: MannWhitney at 98 %)
MIN_RUNS = 3  # per side, whatever the correction allows: below it Welch's variance rests on one difference
TEST = (
    "one-sided Welch t-test on log per-run values (exact rank-sum test where the log does not apply), "
    "Holm step-down with Tarone's restriction across checks and stages"
)
WELCH = "welch-log"
RANK = "rank-exact"
EXACT_LIMIT = 20_000  # relabellings enumerated by the exact rank test; beyond, scipy's normal approximation

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
    alpha: float | None  # the Tarone-Holm level this comparison was held to
    outcome: str
    why: str
    method: str | None = None  # WELCH or RANK: the test this comparison got
    change: float | None = None  # the relative move of the median toward the limit (+0.2: 20 % worse)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def moved(self) -> float:
        """How far it moved either way (0 where it cannot be said): the order "what moved first" lists by."""
        if self.change is not None:
            return abs(self.change)
        either = relative_change(self.old_median, self.new_median, self.unit, "higher")  # no side known: its size
        return 0.0 if either is None else abs(either)


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
    """The smallest one-sided p-value the exact rank-sum (Mann-Whitney U) test can give with n and m values."""
    return 1.0 / math.comb(n + m, n)


def runs_needed(alpha: float) -> int:
    """Runs per side (equal sides) for the exact rank test to be able to reach `alpha` at all."""
    k = MIN_RUNS
    while smallest_p(k, k) > alpha:
        k += 1
    return k


# --- the test of one comparison -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PValue:
    """One comparison's one-sided p-value, the test that gave it and the smallest p-value that test could have
    given with these runs (0 for Welch's t: no floor): what Tarone's restriction reads."""

    p_value: float
    method: str
    floor: float


def log_scale(values: Sequence[float], unit: str) -> np.ndarray | None:
    """The values on the scale Welch's test reads, or None where the log does not apply (a value at or below 0;
    for a drift, at or below -100 %). Decided on both sides' values together, never on the labels, so the choice
    cannot favour either version."""
    x = np.asarray(values, dtype=float) + (1.0 if unit == "ratio" else 0.0)
    return np.log(x) if x.size and bool(np.all(x > 0)) else None


def welch(old: np.ndarray, new: np.ndarray, worse: str) -> float | None:
    """Welch's one-sided p-value that NEW sits on the worse side of OLD; None where no spread can be estimated."""
    n, m = len(old), len(new)
    if n < 2 or m < 2:
        return None
    v_old, v_new = float(np.var(old, ddof=1)) / n, float(np.var(new, ddof=1)) / m
    se2 = v_old + v_new
    if not se2 > 0 or not math.isfinite(se2):
        return None
    t = (float(np.mean(new)) - float(np.mean(old))) / math.sqrt(se2)
    if worse == "lower":
        t = -t
    # Welch-Satterthwaite degrees of freedom
    df = se2 * se2 / (v_old * v_old / (n - 1) + v_new * v_new / (m - 1))
    return float(stdtr(df, -t))


@functools.lru_cache(maxsize=16)  # at most EXACT_LIMIT rows each
def _relabellings(total: int, k: int) -> np.ndarray:
    return np.array(list(itertools.combinations(range(total), k)), dtype=np.intp)


def rank_exact(old: Sequence[float], new: Sequence[float], worse: str) -> float:
    """The exact one-sided p-value of the rank sum of NEW (mid-ranks for ties) over every relabelling of the runs:
    the permutation distribution the Mann-Whitney U test reads, exact with ties too. scipy's normal approximation
    where there are more than EXACT_LIMIT relabellings (then the floor no longer matters)."""
    n, m = len(old), len(new)
    pooled = np.concatenate([np.asarray(old, dtype=float), np.asarray(new, dtype=float)])
    if math.comb(n + m, m) > EXACT_LIMIT:
        result = mannwhitneyu(new, old, alternative="greater" if worse == "higher" else "less")
        return 1.0 if math.isnan(result.pvalue) else float(result.pvalue)
    ranks = rankdata(pooled)
    observed = ranks[n:].sum()
    sums = ranks[_relabellings(n + m, m)].sum(axis=1)
    eps = 1e-9 * (n + m) ** 2  # rank sums are multiples of 1/2: equal ones must compare equal
    extreme = sums >= observed - eps if worse == "higher" else sums <= observed + eps
    return float(np.mean(extreme))


def p_value_of(old: Sequence[float], new: Sequence[float], worse: str, unit: str) -> PValue:
    """Welch on logs where it applies, else the exact rank test (module docstring)."""
    old_log, new_log = log_scale(old, unit), log_scale(new, unit)
    if old_log is not None and new_log is not None:
        p = welch(old_log, new_log, worse)
        if p is not None:
            return PValue(p, WELCH, 0.0)
    return PValue(rank_exact(old, new, worse), RANK, smallest_p(len(old), len(new)))


def method_for(old: Sequence[float], new: Sequence[float], unit: str) -> str:
    """The test these values would get (what the runs needed are counted for, before there are enough)."""
    pooled = [*old, *new]
    scaled = log_scale(pooled, unit)
    if scaled is None or len(set(pooled)) < 2:
        return RANK
    return WELCH


# --- the family: Holm's step-down with Tarone's restriction -----------------------------------------------------


def tarone_k(floors: Sequence[float], alpha: float) -> int:
    """Tarone's K: the smallest k for which at most k of the comparisons can reach alpha / k at all."""
    k = 1
    while sum(f <= alpha / k for f in floors) > k:
        k += 1
    return k


@dataclass(frozen=True)
class Decision:
    rejected: bool
    alpha: float | None  # the level it was held to; None where it could not reach any level it met
    reachable: bool  # False: its test could not reach the level (too few runs for a rank test)


def tarone_holm(tests: Sequence[PValue], alpha: float) -> list[Decision]:
    """Holm's step-down, each step restricted as Tarone's test restricts one intersection: of the comparisons not yet
    rejected, K = tarone_k of their floors, and only those whose floor is at most alpha / K are held to alpha / K
    (the others cannot give p <= alpha / K, so they add nothing to the chance of a false claim: Tarone 1990). The
    smallest p-value among them is rejected if at most alpha / K, and the step repeats without it. This is closed
    testing with Tarone's intersection test (valid at alpha), and a valid shortcut: for a subset of the remaining
    comparisons K can only be smaller, so whatever the step rejects is rejected by every intersection holding it."""
    remaining = set(range(len(tests)))
    rejected: dict[int, float] = {}
    level = alpha
    testable: set[int] = set()
    while remaining:
        k = tarone_k([tests[i].floor for i in sorted(remaining)], alpha)
        level = alpha / k
        testable = {i for i in remaining if tests[i].floor <= level}
        if not testable:
            break
        best = min(testable, key=lambda i: (tests[i].p_value, i))
        if tests[best].p_value > level:
            break
        rejected[best] = level
        remaining.discard(best)
        testable.discard(best)
    out = []
    for i in range(len(tests)):
        if i in rejected:
            out.append(Decision(True, rejected[i], True))
        else:
            out.append(Decision(False, level if i in testable else None, i in testable))
    return out


def relative_change(old: float | None, new: float | None, unit: str, worse: str | None) -> float | None:
    """NEW's median relative to OLD's, signed so that + is toward the limit (worse); a drift as a ratio of
    1 + value (P99 / reference). None where it cannot be said (no side or value, or an OLD median of 0)."""
    if old is None or new is None or worse is None:
        return None
    shift = 1.0 if unit == "ratio" else 0.0
    base, after = old + shift, new + shift
    if base == after:
        return 0.0
    if base == 0:
        return None  # no ratio to a zero; JSON has no infinity
    change = (after - base) / abs(base)
    return change if worse == "higher" else -change


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
        unit = items[-1].unit
        worse = worse_side(items)
        old_median = float(np.median(old_values)) if old_values else None
        new_median = float(np.median(new_values)) if new_values else None
        drafts.append(
            {
                "check": key[0],
                "stage": key[1],
                "unit": unit,
                "limit": limits[-1] if limits else None,
                "worse": worse,
                "old_runs": len(old_values),
                "new_runs": len(new_values),
                "old_median": old_median,
                "new_median": new_median,
                "shift": _hodges_lehmann(old_values, new_values),
                "change": relative_change(old_median, new_median, unit, worse),
                "method": method_for(old_values, new_values, unit) if old_values or new_values else None,
                "values": (old_values, new_values),
            }
        )
    family = [d for d in drafts if _why_not_tested(d) is None]  # what will be compared, once it has the runs
    family_alpha = 1.0 - CONFIDENCE
    # Enough runs for every comparison of this family to be decided: a rank test's floor at most alpha / (its
    # size), the lowest level Tarone-Holm can hold any of them to. It depends on the family, not on how many of
    # its comparisons have their runs yet, so the count printed does not move as they do.
    needed = {WELCH: MIN_RUNS, RANK: runs_needed(family_alpha / max(1, len(family)))}
    ready = [d for d in family if min(d["old_runs"], d["new_runs"]) >= MIN_RUNS]
    for draft in ready:
        old_values, new_values = draft["values"]
        tested = p_value_of(old_values, new_values, draft["worse"], draft["unit"])
        draft["tested"], draft["method"] = tested, tested.method
    decisions = tarone_holm([d["tested"] for d in ready], family_alpha)
    for draft, decision in zip(ready, decisions, strict=True):
        draft["decision"] = decision
    comparisons = [_conclude(d, needed, len(family)) for d in drafts]
    return Regressions(old, new, TEST, CONFIDENCE, MIN_RUNS, by_movement(comparisons))


def by_movement(comparisons: list[Comparison]) -> list[Comparison]:
    """What moved first: the regressions, then the other comparisons the test decided or could not yet decide,
    each by how far its median moved (either way), largest first; the checks not tested last."""
    rank = {REGRESSION: 0, NO_REGRESSION: 1, NOT_ENOUGH: 1, NOT_TESTED: 2}
    return sorted(
        comparisons,
        key=lambda c: (rank[c.outcome], -c.moved, c.check, -1 if c.stage is None else c.stage),
    )


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


def _conclude(draft: dict[str, Any], needed: dict[str, int], family: int) -> Comparison:
    n_old, n_new = draft["old_runs"], draft["new_runs"]
    why_not = _why_not_tested(draft)
    decision: Decision | None = draft.get("decision")
    tested: PValue | None = draft.get("tested")
    p_value = tested.p_value if tested is not None else None
    alpha = decision.alpha if decision is not None else None
    if why_not is not None:
        outcome, why = NOT_TESTED, why_not
    elif decision is None or tested is None or not decision.reachable:
        need = needed[draft["method"] or WELCH]
        outcome, p_value = NOT_ENOUGH, None
        test = "the exact rank test" if draft["method"] == RANK else "Welch's t-test"
        why = (
            f"{n_old} old and {n_new} new runs with a value; {need} a side needed for {test} to decide at "
            f"{CONFIDENCE:.0%} confidence over the {family} comparisons"
        )
    elif decision.rejected:
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
        method=draft["method"] if why_not is None else None,
        change=draft["change"],
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
