"""Every vLLM series kfchaos reads comes from the real engine's /metrics, scraped by a real Prometheus under a pod's
labels (tests/engine/conftest.py): the standard queries, the metrics step's snapshot, the server's own request count,
the OOM evidence's KV-cache item and the baseline capture all find it, and what this engine does not have -- the
cluster's series (kube-state-metrics, cAdvisor, DCGM) and vLLM's removed names (vllm:gpu_cache_usage_perc before
0.9.2, vllm:time_per_output_token_seconds before 0.11) -- is reported missing, never read as zero.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from kfchaos.demo.stack.vllmengine import MODEL_NAME, EngineServer
from kfchaos.evidence import prom as evidence_prom
from kfchaos.metrics import names, oom, served
from kfchaos.metrics.catalog import Scope, standard_queries
from kfchaos.metrics.collect import PROMETHEUS_ENV, snapshot, snapshot_for_experiment
from kfchaos.metrics.prometheus import PrometheusClient
from kfchaos.spec import Experiment
from kfchaos.validate import parse_experiment
from tests.engine.benchclient import wait_idle
from tests.engine.conftest import CONTAINER, NAMESPACE, POD, metrics_text, post_json
from tests.support.prometheus import PrometheusServer
from tests.verdict.builders import experiment_text

pytestmark = pytest.mark.integration

SCOPE = Scope(namespace=NAMESPACE, pods=(POD,), model=MODEL_NAME)
STEP = 2.0
WINDOW = 30.0  # the rate window of the queries: a few requests in it give every vLLM series a value
REQUESTS = 4
# Series of vLLM's /metrics kfchaos reads outside the standard queries, where it reads them.
READ_ELSEWHERE = {
    "vllm:e2e_request_latency_seconds_count": "kfchaos.metrics.served COUNTER, kfchaos.baselinecapture MODEL_SERIES",
    "vllm:e2e_request_latency_seconds_bucket": "kfchaos.baselinecapture _latency_histogram",
    "vllm:kv_cache_usage_perc": "kfchaos.evidence.prom kv_cache, kfchaos.verdict.abortstorm",
    "vllm:num_preemptions_total": "kfchaos.evidence.prom kv_cache",
    "vllm:num_requests_running": "kfchaos.verdict.abortstorm",
    "vllm:lora_requests_info": "kfchaos.faults.lorachurn",
    "http_requests_total": "the standard query `errors` (vLLM's HTTP instrumentator)",
}
# Renamed or removed by vLLM; kfchaos must not read them as zero (the catalog names neither).
GONE = ("vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds")
# Standard queries over series a cluster exports and this machine has not: kube-state-metrics, cAdvisor, DCGM.
CLUSTER_SERIES = (
    names.OOM_KILLS,
    "oom_kills_cadvisor",
    "oom_terminated_containers",
    names.RESTARTS,
    names.GPU_MEMORY_USED,
    names.GPU_MEMORY_FREE,
    names.GPU_UTIL,
    "deployment_generation",
)


def family_names(text: str) -> set[str]:
    """Every sample name in a /metrics text (histogram parts and counters' _total included)."""
    return {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}


def prometheus_now(client: PrometheusClient) -> float:
    return client.instant("time()")[0].value


def traffic_window(server: EngineServer, client: PrometheusClient) -> tuple[float, float]:
    """REQUESTS completions sent to an idle engine, between two fresh scrapes: (start, end) on Prometheus's clock
    holds exactly these requests in the server's counter (a request of an earlier test is in the first sample)."""
    wait_idle(server)
    assert served.wait_fresh(client, SCOPE, timeout=15.0), "no fresh scrape of the engine's counter"
    start = prometheus_now(client)
    for i in range(REQUESTS):
        status, answer = post_json(
            f"{server.url}/v1/completions",
            {"model": MODEL_NAME, "prompt": f"[g{i}] the river stone", "max_tokens": 8, "ignore_eos": True},
        )
        assert status == 200, answer
    wait_idle(server)
    assert served.wait_fresh(client, SCOPE, timeout=15.0), "no fresh scrape of the engine's counter"
    fresh = prometheus_now(client)
    # More than a step of the query grid after the fresh scrape and two after the start, so that a range query over
    # the window has a point before the requests (the counter's level) and one after their last sample.
    while (end := prometheus_now(client)) < max(start + 2 * STEP, fresh + STEP) + 1.0:
        time.sleep(0.25)
    return start, end


def test_every_vllm_name_kfchaos_reads_is_on_the_real_engine(vllm_engine: EngineServer) -> None:
    # One request first: vLLM sets vllm:lora_requests_info when it records an engine step's scheduler stats
    # (vllm/v1/metrics/loggers.py record: `if self.gauge_lora_info is not None`), so a fresh engine that has
    # served nothing has no such series yet, --enable-lora or not.
    status, answer = post_json(
        f"{vllm_engine.url}/v1/completions", {"model": MODEL_NAME, "prompt": "the", "max_tokens": 2}
    )
    assert status == 200, answer
    wait_idle(vllm_engine)
    present = family_names(metrics_text(vllm_engine))
    read = set(READ_ELSEWHERE)
    for query in standard_queries(SCOPE).values():
        read |= set(re.findall(r"vllm:[a-z0-9_]+", query.promql))
    missing = sorted(name for name in read if name not in present)
    assert not missing, f"kfchaos reads series vLLM 0.32 does not export: {missing}"
    # The renamed ones are gone (no sample of any part), and no standard query names them.
    assert not {n for n in present for gone in GONE if n.startswith(gone)}
    assert not any(gone in q.promql for q in standard_queries(SCOPE).values() for gone in GONE)


def test_standard_queries_and_the_snapshot_read_the_real_engine(
    vllm_engine: EngineServer, vllm_prometheus: PrometheusServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    client = PrometheusClient(vllm_prometheus.url)
    start, end = traffic_window(vllm_engine, client)
    queries = standard_queries(SCOPE, window=WINDOW, step=STEP)
    shot = snapshot(client, queries.values(), start, end + STEP, STEP)
    assert shot.unreachable is None and not shot.errors, shot.errors
    vllm_sourced = [n for n in queries if n not in CLUSTER_SERIES and n != "errors"]
    for name in vllm_sourced:
        assert shot.missing(name) is None, f"{name}: {shot.missing(name)} ({queries[name].promql})"
        values = shot.series[name].values
        assert any(v == v for v in values), f"{name} has no finite value: {queries[name].promql}"
    # What the traffic must show: latencies of finished requests, a cache in use, no preemption, no hit in a prompt
    # cache of 128-token blocks for 8-token prompts.
    assert np.nanmax(shot.series["latency_p99"].values) > 0
    assert 0 <= np.nanmax(shot.series[names.KV_CACHE_USAGE].values) <= 1
    assert np.nanmax(shot.series[names.PREEMPTIONS].values) == 0
    # The cluster's series are absent here: each is named missing, none is a series of zeros.
    for name in CLUSTER_SERIES:
        assert name not in shot.series
        assert shot.missing(name) == f"series {name} missing from the metrics"
    # `errors` counts HTTP 5xx answers: vLLM's instrumentator (prometheus-fastapi-instrumentator) makes a status
    # group's series at its first answer, so a server that never answered 5xx has none -- the query finds nothing
    # and the snapshot says it is missing, never 0 (the verdict judges errors from the records, not from this).
    present = family_names(metrics_text(vllm_engine))
    assert "http_requests_total" in present
    assert 'status="5xx"' not in metrics_text(vllm_engine)
    assert shot.missing("errors") == "series errors missing from the metrics"
    # The server's own count over the window: exactly the requests sent (kfchaos.metrics.served).
    counted = served.served(client, SCOPE, start, end, STEP)
    assert counted.series[names.SERVER_REQUESTS].increase(start, end) == REQUESTS
    # A removed name read through kfchaos's client is no series at all, not a zero.
    for gone in GONE:
        assert client.instant(f"{gone}{{{SCOPE.vllm_matchers()}}}") == []
        assert client.instant(f"{gone}_bucket{{{SCOPE.vllm_matchers()}}}") == []

    # The metrics step's own entry (kfchaos.metrics.collect.snapshot_for_experiment): the experiment's target
    # scopes it; the OOM counts come from kube-state-metrics, absent here, so they are missing, not 0.
    monkeypatch.setenv(PROMETHEUS_ENV, vllm_prometheus.url)
    experiment = target_experiment(tmp_path)
    full = snapshot_for_experiment(experiment, (start, end), step=STEP, pods=(POD,), read_log=None)
    assert full.unreachable is None
    assert full.grace == 1.0  # the fixture's scrape interval, read from Prometheus's configuration
    assert full.series[names.SERVER_REQUESTS].increase(start, end) == REQUESTS
    for name in vllm_sourced:
        assert full.missing(name) is None, f"{name}: {full.missing(name)}"
    for name in oom.OOM_SERIES:
        assert full.missing(name) is not None, f"{name} read as {full.series[name].values} without kube-state-metrics"
    assert full.clock is not None and abs(full.clock["skew_s"]) < 1.0  # same machine, same clock


def target_experiment(tmp_path: Path) -> Experiment:
    text = experiment_text().replace(
        "    namespace: serving\n", f"    namespace: {NAMESPACE}\n    model: {MODEL_NAME}\n"
    )
    path = tmp_path / "experiment.yaml"
    path.write_text(text)
    return parse_experiment(text, str(path))


def test_the_oom_evidence_reads_the_engines_kv_cache_and_names_what_is_absent(
    vllm_engine: EngineServer, vllm_prometheus: PrometheusServer
) -> None:
    client = PrometheusClient(vllm_prometheus.url)
    start, end = traffic_window(vllm_engine, client)
    window = (start - 10.0, end)
    item = evidence_prom.kv_cache(client, NAMESPACE, POD, window, 1.0, kill=None)
    assert item.collected, item.why_not
    # The current name answered: the pre-0.9.2 fallback was not needed.
    assert item.data["queries"][0].startswith("max(vllm:kv_cache_usage_perc{")
    assert item.data["usage"] and all(0.0 <= v <= 1.0 for _, v in item.data["usage"])
    assert item.data["preemptions"] == 0 and item.findings == {"kv_cache_full": False, "preemptions": False}
    # cAdvisor and DCGM are not scraped here: each item says the series is absent rather than showing 0.
    memory = evidence_prom.memory(client, NAMESPACE, POD, CONTAINER, window, 1.0, kill=None)
    events = evidence_prom.cgroup_oom_events(client, NAMESPACE, POD, CONTAINER, window, 1.0)
    gpu = evidence_prom.gpu_memory(client, NAMESPACE, POD, window, 1.0, kill=None)
    for absent in (memory, events, gpu):
        assert not absent.collected and absent.why_not is not None and absent.why_not.startswith("series absent")


def test_baseline_capture_from_the_live_engine(
    vllm_engine: EngineServer, vllm_prometheus: PrometheusServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kfchaos baseline capture` against the live engine's Prometheus. A baseline stands for days of production
    (kfchaos.baselinecapture MIN_DAYS); this Prometheus holds minutes, so the capture asks for one day with
    --short-history, which is then recorded in the baseline (the days-of-history path itself is covered on
    backfilled history by tests/metrics/test_baseline_capture.py). What this shows is that the capture's
    queries find the real engine's series under the target's scope: latency P99s, requests, bucket bounds."""
    from kfchaos.baseline import load_baseline
    from kfchaos.cli import main

    client = PrometheusClient(vllm_prometheus.url)
    traffic_window(vllm_engine, client)
    experiment = tmp_path / "experiment.yaml"
    target_experiment(tmp_path)
    out = tmp_path / "baseline.yaml"
    argv = [
        "baseline", "capture", "--experiment", str(experiment), "--prometheus", vllm_prometheus.url,
        "--days", "1", "--step", "10s", "--pod", POD, "--short-history", "minutes of a test engine",
        "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    baseline, _ = load_baseline(out)
    assert baseline.series["latency_p99"].median > 0
    assert baseline.totals.requests >= REQUESTS
    # No 5xx series on a healthy vLLM (see above): the error count is unknown, not 0.
    assert baseline.totals.errors is None and baseline.totals.error_rate is None
    # Without kube-state-metrics the OOM kills are unknown too.
    assert baseline.totals.oom_kills is None
    assert baseline.latency_histogram is not None and len(baseline.latency_histogram.bounds) > 5
    assert baseline.coverage is not None and baseline.coverage.override == "minutes of a test engine"
    queries = yaml.safe_load(out.read_text())["provenance"]["queries"]
    assert SCOPE.vllm_matchers() in queries["latency_p99"]  # the target's namespace, pod and model
    print(f"baseline from the live engine: {baseline.summary()} ({time.time():.0f})")
