"""A real world for verdict tests (issue 31): every input of the verdict made by the part that makes it in a run.

- the target: the demo LLM server (kfchaos.demo.server: an OpenAI-compatible stream, vLLM's metric names, and the
  kube-state-metrics container series its supervisor passes in), scraped every second by a real Prometheus
  (kfchaos.demo.stack.demostack.DemoStack);
- the baseline: `kfchaos baseline capture` from that Prometheus after a stretch of "production" traffic, then
  `kfchaos baseline control` (a fault-free replay at each stage rate);
- the records: `kfchaos replay` of each stage (the experiment's own plan, or a misbehaving source a test gives);
- the metrics: kfchaos.metrics.collect.snapshot_for_experiment, as the pipeline's metrics step takes them;
- the verdict: `kfchaos verdict` on those files, its exit code and JSON.

A well-behaved run PASSes here (tests/verdict/test_world.py shows it); each class test changes one source and
shows what the verdict makes of it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from kfchaos.demo.server.pod import DEMO_NAMESPACE, DEMO_POD
from kfchaos.demo.stack.demostack import DemoStack, ServerSettings
from tests.conftest import require_tool

MODEL = "demo/llama-3-8b-sim"
RATE = 40.0  # requests per second at 100 %: 400 requests in the 50 % stage, 800 in the 100 % one
STAGE_S = 20.0  # two 10 s windows of the delivered-rate check (kfchaos.verdict.load)

EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {{name: world, version: 1.0.0, owner: tests}}
spec:
  target:
    namespace: {namespace}
    selector: {{labels: {{app: demo-llm}}}}
    endpoint: {endpoint}
    api: openai-completions
    model: {model}
    timeout: 20s
  traffic:
    synthetic:
      rate: {rate:g}
      arrival: constant
      prompt_tokens: {{distribution: fixed, mean: 48}}
      output_tokens: {{distribution: fixed, mean: 6}}
    stages: {stages}
    stage_duration: {stage_s:g}s
    max_send_lag_p99: 250ms
  faults: []
  slo:
    p99_drift_max: 100%
    p99_max: 10s
    error_rate_max: 2%
    timeout_rate_max: 2%
    min_samples: 300
  abort:
    - {{metric: error_rate, above: 20%, window: 5s, consecutive: 2}}
  baseline:
    file: {baseline}
    capture: {{prometheus: "{prometheus}", days: 1, step: 5s, short_history: "the test's own minutes of history"}}
"""


# `kfchaos` on a machine whose clock is off by OFFSET seconds: every reading of the wall clock (time.time) in the
# process, the replayer's included, is that far from the real one.
SKEWED = """\
import sys, time
real = time.time
time.time = lambda: real() + {offset!r}
from kfchaos.cli import main
sys.exit(main())
"""


def kfchaos(*args: str, timeout: float = 300.0, clock_offset: float = 0.0) -> subprocess.CompletedProcess[str]:
    """The `kfchaos` command, as a user runs it (on a machine whose clock is `clock_offset` seconds off)."""
    command = [sys.executable, "-m", "kfchaos"]
    if clock_offset:
        command = [sys.executable, "-c", SKEWED.format(offset=clock_offset)]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class World:
    stack: DemoStack
    folder: Path
    experiment: Path
    baseline: Path
    # The well-behaved run's records, one file per stage (kfchaos replay --experiment).
    stages: dict[int, Path] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return self.stack.server_url

    def replay(self, stage: int, out: Path, *args: str, source: str | None = None, clock_offset: float = 0.0) -> Path:
        """`kfchaos replay` of one stage: the experiment's own plan, or `source` (a traffic file) with `args`; on
        a machine whose clock is `clock_offset` seconds off."""
        command = ["replay", "--target", self.target, "--stage", str(stage), "--out", str(out), "--quiet", "--json"]
        if source is None:
            command += ["--experiment", str(self.experiment)]
        else:
            command = ["replay", source, *command[1:], "--api", "openai-completions", "--model", MODEL]
        done = kfchaos(*command, *args, clock_offset=clock_offset)
        assert done.returncode in (0, 2), done.stderr[-3000:]
        assert out.is_file(), done.stderr[-3000:]
        return out

    def run_folder(self, name: str, stages: dict[int, Path]) -> Path:
        """A records folder of one run: the given per-stage files (copied, so tests never share one)."""
        folder = self.folder / name
        folder.mkdir()
        for stage, path in stages.items():
            shutil.copy(path, folder / f"stage-{stage}.parquet")
        return folder

    def metrics(self, records: Path, out: Path, clock_offset: float = 0.0) -> Path:
        """The run's metric series over its records' window, as the pipeline's metrics step takes them (on a
        machine whose clock is `clock_offset` seconds off)."""
        from kfchaos.metrics.collect import snapshot_for_experiment
        from kfchaos.validate import load_experiment

        table = pq.read_table(records, columns=["intended", "ended"]) if records.is_file() else None
        if table is None:
            import pyarrow.dataset as ds

            table = ds.dataset(records, format="parquet").to_table(columns=["intended", "ended"])
        start = float(table.column("intended").to_numpy().min())
        ended = table.column("ended").drop_null().to_numpy()
        end = float(ended.max()) if len(ended) else start
        self.stack.wait_scraped(after=end - clock_offset + 1.0)  # the counters hold every request answered
        experiment = load_experiment(self.experiment)
        if clock_offset:
            snapshot = snapshot_for_experiment(experiment, (start, end), clock=lambda: time.time() + clock_offset)
        else:
            snapshot = snapshot_for_experiment(experiment, (start, end))
        snapshot.write(out)
        return out

    def verdict(
        self,
        records: Path,
        *,
        metrics: Path | None = None,
        baseline: Path | None = None,
        experiment: Path | None = None,
        out: Path | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """`kfchaos verdict --json` on the files: (exit code, the verdict); with `out`, the run folder (its report)
        written there too."""
        if metrics is None:
            metrics = self.metrics(records, records.with_name(f"{records.name}.metrics.json"))
        args = ["verdict", "--experiment", str(experiment or self.experiment), "--records", str(records), "--json"]
        args += ["--metrics", str(metrics), "--baseline", str(baseline or self.baseline)]
        args += ["--out", str(out)] if out is not None else []
        done = kfchaos(*args)
        assert done.returncode in (0, 1, 2), done.stderr[-3000:]
        return done.returncode, json.loads(done.stdout)


def write_experiment(path: Path, stack: DemoStack, baseline: Path, **changes: Any) -> Path:
    values = {
        "namespace": DEMO_NAMESPACE,
        "endpoint": stack.server_url,
        "model": MODEL,
        "rate": RATE,
        "stage_s": STAGE_S,
        "stages": "[50, 100]",
        "baseline": str(baseline),
        "prometheus": stack.prometheus_url,
    } | changes
    path.write_text(EXPERIMENT.format(**values))
    return path


def start_world(folder: Path) -> Iterator[World]:
    """The stack, a baseline captured and controlled against it, and the well-behaved run's two stages."""
    require_tool("prometheus", "the verdict's world is scraped by a real Prometheus")
    # The tuned demo server (kfchaos.demo.runner.scenarios's "tuned" settings): no OOM kill at this load.
    settings = ServerSettings(max_num_seqs=128, gpu_memory_utilization=0.85, enable_prefix_caching=True)
    with DemoStack(settings, workdir=folder / "stack") as stack:
        baseline = folder / "baselines" / "world.yaml"
        experiment = write_experiment(folder / "world.yaml", stack, baseline)
        world = World(stack, folder, experiment, baseline)
        # Production: a stretch of traffic for Prometheus's histograms, then the figures captured from them.
        world.replay(100, folder / "production.parquet", "--duration", "10s")
        stack.wait_scraped(after=time.time() + 1.0)
        done = kfchaos("baseline", "capture", "--experiment", str(experiment), "--pod", DEMO_POD)
        assert done.returncode == 0, done.stderr[-3000:]
        done = kfchaos("baseline", "control", "--experiment", str(experiment), "--target", stack.server_url)
        assert done.returncode == 0, done.stderr[-3000:]
        for stage in (50, 100):
            world.stages[stage] = world.replay(stage, folder / "run" / f"stage-{stage}.parquet")
        yield world


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield from start_world(tmp_path_factory.mktemp("world"))
