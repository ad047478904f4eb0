"""Live queries against a real Prometheus that scrapes a real exporter on loopback (one server per module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kfchaos.metrics import names
from kfchaos.metrics.catalog import Scope, standard_queries, with_user_queries
from kfchaos.metrics.collect import snapshot
from kfchaos.metrics.histogram import quantile_from_buckets, wide_bucket_warning
from kfchaos.metrics.prometheus import PrometheusClient, PrometheusUnreachable, PromQLError
from kfchaos.metrics.scrape import ScrapeSource
from tests.support.prometheus import PrometheusServer, free_port, serve_text_exporter

pytestmark = pytest.mark.integration
BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SCOPE = Scope("serving", pods=("vllm-0",))


class Live:
    def __init__(self, prometheus: PrometheusServer, exporter_url: str, registry: CollectorRegistry) -> None:
        self.prometheus = prometheus
        self.exporter_url = exporter_url
        self.registry = registry
        self.client = PrometheusClient(prometheus.url, timeout=5, retries=1, backoff=0.1)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    registry = CollectorRegistry()
    latency = Histogram(
        "vllm:e2e_request_latency_seconds", "e2e", ["namespace", "pod"], buckets=BUCKETS, registry=registry
    )
    kv = Gauge("vllm:kv_cache_usage_perc", "kv", ["namespace", "pod"], registry=registry)
    oom = Counter("container_oom_events", "oom", ["namespace", "pod"], registry=registry)
    kv.labels("serving", "vllm-0").set(0.42)
    kv.labels("other", "vllm-0").set(0.99)  # another namespace: must never leak into the scope
    oom.labels("serving", "vllm-0").inc(0)
    latency.labels("serving", "vllm-0")  # the series exist (all zero) before anything is observed
    port = free_port()
    server, thread = serve_text_exporter(registry, port)
    tmp = tmp_path_factory.mktemp("prom-live")
    try:
        with PrometheusServer(tmp / "data", [f"127.0.0.1:{port}"]) as prometheus:
            prometheus.wait_for('vllm:e2e_request_latency_seconds_count{pod="vllm-0"}')
            # Observed after the first scrape saw zeros, so rate() sees all of it: 98 % at 0.3 s, 2 % at 2 s.
            child = latency.labels("serving", "vllm-0")
            for _ in range(980):
                child.observe(0.3)
            for _ in range(20):
                child.observe(2.0)
            oom.labels("serving", "vllm-0").inc(2)
            prometheus.wait_for("vllm:e2e_request_latency_seconds_count == 1000")
            prometheus.wait_for("container_oom_events_total == 2")
            yield Live(prometheus, f"http://127.0.0.1:{port}/metrics", registry)
    finally:
        server.shutdown()  # type: ignore[attr-defined]
        thread.join(timeout=5)  # type: ignore[attr-defined]


def test_instant_query_scoped_by_namespace_and_pod(live: Live) -> None:
    query = standard_queries(SCOPE)[names.KV_CACHE_USAGE].promql
    samples = live.client.instant(query)
    assert [s.value for s in samples] == [0.42]


def test_range_query_with_step(live: Live) -> None:
    now = live.client.instant("time()")[0].value
    series = live.client.range('vllm:kv_cache_usage_perc{namespace="serving"}', now - 4, now, 1.0)
    assert len(series) == 1
    assert series[0].labels["pod"] == "vllm-0"
    assert len(series[0].times) >= 2 and set(series[0].values.tolist()) == {0.42}
    assert all(b - a == pytest.approx(1.0) for a, b in zip(series[0].times, series[0].times[1:], strict=False))


def test_histogram_p99_matches_bucket_interpolation(live: Live) -> None:
    query = standard_queries(SCOPE, window=30)["latency_p99"].promql
    assert "sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{" in query
    (sample,) = live.client.instant(query)
    # 990th of 1000 lies in (1, 2.5]: 1 + 1.5 x 10/20 = 1.75 s, though the true P99 is 2 s.
    buckets = {
        s.labels["le"]: s.value
        for s in live.client.instant('vllm:e2e_request_latency_seconds_bucket{namespace="serving"}')
    }
    bounds = sorted(float(le) for le in buckets)
    counts = [buckets[le] for le in sorted(buckets, key=float)]
    assert sample.value == pytest.approx(1.75)
    assert quantile_from_buckets(0.99, bounds, counts) == pytest.approx(sample.value)
    warning = wide_bucket_warning(bounds, 1.15 * sample.value, 0.15)
    assert warning is not None and "1..2.5s" in warning


def test_bad_promql_is_reported_with_prometheus_message(live: Live) -> None:
    with pytest.raises(
        PromQLError, match=r"rejected query 'sum\(rate\(x\[5m\]\)': .*parse error: unclosed left parenthesis"
    ):
        live.client.instant("sum(rate(x[5m])")


def test_unreachable_server_is_a_clear_error() -> None:
    client = PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout=1, retries=1, backoff=0.05)
    with pytest.raises(PrometheusUnreachable, match="unreachable"):
        client.instant("up")


def test_snapshot_keeps_series_errors_and_absences(live: Live) -> None:
    now = live.client.instant("time()")[0].value
    catalog = with_user_queries(standard_queries(SCOPE, window=30), {"broken": "rate(", "up_count": "sum(up)"})
    result = snapshot(live.client, catalog.values(), now - 10, now, 1.0)
    # The exporter has cAdvisor's counter but no kube-state-metrics: the OOM-kill join finds nothing.
    assert result.missing(names.OOM_KILLS) == f"series {names.OOM_KILLS} missing from the metrics"
    assert result.missing("oom_kills_cadvisor") is None
    assert result.series[names.KV_CACHE_USAGE].values[-1] == 0.42
    assert "rejected query" in (result.missing("broken") or "")
    assert result.missing(names.GPU_MEMORY_USED) == f"series {names.GPU_MEMORY_USED} missing from the metrics"
    assert result.series["up_count"].values[-1] == 1


def test_snapshot_of_an_unreachable_server_says_so() -> None:
    client = PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout=1, retries=0)
    result = snapshot(client, standard_queries(SCOPE).values(), 0, 10, 1)
    assert result.unreachable and "unreachable" in (result.missing(names.OOM_KILLS) or "")


def test_direct_scrape_reads_the_same_exporter(live: Live) -> None:
    source = ScrapeSource(live.exporter_url)
    assert source.scrape(at=100.0) > 0
    source.scrape(at=101.0)
    (kv,) = source.instant('vllm:kv_cache_usage_perc{namespace="serving"}')
    assert kv.value == 0.42 and kv.labels["pod"] == "vllm-0"
    (oom,) = source.range('container_oom_events_total{namespace="serving"}', 0, 200, 1)
    assert oom.values.tolist() == [2.0, 2.0]
    with pytest.raises(PromQLError, match="only name"):
        source.instant("sum(up)")


def test_direct_scrape_of_a_closed_port() -> None:
    with pytest.raises(PrometheusUnreachable):
        ScrapeSource(f"http://127.0.0.1:{free_port()}/metrics", timeout=1).scrape()


def test_scope_escapes_pod_names_and_adds_matchers(tmp_path: Path) -> None:
    scope = Scope("serving", pods=("vllm-0", "a.b"))
    assert scope.matchers('reason="OOMKilled"') == r'namespace="serving",pod=~"vllm\\-0|a\\.b",reason="OOMKilled"'


def test_snapshot_for_experiment_reads_the_configured_prometheus(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    from kfchaos.metrics.collect import PROMETHEUS_ENV, snapshot_for_experiment
    from tests.verdict.builders import experiment

    spec = experiment()  # namespace "serving", no capture section
    monkeypatch.delenv(PROMETHEUS_ENV, raising=False)
    assert "no Prometheus configured" in (snapshot_for_experiment(spec, (0, 1)).unreachable or "")
    monkeypatch.setenv(PROMETHEUS_ENV, live.prometheus.url)
    now = live.client.instant("time()")[0].value
    result = snapshot_for_experiment(spec, (now - 20, now), step=1.0)
    assert result.unreachable is None
    assert result.grace == 1.0  # the server's scrape interval, read from its configuration
    # cAdvisor alone is no count of OOM kills: without kube-state-metrics the count is missing, and says why.
    assert "kube-state-metrics" in (result.missing(names.OOM_KILLS) or "")
    assert result.series["oom_kills_cadvisor"].values[-1] in (0.0, 2.0)  # counted per series, as events
