"""The intervals agree with scipy's own implementations of the same methods."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from kfchaos.verdict.stats import clopper_pearson, order_statistics, quantile_ranks


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_clopper_pearson_matches_scipy_exact_interval(pair: tuple[int, int]) -> None:
    k, n = pair
    expected = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    low, high = clopper_pearson(k, n, 0.95)
    assert low == pytest.approx(expected.low, abs=1e-9)
    assert high == pytest.approx(expected.high, abs=1e-9)


@pytest.mark.parametrize("n", [400, 1000, 3000, 12345])
def test_quantile_ranks_match_scipy_quantile_test(n: int) -> None:
    data = np.arange(1, n + 1, dtype=float)  # value == rank, so scipy's interval bounds are the ranks
    expected = stats.quantile_test(data, q=0.5 * n, p=0.99).confidence_interval(0.95)
    assert quantile_ranks(n, 0.99, 0.95) == (int(expected.low), int(expected.high))


def test_no_two_sided_p99_interval_below_a_few_hundred_samples() -> None:
    assert quantile_ranks(299, 0.99, 0.95) is None
    assert quantile_ranks(10_000, 0.99, 0.95) is not None


def test_order_statistics_pick_ranks_without_sorting_the_input() -> None:
    values = np.random.default_rng(3).permutation(1000).astype(float)
    assert order_statistics(values, (1, 990, 1000)) == [0.0, 989.0, 999.0]
