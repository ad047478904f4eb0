"""Issue 31 class 7: a baseline is one target's. Two days of history of a namespace serving two models (vLLM's series
carry `model_name`), backfilled with promtool into a real Prometheus; `kfchaos baseline capture` keeps to the
experiment's model, refuses a namespace of several models without one, and records its scope; `kfchaos verdict`
refuses a baseline captured for another target."""

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
PER_MINUTE = 600.0
BOUNDS = ("0.5", "1", "2", "5", "+Inf")
# llama: 90 % <= 0.5 s, 98 % <= 1 s, 99.5 % <= 2 s: every 5-minute P99 is 1 + (0.99 - 0.98) / (0.995 - 0.98) s.
LLAMA = (0.90, 0.98, 0.995, 1.0, 1.0)
LLAMA_P99 = 1.0 + (0.99 - 0.98) / (0.995 - 0.98)
# mistral, beside it in the namespace: slow, every request between 2 and 5 s.
MISTRAL = (0.0, 0.0, 0.0, 1.0, 1.0)


def history(start: int, end: int) -> str:
    times = np.arange(start, end, STEP)
    lines = ["# TYPE vllm:e2e_request_latency_seconds histogram"]
    for pod, model, fractions in (("llama-0", "llama", LLAMA), ("mistral-0", "mistral", MISTRAL)):
        labels = f'namespace="serving",pod="{pod}",model_name="{model}"'
        counts = np.cumsum(np.tile(np.array(fractions) * PER_MINUTE, (len(times), 1)), axis=0)
        for index, le in enumerate(BOUNDS):
            lines += [f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="{le}"}} {v!r} {t}'
                      for t, v in zip(times.tolist(), counts[:, index].tolist(), strict=True)]  # fmt: skip
        lines += [f"vllm:e2e_request_latency_seconds_count{{{labels}}} {v!r} {t}"
                  for t, v in zip(times.tolist(), counts[:, -1].tolist(), strict=True)]  # fmt: skip
        lines += [f"vllm:e2e_request_latency_seconds_sum{{{labels}}} {0.3 * v!r} {t}"
                  for t, v in zip(times.tolist(), counts[:, -1].tolist(), strict=True)]  # fmt: skip
    lines.append("# TYPE kube_pod_container_status_restarts counter")
    for pod in ("llama-0", "mistral-0"):
        container = f'namespace="serving",pod="{pod}",uid="u-{pod}",container="vllm"'
        lines += [f"kube_pod_container_status_restarts_total{{{container}}} 0.0 {t}" for t in times.tolist()]
    return "\n".join([*lines, "# EOF", ""])


EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {{name: scoped, version: 1.0.0, owner: tests}}
spec:
  target:
    namespace: serving
    selector: {{labels: {{app: {app}}}}}
    endpoint: "{endpoint}"
{api}
  traffic: {{synthetic: {{rate: 100}}, stages: [100], stage_duration: 2s}}
  slo: {{p99_drift_max: 15%}}
  baseline:
    file: {baseline}
    capture:
      prometheus: "{prometheus}"
      days: 2
      step: 5m
      end: "{end}"
      detect_releases: false
      short_history: two days of test history
"""


@dataclass
class History:
    url: str
    end: str
    folder: Path

    def experiment(self, name: str, model: str | None, app: str = "vllm", endpoint: str = "http://127.0.0.1:9") -> Path:
        api = f"    api: openai-completions\n    model: {model}" if model else ""
        path = self.folder / f"{name}.yaml"
        path.write_text(EXPERIMENT.format(app=app, endpoint=endpoint, api=api, baseline=f"{name}.baseline.yaml",
                                          prometheus=self.url, end=self.end))  # fmt: skip
        return path


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    end = int(time.time()) // 3600 * 3600 - 3600
    tmp = tmp_path_factory.mktemp("prom-models")
    backfill(tmp / "data", history(end - 2 * 86400 - 600, end + 60))
    with PrometheusServer(tmp / "data") as server:
        yield History(server.url, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end)), tmp)


def test_capture_keeps_to_the_targets_model_and_records_its_scope(prom: History) -> None:
    experiment = prom.experiment("llama", "llama")
    done = kfchaos("baseline", "capture", "--experiment", str(experiment))
    assert done.returncode == 0, done.stderr
    baseline = yaml.safe_load(experiment.with_name("llama.baseline.yaml").read_text())
    # Before: the namespace's two models were one histogram, whose P99 was mistral's slow tail.
    assert baseline["series"]["latency_p99"]["median"] == pytest.approx(LLAMA_P99, rel=1e-6)
    assert baseline["scope"] == {
        "namespace": "serving",
        "model": "llama",
        "selector": {"labels": {"app": "vllm"}, "expressions": []},
        "pods": ["llama-0"],
        "endpoint": "http://127.0.0.1:9",
    }


def test_capture_of_a_namespace_of_several_models_without_a_model_is_refused(prom: History) -> None:
    experiment = prom.experiment("anymodel", None)
    done = kfchaos("baseline", "capture", "--experiment", str(experiment))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "namespace 'serving' serves 2 models (llama, mistral)" in done.stderr
    assert not experiment.with_name("anymodel.baseline.yaml").exists()


@pytest.mark.parametrize(("model", "app", "field"), [("mistral", "vllm", "model"), ("llama", "other", "selector")])
def test_the_verdict_refuses_a_baseline_of_another_target(
    prom: History, tmp_path: Path, model: str, app: str, field: str
) -> None:
    captured = prom.experiment("scoped", "llama")
    done = kfchaos("baseline", "capture", "--experiment", str(captured))
    assert done.returncode == 0, done.stderr
    with LoopbackServer(tokens=2, gap_ms=1) as server:
        other = prom.experiment("scoped-other", model, app=app, endpoint=server.url)
        records = tmp_path / "records.parquet"
        replayed = kfchaos("replay", "--experiment", str(other), "--stage", "100", "--target", server.url,
                           "--out", str(records), "--quiet", "--json")  # fmt: skip
        assert replayed.returncode in (0, 2), replayed.stderr
    # The other experiment has the same name: only the scope tells the baselines apart.
    assert json.loads(replayed.stdout)["stage"] == 100
    verdict = kfchaos("verdict", "--experiment", str(other), "--records", str(records), "--baseline",
                      str(captured.with_name("scoped.baseline.yaml")))  # fmt: skip
    assert verdict.returncode == 3, verdict.stdout + verdict.stderr
    assert f"scope.{field}: captured for" in verdict.stderr
