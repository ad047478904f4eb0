"""The false-claim rate and the power of `kfchaos history`'s regression test, by simulation (docs/history.md).

    nice .venv/bin/python scripts/history_power.py            # docs/history.md's first table (~100 s, one core)
    nice .venv/bin/python scripts/history_power.py --night 0.02 --sample 0.03     # its second: a steadier target

Each simulated history is one bump: n runs of OLD against n of NEW, 18 comparisons as a four-stage experiment
gives them (docs/history.md, "The test"): p99, p99_drift and ttft_p99 at 25/50/75/100 %, error_rate and
timeout_rate at 75/100 %, load and replay at 100 %. The per-run values on the log scale:

- a night effect shared by every latency check of the run (N(0, --night)); not measured on the demo, assumed;
- per stage, the sampling noise of a P99 over ~600 requests (N(0, --sample): 0.085 is the spread of the P99 of 600
  exponential draws, the tests/history fixtures' latency, measured); p99_drift is p99 over a fixed reference
  (as in the fixtures), so it moves with p99 exactly; ttft_p99 shares half of its stage's noise;
- error and timeout rates: counts of rare events over 600 requests (mostly 0: the rank test's case); load and
  replay just under 100 %.

A/A: both sides drawn alike (the same version). "A/A, slow nights": also alike, but one night in ten is 1.3 times
slower everywhere (a noisy neighbour): heavier tails than the log-normal the t-test assumes. A/B: NEW's P99 (so its
p99 and p99_drift) at 75 and 100 % is larger by the effect. False claims: the share of A/A histories with any
regression claimed (the family-wise rate the test holds at 2 %). Power: the share of A/B histories in which the
moved P99 is claimed (at one stage or more). Methods:

- old: exact Mann-Whitney U, Holm over every comparison (what kfchaos history did before issue 47);
- rank + Tarone-Holm: the same test, Holm restricted as Tarone's test restricts (Tarone 1990);
- Welch-log + Holm: Welch's t on the logs (the exact rank test where the log does not apply), plain Holm;
- primary family first: considered, not chosen (docs/history.md says why);
- chosen: Welch-log with Tarone-Holm: kfchaos.history.regression, the code `kfchaos history` runs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np

from kfchaos.history.regression import CONFIDENCE, PValue, p_value_of, rank_exact, smallest_p, tarone_holm

ALPHA = 1.0 - CONFIDENCE
STAGES = (25, 50, 75, 100)
MOVED_STAGES = (75, 100)
P99_BASE = {25: 0.9, 50: 1.0, 75: 1.1, 100: 1.2}  # seconds; the reference is P99_BASE / 1.05: drift near +5 %
REQUESTS = 600


def comparisons() -> list[tuple[str, int, str, str]]:
    """(check, stage, unit, worse side) of the 18 comparisons."""
    out = []
    for stage in STAGES:
        out += [("p99", stage, "s", "higher"), ("p99_drift", stage, "ratio", "higher"),
                ("ttft_p99", stage, "s", "higher")]  # fmt: skip
    for stage in (75, 100):
        out += [("error_rate", stage, "fraction", "higher"), ("timeout_rate", stage, "fraction", "higher")]
    out += [("load", 100, "fraction", "lower"), ("replay", 100, "fraction", "lower")]
    return out


COMPARISONS = comparisons()
MOVED = [i for i, (check, stage, _, _) in enumerate(COMPARISONS) if check in ("p99", "p99_drift")
         and stage in MOVED_STAGES]  # fmt: skip


def runs(rng: np.random.Generator, n: int, effect: float, night: float, sample: float, slow: float) -> np.ndarray:
    """n runs' values, one row a run, one column a comparison (COMPARISONS' order)."""
    out = np.empty((n, len(COMPARISONS)))
    nights = rng.normal(0.0, night, n) + np.where(rng.random(n) < slow, np.log(1.3), 0.0)
    column = 0
    for stage in STAGES:
        noise, own = rng.normal(0.0, sample, n), rng.normal(0.0, sample, n)
        bump = np.log1p(effect) if stage in MOVED_STAGES else 0.0
        p99 = P99_BASE[stage] * np.exp(nights + noise + bump)
        out[:, column] = p99
        out[:, column + 1] = p99 / (P99_BASE[stage] / 1.05) - 1.0
        out[:, column + 2] = 0.25 * P99_BASE[stage] * np.exp(nights + (noise + own) / np.sqrt(2))
        column += 3
    for _ in (75, 100):
        out[:, column] = rng.binomial(REQUESTS, 0.002, n) / REQUESTS
        out[:, column + 1] = rng.binomial(REQUESTS, 0.001, n) / REQUESTS
        column += 2
    out[:, column] = 1.0 - np.abs(rng.normal(0.0, 0.001, n))
    out[:, column + 1] = 1.0 - np.abs(rng.normal(0.0, 0.0005, n))
    return out


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down over every p-value given."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for step, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - step):
            break
        rejected[i] = True
    return rejected


def old_method(old: np.ndarray, new: np.ndarray) -> list[bool]:
    """Before issue 47: the exact rank test; a comparison whose floor is above alpha / (all comparisons) is "not
    enough runs"; Holm over the rest."""
    first = ALPHA / len(COMPARISONS)
    kept = [i for i in range(len(COMPARISONS)) if smallest_p(len(new), len(old)) <= first]
    p = [rank_exact(list(old[:, i]), list(new[:, i]), COMPARISONS[i][3]) for i in kept]
    rejected = [False] * len(COMPARISONS)
    for i, r in zip(kept, holm(p, ALPHA), strict=True):
        rejected[i] = r
    return rejected


def rank_tarone(old: np.ndarray, new: np.ndarray) -> list[bool]:
    floor = smallest_p(len(old), len(new))
    tests = [
        PValue(rank_exact(list(old[:, i]), list(new[:, i]), c[3]), "rank", floor) for i, c in enumerate(COMPARISONS)
    ]
    return [d.rejected for d in tarone_holm(tests, ALPHA)]


def _chosen_tests(old: np.ndarray, new: np.ndarray) -> list[PValue]:
    return [p_value_of(list(old[:, i]), list(new[:, i]), c[3], c[2]) for i, c in enumerate(COMPARISONS)]


def welch_holm(old: np.ndarray, new: np.ndarray) -> list[bool]:
    return holm([t.p_value for t in _chosen_tests(old, new)], ALPHA)


def chosen(old: np.ndarray, new: np.ndarray) -> list[bool]:
    return [d.rejected for d in tarone_holm(_chosen_tests(old, new), ALPHA)]


PRIMARY = [i for i, c in enumerate(COMPARISONS) if c[1] == max(STAGES) and c[0] in ("p99", "p99_drift", "ttft_p99")]


def primary_first(old: np.ndarray, new: np.ndarray) -> list[bool]:
    """Considered, not chosen: the SLO checks at the highest stage as a primary family declared before the data,
    Holm at the full 2 %; only when every one of them is rejected does the 2 % pass on to the rest (Tarone-Holm):
    serial gatekeeping, a case of Bretz et al. 2009's graphical procedures."""
    tests = _chosen_tests(old, new)
    first = holm([tests[i].p_value for i in PRIMARY], ALPHA)
    rejected = [False] * len(COMPARISONS)
    for i, r in zip(PRIMARY, first, strict=True):
        rejected[i] = r
    if all(first):
        rest = [i for i in range(len(COMPARISONS)) if i not in PRIMARY]
        for i, d in zip(rest, tarone_holm([tests[i] for i in rest], ALPHA), strict=True):
            rejected[i] = d.rejected
    return rejected


METHODS: dict[str, Callable[[np.ndarray, np.ndarray], list[bool]]] = {
    "old: Mann-Whitney, Holm": old_method,
    "rank + Tarone-Holm": rank_tarone,
    "Welch-log + Holm": welch_holm,
    "primary family first (Welch-log)": primary_first,
    "**chosen: Welch-log + Tarone-Holm**": chosen,
}


def rate(
    method: Callable[[np.ndarray, np.ndarray], list[bool]],
    n: int,
    effect: float,
    reps: int,
    seed: int,
    args: argparse.Namespace,
    slow: float = 0.0,
) -> float:
    """The share of `reps` histories with a claim: any claim for an A/A (effect 0), the moved P99 for an A/B."""
    rng = np.random.default_rng(seed)  # the same histories for every method
    hits = 0
    for _ in range(reps):
        old = runs(rng, n, 0.0, args.night, args.sample, slow)
        new = runs(rng, n, effect, args.night, args.sample, slow)
        rejected = method(old, new)
        hits += any(rejected[i] for i in MOVED) if effect else any(rejected)
    return hits / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--night", type=float, default=0.05, help="night-to-night spread, log scale (assumed)")
    parser.add_argument("--sample", type=float, default=0.085, help="a P99's sampling spread, log scale")
    parser.add_argument("--null-reps", type=int, default=2000, help="A/A histories per cell")
    parser.add_argument("--reps", type=int, default=400, help="A/B histories per cell")
    parser.add_argument("--seed", type=int, default=47)
    args = parser.parse_args()
    started = time.monotonic()
    print(f"{len(COMPARISONS)} comparisons; night spread {args.night:g}, P99 sampling spread {args.sample:g} (log);")
    print(f"{args.null_reps} A/A and {args.reps} A/B histories a cell, seed {args.seed}; 98 % confidence\n")
    print("| runs a side | method | false claims, A/A | A/A, slow nights | power +5 % | +15 % | +50 % |")
    print("|---|---|---|---|---|---|---|")
    for n in (3, 4, 6):
        for name, method in METHODS.items():
            cells = [
                rate(method, n, 0.0, args.null_reps, args.seed + n, args),
                rate(method, n, 0.0, args.null_reps, args.seed + 100 + n, args, slow=0.1),
            ]
            cells += [rate(method, n, e, args.reps, args.seed + 200 + n, args) for e in (0.05, 0.15, 0.50)]
            print(f"| {n} | {name} | " + " | ".join(f"{c:.1%}" for c in cells) + " |")
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
