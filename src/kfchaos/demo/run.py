"""`kfchaos demo`: a real chaos experiment on one machine, end to end, through the real compiled pipeline.

Two scenarios retell the classic incident of a large model that went live without chaos testing and was
OOM-killed again and again in its first hours:
- unsafe: vLLM defaults pushed for throughput (--max-num-seqs 256, --gpu-memory-utilization 0.95) under
  long-context traffic plus 200 ms of network delay -> FAIL, naming the OOM kills and the P99 drift;
- tuned: --max-num-seqs 96, --gpu-memory-utilization 0.85, --enable-prefix-caching -> PASS.
For each: start the demo stack (server under its supervisor, fault proxy, local Prometheus), capture the
scenario's baseline from Prometheus after a short fault-free replay, run the experiment's pipeline with
kfp.local (faults applied by the local backend through the proxy), and collect the run's artifacts into
runs/<run-id>/: verdict.json, report.html, report.md, requests.parquet, audit.json.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from kfchaos.demo.stack import DEMO_NAMESPACE, DEMO_POD, DemoStack, ServerSettings
from kfchaos.errors import KfchaosError

DEMO_EXPERIMENT = Path(__file__).with_name("experiments") / "demo-llm-chaos.yaml"
SCENARIOS: dict[str, tuple[str, ServerSettings]] = {
    "unsafe": (
        "--max-num-seqs 256 --gpu-memory-utilization 0.95",
        ServerSettings(max_num_seqs=256, gpu_memory_utilization=0.95, enable_prefix_caching=False, decode_step_ms=90),
    ),
    "tuned": (
        "--max-num-seqs 96 --gpu-memory-utilization 0.85 --enable-prefix-caching",
        ServerSettings(max_num_seqs=96, gpu_memory_utilization=0.85, enable_prefix_caching=True, decode_step_ms=90),
    ),
}
ARTIFACTS = {
    "verdict.json": ("verdict-report", "verdict_json"),
    "report.html": ("verdict-report", "report_html"),
    "report.md": ("verdict-report", "report_md"),
    "audit.json": ("verdict-report", "audit"),
}


@dataclass
class ScenarioResult:
    scenario: str
    settings: str
    status: str
    run_dir: Path
    reasons: list[str]
    oom_kills: int


def log(message: str) -> None:
    print(f"[demo {datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """The pipeline's tasks run as subprocesses of kfp.local and inherit these."""
    previous = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _capture_baseline(stack: DemoStack, experiment_path: Path, out: Path, seconds: float) -> Path:
    """A fault-free replay at 100 % while Prometheus scrapes, then a baseline captured from Prometheus."""
    from kfchaos.baseline import capture
    from kfchaos.metrics.catalog import Scope
    from kfchaos.metrics.prometheus import PrometheusClient
    from kfchaos.spec import load_experiment
    from kfchaos.traffic.api import plan_stage, run_stage

    if not stack.prometheus_url:
        raise KfchaosError("the demo needs Prometheus for its baseline: `make demo` installs it (Debian `prometheus`)")
    experiment = load_experiment(experiment_path)
    plan = plan_stage(experiment, 100, base_dir=experiment_path.parent, duration=seconds)
    run_stage(plan, stack.target_url, fault_active=False)
    time.sleep(3)  # two scrapes after the last request
    baseline = capture(
        experiment.metadata.name,
        PrometheusClient(stack.prometheus_url),
        Scope(DEMO_NAMESPACE, (DEMO_POD,)),
        end=datetime.now(UTC),
        days=1,
        step=5.0,
        drift=experiment.spec.slo.p99_drift_max,
    )
    return baseline.write(out)


def _scenario_experiment(workdir: Path, baseline: Path) -> Path:
    """The demo experiment with its baseline pointing at this scenario's freshly captured one."""
    document = yaml.safe_load(DEMO_EXPERIMENT.read_text())
    document["spec"]["baseline"] = {"file": str(baseline)}
    path = workdir / DEMO_EXPERIMENT.name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _collect(run_dir: Path, destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    for name, (task, artifact) in ARTIFACTS.items():
        source = run_dir / task / artifact
        if source.is_file():
            shutil.copyfile(source, destination / name)
    parquet = sorted(run_dir.glob("verdict-report/requests*")) or sorted(run_dir.glob("*/requests"))
    if parquet:
        shutil.copyfile(parquet[0], destination / "requests.parquet")


def run_scenario(name: str, repo_root: Path, runs_root: Path, baseline_seconds: float) -> ScenarioResult:
    from kfchaos.kfp.runs import run_local

    flags, settings = SCENARIOS[name]
    log(f"scenario {name}: demo LLM server with {flags}")
    with DemoStack(settings) as stack:
        workdir = stack.workdir
        log(f"  stack up: target {stack.target_url} (fault proxy), Prometheus {stack.prometheus_url}")
        log(f"  capturing the baseline: {baseline_seconds:g}s of fault-free traffic")
        baseline = _capture_baseline(stack, DEMO_EXPERIMENT, workdir / "baseline.yaml", baseline_seconds)
        experiment = _scenario_experiment(workdir, baseline)
        log("  running the compiled pipeline with kfp.local (each task is a subprocess)")
        env = {
            "KFCHAOS_FAULT_BACKEND": "local",
            "KFCHAOS_FAULT_PROXY": stack.control_url,
            "KFCHAOS_DEMO_STATE": str(stack.state_file),
            "KFCHAOS_PROMETHEUS_URL": stack.prometheus_url or "",
        }
        with _environment(env):
            outcome = run_local(experiment, root=repo_root, target=stack.target_url, pipeline_root=runs_root / ".kfp")
        oom_kills = int(json.loads(stack.state_file.read_text()).get("oom_kills", 0))
    run_id = outcome.run_dir.name
    destination = runs_root / run_id
    _collect(outcome.run_dir, destination)
    reasons = outcome.message.split("; ")
    log(f"  {name}: {outcome.status} -> {destination}")
    return ScenarioResult(name, flags, outcome.status, destination, reasons, oom_kills)


def summary_table(results: list[ScenarioResult]) -> str:
    lines = ["", "kfchaos demo: long-context traffic + 200 ms network delay against the demo LLM server", ""]
    for result in results:
        lines.append(f"  {result.scenario:<7} {result.status:<13} {result.settings}")
        lines.append(f"          OOM kills during the run: {result.oom_kills}")
        for reason in result.reasons[:6]:
            lines.append(f"          - {reason}")
        lines.append(f"          artifacts: {result.run_dir}/ (verdict.json, report.html, report.md, audit.json)")
        lines.append("")
    return "\n".join(lines)


def main(scenarios: list[str], repo_root: Path, runs_root: Path, baseline_seconds: float = 20.0) -> int:
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise KfchaosError(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    if not (repo_root / "pipelines" / "chaos_experiment.py").is_file():
        raise KfchaosError(
            f"{repo_root} is not a kfchaos checkout (no pipelines/chaos_experiment.py); run from its root"
        )
    started = time.monotonic()
    results = [run_scenario(name, repo_root, runs_root.resolve(), baseline_seconds) for name in scenarios]
    print(summary_table(results))
    print(f"demo finished in {time.monotonic() - started:.0f}s", file=sys.stderr)
    expected = {"unsafe": "FAIL", "tuned": "PASS"}
    surprises = [r for r in results if r.status != expected[r.scenario]]
    return 1 if surprises else 0
