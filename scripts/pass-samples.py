"""How many requests a stage needs before `p99_drift` can PASS when nothing drifted (README figures).

Exact (stratified) samples of a latency distribution, judged by kfchaos's own drift check against a
reference P99 that is fixed (a histogram baseline whose buckets resolve the drift) or measured by a control
baseline of `control` requests (PASS then needs the low end of the control P99's interval).
Run: .venv/bin/python scripts/pass-samples.py
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from kfchaos.verdict.checks import drift_check
from kfchaos.verdict.drift import DriftReference
from kfchaos.verdict.model import Status
from kfchaos.verdict.stats import quantile_ranks

SIZES = [*range(300, 5000, 50), *range(5000, 100_001, 1000)]


def needed(dist: stats.rv_continuous, control: int | None, drift: float = 0.15) -> int | None:
    p99 = float(dist.ppf(0.99))
    low = high = p99
    if control:
        ranks = quantile_ranks(control, 0.99, 0.95)
        assert ranks is not None
        low, high = (float(dist.ppf((r - 0.5) / control)) for r in ranks)
    reference = DriftReference(p99, low, high, "reference")
    for n in SIZES:
        values = dist.ppf((np.arange(n) + 0.5) / n)
        check = drift_check("p99_drift", values, 0, reference, drift, min_samples=300, confidence=0.95, what="x")
        if check.status is Status.PASS:
            return n
    return None


def main() -> None:
    print("| latency distribution | fixed reference | control of 1 000 | control of 5 000 | control of 20 000 |")
    print("|---|---:|---:|---:|---:|")
    for name, dist in (
        ("exponential", stats.expon()),
        ("lognormal σ = 0.5", stats.lognorm(0.5)),
        ("lognormal σ = 1", stats.lognorm(1.0)),
    ):
        cells = [needed(dist, c) for c in (None, 1000, 5000, 20000)]
        shown = ["> 100 000" if c is None else f"{c:,}".replace(",", " ") for c in cells]
        print(f"| {name} | " + " | ".join(shown) + " |")


if __name__ == "__main__":
    main()
