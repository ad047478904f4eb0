"""Real run folders from the demo: the bundled demo LLM server behind its fault proxy (kfchaos.demo.stack), a
network-delay fault put on the proxy by the demo's own fault backend (kfchaos.demo.faults.local_backend, what the
pipeline's tasks call), each stage replayed by `kfchaos replay` and judged by `kfchaos verdict --out` with the
fault's verified windows as the run state, both through the CLI's entry point.

The pipeline under kfp.local makes the same folder, but at 56-76 s a run on a busy 2-core machine (a subprocess per
task, a recovery probe, a metrics scrape per stage) twelve of them would take 12-15 minutes. This path keeps the
parts the history reads (the server, the proxy's delay, the replayer's records, the verdict, the sealed folder) and
leaves out the orchestration and the metrics: each verdict is INCONCLUSIVE (OOM kills unknown without metrics),
which no latency comparison reads: the history compares each check and stage on its own."""

from __future__ import annotations

import contextlib
import io
import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from kfchaos.cli import main as kfchaos
from kfchaos.demo.faults.local_backend import LocalFaultBackend
from kfchaos.demo.stack.demostack import DemoStack
from kfchaos.validate import load_experiment

NAME = "history-demo"
STAGES = (75, 100)
# 130 req/s for 4 s a stage: 390 and 520 requests, past the 368 a P99 check needs to PASS with none above its limit
# (Clopper-Pearson at 95 %), and past the 299 the control needs for a P99 interval. Two tokens of the demo's
# 330 ms decode steps: ~1 s a request, so a 200 ms delay is a ~+20 % drift and 800 ms ~+80 %: both inside the
# 100 % limit, so every run PASSes its drift check and the version's regression is told only across runs.
EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata:
  name: history-demo
  version: VERSION
  owner: test
  description: issue 47's demo case, a network delay against the demo LLM server
spec:
  target:
    namespace: demo
    selector:
      labels: {app: demo-llm}
    endpoint: http://127.0.0.1:9
    api: openai-completions
    model: demo/llama-3-8b-sim
    timeout: 10s
  traffic:
    synthetic:
      rate: 130
      prompt_tokens: {distribution: fixed, mean: 32}
      output_tokens: {distribution: fixed, mean: 2}
    stages: [75, 100]
    stage_duration: 4s
    warmup: 1s
    seed: 7
  faults:
    - name: network-delay
      type: network-delay
      mode: all
      params: {latency: LATENCY}
  slo:
    p99_drift_max: 100%
    p99_max: 10s
    error_rate_max: 1%
    min_samples: 300
  baseline:
    file: BASELINE
  safety:
    max_pod_percent: 100%
    max_fault_duration: 10m
"""


def experiment_file(directory: Path, version: str, latency: str, baseline: Path) -> Path:
    text = EXPERIMENT.replace("VERSION", version).replace("LATENCY", latency).replace("BASELINE", str(baseline))
    path = directory / f"{NAME}-{version}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def cli(*args: str) -> tuple[int, str]:
    """`kfchaos ARGS` through the CLI's entry point in this process (a process a call would cost ~2 s of start-up
    on a busy machine, twelve runs of three calls); its exit code and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = kfchaos(list(args))
    return code, out.getvalue()


def _proxy_fault(stack: DemoStack, name: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{stack.control_url}/faults/{name}", timeout=5) as response:
        fault: dict[str, Any] = json.loads(response.read())
        return fault


@dataclass(frozen=True)
class DemoRun:
    run_id: str
    version: str
    latency: str
    folder: Path
    verdict_code: int
    seconds: float

    def drift(self) -> dict[int, float | None]:
        """p99_drift per stage as the run's verdict measured it."""
        verdict = json.loads((self.folder / "verdict.json").read_text())
        return {
            stage["stage"]: next((c.get("value") for c in stage["checks"] if c["name"] == "p99_drift"), None)
            for stage in verdict["stages"]
        }

    def statuses(self, check: str) -> dict[int, str]:
        verdict = json.loads((self.folder / "verdict.json").read_text())
        return {
            stage["stage"]: next((c["status"] for c in stage["checks"] if c["name"] == check), "-")
            for stage in verdict["stages"]
        }


def make_run(stack: DemoStack, experiment: Path, runs: Path, work: Path, run_id: str, latency: str) -> DemoRun:
    """One run: the fault on the proxy for the whole ramp (as its first stage's task applies it and its last one
    removes it), each stage replayed through the proxy, then the verdict written as a sealed run folder."""
    started = time.monotonic()
    spec = load_experiment(experiment)
    (fault,) = spec.spec.faults
    backend = LocalFaultBackend(spec, run_id, stack.control_url, stack.state_file)
    records = work / run_id / "records"
    records.mkdir(parents=True)
    handle = backend.apply(fault)
    windows: list[dict[str, float]] = []
    try:
        backend.wait_injected(handle)
        for stage in STAGES:
            # The window each stage is judged on (the run state's fault_windows, as a stage task records them): the
            # proxy held the fault when the replay began and still when it ended, and the proxy drops a fault only
            # when it is removed, expires, or its owner (this process) dies.
            assert backend.is_active(handle), f"{run_id}: {fault.name} not active before stage {stage}"
            began = time.time()
            code, said = cli(
                "replay", "--experiment", str(experiment), "--stage", str(stage), "--target", stack.target_url,
                "--out", str(records / f"stage-{stage}.parquet"), "--quiet",
            )  # fmt: skip
            ended = time.time()
            # 2: the replayer fell behind its schedule (INVALID): the run would be INCONCLUSIVE, not a measurement
            assert code == 0, f"{run_id} stage {stage}: replay exit {code}\n{said[-2000:]}"
            assert backend.is_active(handle), f"{run_id}: {fault.name} ended during stage {stage}"
            windows.append({"from": began, "to": ended, "stage": stage})
        hits = int(_proxy_fault(stack, handle.name)["hits"])
    finally:
        backend.remove(handle)
    state = work / run_id / "run-state.json"
    state.write_text(
        json.dumps(
            {
                "faults_verified": {fault.name: True},
                "fault_windows": [{"fault": fault.name, "watched_in": list(STAGES), "verified": windows}],
            }
        )
    )
    code, said = cli(
        "verdict", "--experiment", str(experiment), "--records", str(records), "--run-state", str(state),
        "--out", str(runs / run_id),
    )  # fmt: skip
    assert code in (0, 1, 2), f"{run_id}: verdict exit {code}\n{said[-2000:]}"
    run = DemoRun(run_id, spec.metadata.version, latency, runs / run_id, code, time.monotonic() - started)
    recorded = sum(pq.read_metadata(path).num_rows for path in records.glob("*.parquet"))
    assert hits >= recorded > 0, (run_id, hits, recorded)  # every recorded request went through the delay
    return run
