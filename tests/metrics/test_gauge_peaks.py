"""A gauge's short peak survives the metrics snapshot: KV-cache usage is read as the maximum over each step's
range, not as the one sample at the step, so a burst that fills the cache for 2 s between two 15 s steps is on
the report's chart (the evidence bundle saw 32 % where the panel showed 9 %). A real Prometheus holding
backfilled history."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from kfchaos.metrics import names
from kfchaos.metrics.collect import PROMETHEUS_ENV, snapshot_for_experiment
from tests.support.prometheus import PrometheusServer, backfill
from tests.verdict.builders import experiment

pytestmark = pytest.mark.integration
PEAK = 0.32
BASE = 0.09


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float]]:
    tmp = tmp_path_factory.mktemp("gauge")
    end = float(int(time.time()) - 120)
    lines = ["# TYPE vllm:kv_cache_usage_perc gauge"]
    for t in range(int(end) - 600, int(end) + 1):
        value = PEAK if end - 293 <= t <= end - 291 else BASE  # 3 samples, 1 s apart, between two 15 s steps
        lines.append(f'vllm:kv_cache_usage_perc{{namespace="serving",pod="vllm-0"}} {value:g} {t}')
    backfill(tmp / "data", "\n".join([*lines, "# EOF", ""]))
    with PrometheusServer(tmp / "data", scrape_interval="1s") as server:
        yield server.url, end


def test_the_peak_between_two_steps_is_in_the_snapshot(
    prometheus: tuple[str, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, end = prometheus
    monkeypatch.setenv(PROMETHEUS_ENV, url)
    # Steps at end-400-15+15k: ..., end-295, end-280: neither holds the peak's own samples.
    snapshot = snapshot_for_experiment(experiment(), (end - 400.0, end - 100.0), step=15.0)
    series = snapshot.series[names.KV_CACHE_USAGE]
    assert max(series.values) == pytest.approx(PEAK), list(zip(series.times, series.values, strict=True))
    # The peak shows from the first step after it, not before it happened.
    first = min(t for t, v in zip(series.times, series.values, strict=True) if v == pytest.approx(PEAK))
    assert end - 293 <= first <= end - 291 + 15.0


def test_without_the_peak_the_level_is_unchanged(
    prometheus: tuple[str, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, end = prometheus
    monkeypatch.setenv(PROMETHEUS_ENV, url)
    snapshot = snapshot_for_experiment(experiment(), (end - 600.0 + 60, end - 360.0), step=15.0)
    assert all(v == pytest.approx(BASE) for v in snapshot.series[names.KV_CACHE_USAGE].values)
