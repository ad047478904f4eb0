"""Issue 31 class 8, first half: how sure a baseline is. Two days of vLLM history in two namespaces with the same
latency distribution (a P99 of 97.5 ms, buckets fine enough to resolve a 15 % drift), one busy (3000 requests in
each 5-minute interval), one quiet (30): backfilled with promtool, captured by `kfchaos baseline capture` (which
records the requests each interval rests on), and a run of `kfchaos replay` against a loopback server judged by
`kfchaos verdict` against each. An interval P99 of 30 requests is their slowest: the quiet baseline cannot
resolve a P99, and its drift check is INCONCLUSIVE, saying how many requests it rests on; before, it PASSed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.support.prometheus import PrometheusServer, backfill
from tests.traffic.loopback_server import LoopbackServer
from tests.verdict.world import kfchaos

pytestmark = pytest.mark.integration
STEP = 60
# Cumulative share of requests at or below each bound: the P99 interpolates to 0.095 + 0.5 x 0.005 = 0.0975 s, and
# the 15 % drift limit (0.112 s) lies in the 0.11..0.115 bucket: both resolved.
BUCKETS = {"0.05": 0.5, "0.08": 0.9, "0.09": 0.97, "0.095": 0.985, "0.1": 0.995, "0.105": 0.998, "0.11": 0.999,
           "0.115": 1.0, "0.12": 1.0, "0.5": 1.0, "+Inf": 1.0}  # fmt: skip
P99 = 0.0975
PER_MINUTE = {"busy": 600.0, "quiet": 6.0}


def history(start: int, end: int) -> str:
    times = np.arange(start, end, STEP)
    lines = ["# TYPE vllm:e2e_request_latency_seconds histogram"]
    for namespace, rate in PER_MINUTE.items():
        labels = f'namespace="{namespace}",pod="vllm-0",model_name="m"'
        minutes = np.arange(1, len(times) + 1, dtype=float)
        for le, share in BUCKETS.items():
            lines += [f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="{le}"}} {share * rate * m!r} {t}'
                      for t, m in zip(times.tolist(), minutes.tolist(), strict=True)]  # fmt: skip
        lines += [f"vllm:e2e_request_latency_seconds_count{{{labels}}} {rate * m!r} {t}"
                  for t, m in zip(times.tolist(), minutes.tolist(), strict=True)]  # fmt: skip
        lines += [f"vllm:e2e_request_latency_seconds_sum{{{labels}}} {0.05 * rate * m!r} {t}"
                  for t, m in zip(times.tolist(), minutes.tolist(), strict=True)]  # fmt: skip
    return "\n".join([*lines, "# EOF", ""])


EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {{name: precise, version: 1.0.0, owner: tests}}
spec:
  target:
    namespace: {namespace}
    selector: {{labels: {{app: vllm}}}}
    endpoint: "{endpoint}"
    api: openai-completions
    model: m
  traffic:
    synthetic: {{rate: 300, arrival: constant, prompt_tokens: {{distribution: fixed, mean: 8}}}}
    stages: [100]
    stage_duration: 2s
  slo: {{p99_drift_max: 15%, p99_max: 5s}}
  baseline:
    file: {namespace}.baseline.yaml
    capture:
      prometheus: "{prometheus}"
      days: 2
      step: 5m
      end: "{end}"
      detect_releases: false
      short_history: two days of test history
"""


@dataclass
class Setup:
    prometheus: str
    end: str
    folder: Path
    records: Path
    endpoint: str


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    end = int(time.time()) // 3600 * 3600 - 3600
    tmp = tmp_path_factory.mktemp("prom-precision")
    backfill(tmp / "data", history(end - 2 * 86400 - 600, end + 60))
    records = tmp / "records.parquet"
    with PrometheusServer(tmp / "data") as server, LoopbackServer(tokens=2, gap_ms=1) as target:
        setup = Setup(server.url, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end)), tmp, records, target.url)
        experiment = _experiment(setup, "busy")
        done = kfchaos("replay", "--experiment", str(experiment), "--stage", "100", "--target", target.url,
                       "--out", str(records), "--quiet", "--json")  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        yield setup


def _experiment(setup: Setup, namespace: str) -> Path:
    path = setup.folder / f"{namespace}.yaml"
    path.write_text(EXPERIMENT.format(namespace=namespace, endpoint=setup.endpoint, prometheus=setup.prometheus,
                                      end=setup.end))  # fmt: skip
    return path


def _drift(setup: Setup, namespace: str) -> dict[str, object]:
    experiment = _experiment(setup, namespace)
    captured = kfchaos("baseline", "capture", "--experiment", str(experiment))
    assert captured.returncode == 0, captured.stderr
    done = kfchaos("verdict", "--experiment", str(experiment), "--records", str(setup.records), "--json")
    stage = json.loads(done.stdout)["stages"][0]
    return next(c for c in stage["checks"] if c["name"] == "p99_drift")


def test_capture_records_the_requests_each_interval_rests_on(setup: Setup) -> None:
    experiment = _experiment(setup, "quiet")
    assert kfchaos("baseline", "capture", "--experiment", str(experiment)).returncode == 0
    precision = yaml.safe_load(experiment.with_name("quiet.baseline.yaml").read_text())["precision"]
    assert precision["step"] == 300.0 and precision["intervals"] >= 570
    assert precision["requests_median"] == pytest.approx(30.0, rel=0.02)


def test_a_baseline_of_busy_intervals_judges_the_drift(setup: Setup) -> None:
    check = _drift(setup, "busy")
    assert check["status"] == "PASS", check
    assert check["details"]["baseline_p99"] == pytest.approx(P99, rel=1e-3)


def test_a_baseline_of_quiet_intervals_cannot_resolve_a_p99(setup: Setup) -> None:
    check = _drift(setup, "quiet")
    # The same P99 from intervals of 30 requests: before, the drift PASSed against it.
    assert check["status"] == "INCONCLUSIVE", check
    assert "the baseline P99 rests on intervals of 30 requests" in str(check["reason"])
    assert "needs at least 368 requests" in str(check["reason"])
