"""Per-window P99s agree with numpy's inverted-CDF quantile, whatever the order of the records."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kfchaos.verdict.windows import grouped_p99


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 400), st.integers(1, 8), st.booleans(), st.integers(0, 2**31))
def test_grouped_p99_matches_numpy_per_bin(n: int, count: int, shuffled: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    bins = np.sort(rng.integers(0, count, n))
    values = rng.lognormal(0, 1, n)
    if shuffled:
        order = rng.permutation(n)
        bins, values = bins[order], values[order]
    got = grouped_p99(bins, values, count)
    for index in range(count):
        inside = values[bins == index]
        if len(inside):
            assert got[index] == np.quantile(inside, 0.99, method="inverted_cdf")
        else:
            assert np.isnan(got[index])
