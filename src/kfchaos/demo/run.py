"""`kfchaos demo`: a real chaos experiment on one machine, end to end, through the real compiled pipeline.

Two scenarios retell the classic incident of a large model that went live without chaos testing and was
OOM-killed again and again in its first hours:
- unsafe: vLLM defaults pushed for throughput (--max-num-seqs 256, --gpu-memory-utilization 0.95) under
  long-context traffic plus 200 ms of network delay -> FAIL, naming the OOM kills and the P99 drift;
- tuned: --max-num-seqs 128, --gpu-memory-utilization 0.85, --enable-prefix-caching -> PASS.
For each: start the demo stack (server under its supervisor, fault proxy, local Prometheus), capture the
scenario's baseline from Prometheus after a short fault-free replay, run the experiment's pipeline with
kfp.local (faults applied by the local backend through the proxy), and collect the run's artifacts into
runs/<run-id>/ (the kfchaos.rundir layout: verdict.json, report.html, report.md, records.parquet,
metrics.json, baseline.yaml, experiment.yaml, audit.json, ...).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from kfchaos.demo.stack import DEMO_NAMESPACE, DEMO_POD, DemoStack, ServerSettings
from kfchaos.errors import KfchaosError
from kfchaos.kfp.runs import LocalOutcome

DEMO_EXPERIMENT = Path(__file__).with_name("experiments") / "demo-llm-chaos.yaml"
SCENARIOS: dict[str, tuple[str, ServerSettings]] = {
    "unsafe": (
        "--max-num-seqs 256 --gpu-memory-utilization 0.95",
        ServerSettings(
            max_num_seqs=256,
            gpu_memory_utilization=0.95,
            enable_prefix_caching=False,
            decode_step_ms=360,
            connect_retry_s=10,
        ),
    ),
    "tuned": (
        "--max-num-seqs 128 --gpu-memory-utilization 0.85 --enable-prefix-caching",
        ServerSettings(
            max_num_seqs=128,
            gpu_memory_utilization=0.85,
            enable_prefix_caching=True,
            decode_step_ms=360,
            connect_retry_s=10,
        ),
    ),
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


def _capture_baseline(stack: DemoStack, experiment_path: Path, out: Path, seconds: float) -> Path:
    """A control baseline (a fault-free replay at each stage rate, measured from its records: what the drift
    is compared with) while Prometheus scrapes, then the production figures captured from Prometheus, in
    one baseline file."""
    from kfchaos.baseline import capture
    from kfchaos.metrics.catalog import Scope
    from kfchaos.metrics.control import attach, record_control
    from kfchaos.metrics.prometheus import PrometheusClient
    from kfchaos.spec import load_experiment

    if not stack.prometheus_url:
        raise KfchaosError("the demo needs Prometheus for its baseline: `make demo` installs it (Debian `prometheus`)")
    experiment = load_experiment(experiment_path)
    # Each stage rate for at least a stage's length: enough requests for a P99 interval (>= 299 at 95 %).
    control = record_control(
        experiment,
        stack.target_url,
        out.with_name(f"{out.stem}.control.parquet"),
        base_dir=experiment_path.parent,
        duration=max(seconds, experiment.spec.traffic.stage_duration),
    )
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
    return attach(baseline, control).write(out)


def _scenario_experiment(workdir: Path, baseline: Path) -> Path:
    """The demo experiment with its baseline pointing at this scenario's freshly captured one."""
    document = yaml.safe_load(DEMO_EXPERIMENT.read_text())
    document["spec"]["baseline"] = {"file": str(baseline)}
    path = workdir / DEMO_EXPERIMENT.name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _collect(run_dir: Path, runs_root: Path) -> Path:
    """The run folder (kfchaos.rundir layout) from the kfp.local run's artifacts."""
    from kfchaos import rundir

    return rundir.from_local_pipeline(run_dir, runs_root, source="demo").path


def headline_reasons(document: dict[str, Any], limit: int = 6) -> list[str]:
    """The failing checks first, then the inconclusive ones, each with its stage."""
    ranked: list[tuple[int, str]] = []
    for stage in document.get("stages", []):
        for check in stage.get("checks", []):
            rank = {"FAIL": 0, "INCONCLUSIVE": 1}.get(check.get("status", ""))
            if rank is not None:
                ranked.append(
                    (rank, f"{check['status']} stage {stage.get('stage')}%: {check['name']}: {check['reason']}")
                )
    reasons = [text for _, text in sorted(ranked, key=lambda item: item[0])]
    return reasons[:limit] or list(document.get("reasons", []))[:limit] or ["all checks passed"]


def _run_pipeline(
    experiment: Path, repo_root: Path, target: str, pipeline_root: Path, env: dict[str, str], workdir: Path
) -> LocalOutcome:
    """`kfchaos run --local` in a child process: kfp.local's own logs go to a file, progress to the terminal."""
    from kfchaos.demo.localrun import run_child

    return run_child(
        experiment,
        root=repo_root,
        target=target,
        pipeline_root=pipeline_root,
        log_path=workdir / "pipeline.log",
        env=env,
        on_task=lambda task, status: log(f"    {task:<22} {status}"),
        extra=["--runs", str(pipeline_root.parent)],  # the child's run folder lands where ours does
    )


def run_scenario(name: str, repo_root: Path, runs_root: Path, baseline_seconds: float) -> ScenarioResult:
    flags, settings = SCENARIOS[name]
    log(f"scenario {name}: demo LLM server with {flags}")
    # Logs (server, proxy, Prometheus, pipeline) stay next to the runs, where a user looks for them.
    workdir = runs_root / ".work" / f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    with DemoStack(settings, workdir=workdir) as stack:
        log(f"  stack up: target {stack.target_url} (fault proxy), Prometheus {stack.prometheus_url}")
        from kfchaos.spec import load_experiment

        stages = ", ".join(f"{p}%" for p in load_experiment(DEMO_EXPERIMENT).spec.traffic.stages)
        log(f"  recording the control baseline: fault-free replay at each stage rate ({stages}), then Prometheus")
        baseline = _capture_baseline(stack, DEMO_EXPERIMENT, workdir / "baseline.yaml", baseline_seconds)
        experiment = _scenario_experiment(workdir, baseline)
        log("  running the compiled pipeline with kfp.local (each task is a subprocess)")
        env = {
            "KFCHAOS_FAULT_BACKEND": "local",
            "KFCHAOS_FAULT_PROXY": stack.control_url,
            "KFCHAOS_DEMO_STATE": str(stack.state_file),
            "KFCHAOS_PROMETHEUS_URL": stack.prometheus_url or "",
        }
        outcome = _run_pipeline(experiment, repo_root, stack.target_url, runs_root / ".kfp", env, workdir)
        oom_kills = int(json.loads(stack.state_file.read_text()).get("oom_kills", 0))
    try:
        destination = _collect(outcome.run_dir, runs_root)
    except KfchaosError as exc:
        log(f"  {name}: no run folder: {exc}")
        return ScenarioResult(name, flags, outcome.status, outcome.run_dir, [outcome.message], oom_kills)
    verdict_file = destination / "verdict.json"
    reasons = headline_reasons(json.loads(verdict_file.read_text())) if verdict_file.is_file() else [outcome.message]
    log(f"  {name}: {outcome.status} -> {destination}")
    return ScenarioResult(name, flags, outcome.status, destination, reasons, oom_kills)


def summary_table(results: list[ScenarioResult]) -> str:
    lines = ["", "kfchaos demo: long-context traffic + 200 ms network delay against the demo LLM server", ""]
    for result in results:
        lines.append(f"  {result.scenario:<7} {result.status:<13} {result.settings}")
        lines.append(f"          OOM kills during the run: {result.oom_kills}")
        for reason in result.reasons[:6]:
            lines.append(f"          - {reason}")
        lines.append(f"          report: {result.run_dir / 'report.html'}")
        lines.append(f"          re-judge: kfchaos verdict --run {result.run_dir}")
        lines.append("")
    return "\n".join(lines)


def main(scenarios: list[str], repo_root: Path, runs_root: Path, baseline_seconds: float = 15.0) -> int:
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
    surprises = surprise_lines(results)
    for line in surprises:
        print(line, file=sys.stderr)
    if not surprises:
        print("kfchaos demo: both scenarios turned out as designed (unsafe FAIL, tuned PASS)", file=sys.stderr)
    return 1 if surprises else 0


EXPECTED = {"unsafe": "FAIL", "tuned": "PASS"}


def surprise_lines(results: list[ScenarioResult]) -> list[str]:
    """One line per scenario that did not turn out as designed, with the verdict's own first reason."""
    lines = []
    for result in results:
        expected = EXPECTED[result.scenario]
        if result.status != expected:
            because = "; ".join(result.reasons[:2]) or "no reason recorded"
            lines.append(
                f"kfchaos demo: {result.scenario}: expected {expected}, got {result.status} because {because} "
                f"(run folder {result.run_dir})"
            )
    return lines
