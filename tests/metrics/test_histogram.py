"""Bucket interpolation as Prometheus does it, and the wide-bucket warning."""

from __future__ import annotations

import math

import pytest

from kfchaos.metrics.histogram import quantile_from_buckets, wide_bucket_warning

INF = math.inf


def test_docs_example_spike_inside_a_bucket_reads_near_its_top() -> None:
    # Prometheus docs: all requests at 220 ms in the 200..300 ms bucket -> the 0.95 quantile reads 295 ms.
    bounds = [0.1, 0.2, 0.3, 0.45, INF]
    counts = [0, 0, 100, 100, 100]
    assert quantile_from_buckets(0.95, bounds, counts) == pytest.approx(0.295)


def test_top_bucket_caps_and_degenerate_inputs_are_nan() -> None:
    assert quantile_from_buckets(0.99, [1.0, 2.0, INF], [0, 0, 10]) == 2.0
    assert math.isnan(quantile_from_buckets(0.99, [1.0, 2.0], [1, 2]))  # no +Inf bucket
    assert math.isnan(quantile_from_buckets(0.99, [INF], [5]))  # fewer than two buckets
    assert math.isnan(quantile_from_buckets(0.99, [1.0, INF], [0, 0]))  # no observations


def test_vllm_default_buckets_cannot_resolve_a_15_percent_drift_at_3s() -> None:
    vllm = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, INF]
    warning = wide_bucket_warning(vllm, 3.0, 0.15)
    assert warning is not None and "2.5..5s" in warning
    assert wide_bucket_warning(vllm, 2.5, 0.15) is None  # on a boundary: the bucket ratio is exact
    assert wide_bucket_warning([0.9, 1.0, 1.1, INF], 1.05, 0.15) is None
    beyond = wide_bucket_warning([1.0, 2.0, INF], 3.0, 0.15)
    assert beyond is not None and "beyond the last finite bucket" in beyond
