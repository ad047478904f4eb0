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

`kfchaos demo --scenario NAME` runs one experiment file, experiments/NAME.yaml, against the tuned server the
same way, and expects the verdict its `# demo-expect: PASS|FAIL` line names (one file per demo fault).
"""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kfchaos import safefile, termination
from kfchaos.demo.server.pod import DEMO_NAMESPACE, DEMO_POD
from kfchaos.demo.stack.demostack import DemoStack, ServerSettings, stop_on_signals
from kfchaos.demo.stack.enginedeploy import EngineDeployment, GiB
from kfchaos.demo.stack.vllmengine import EngineSettings, MiB
from kfchaos.errors import KfchaosError
from kfchaos.kfp.runs import LocalOutcome
from kfchaos.knowledge import failure_modes

# The demo's experiments: package data of kfchaos.demo (pyproject.toml, [tool.setuptools.package-data]).
EXPERIMENTS_DIR = Path(str(resources.files("kfchaos.demo") / "experiments"))
# The real engine's container limit: ~2.2 GiB at rest with the unsafe 512 MiB KV cache, ~1.9 GiB with the tuned
# 256 MiB one (the API server, engine core and worker: mostly torch). Measured in a 6 GiB cgroup under the demo's
# burst: the unsafe engine peaked at 3.2 GiB, the tuned one at 2.0 GiB; 2.75 GiB leaves ~0.5 GiB either way. (At
# 2.5 GiB the unsafe engine was once killed by an ordinary request before any burst: too close to its rest.)
ENGINE_MEMORY_LIMIT = 2 * GiB + 3 * GiB // 4
DEMO_EXPERIMENT = EXPERIMENTS_DIR / "demo-llm-chaos.yaml"
SCENARIOS: dict[str, tuple[str, ServerSettings]] = {
    "unsafe": (
        "--max-num-seqs 256 --gpu-memory-utilization 0.95",
        ServerSettings(
            max_num_seqs=256,
            gpu_memory_utilization=0.95,
            enable_prefix_caching=False,
            decode_step_ms=330,
            connect_retry_s=10,
        ),
    ),
    "tuned": (
        "--max-num-seqs 128 --gpu-memory-utilization 0.85 --enable-prefix-caching",
        ServerSettings(
            max_num_seqs=128,
            gpu_memory_utilization=0.85,
            enable_prefix_caching=True,
            decode_step_ms=330,
            connect_retry_s=10,
        ),
    ),
}
# `kfchaos demo --engine vllm`: the same story against the REAL vLLM engine (`make vllm`) in a memory cgroup of the
# container's limit, under its supervisor (kfchaos.demo.stack.enginesupervisor). The unsafe settings prefill a
# long-context burst in one huge step and the kernel OOM-kills the engine's worker; the tuned ones chunk it and share
# its prefix (experiments/vllm/engine-chaos.yaml has the arithmetic, docs/demo.md the measured runs).
ENGINES = ("demo", "vllm")
ENGINE_EXPERIMENT = EXPERIMENTS_DIR / "vllm" / "engine-chaos.yaml"
# The tiny model's weights are random: sampled, its first token is sometimes its end-of-sequence token, and such an
# answer (200, no token) is an empty completion, a failed request (docs/verdict.md). Greedy decoding (a server-side
# default: vllm/config/model.py get_diff_sampling_param reads `temperature` from the generation config, which
# --override-generation-config sets) makes each prompt's answer the same in every run; the demo's seeded traffic
# then holds no prompt whose answer ends before its first token.
GREEDY = ("--override-generation-config", '{"temperature": 0.0}')
ENGINE_SCENARIOS: dict[str, EngineDeployment] = {
    "unsafe": EngineDeployment(
        EngineSettings(max_num_seqs=128, max_model_len=8192, kv_cache_bytes=512 * MiB, max_num_batched_tokens=262144,
                       prefix_caching=False, extra=GREEDY),
        memory_limit_bytes=ENGINE_MEMORY_LIMIT,
        connect_retry_s=10,
    ),
    "tuned": EngineDeployment(
        EngineSettings(max_num_seqs=32, max_model_len=8192, kv_cache_bytes=256 * MiB, max_num_batched_tokens=2048,
                       prefix_caching=True, extra=GREEDY),
        memory_limit_bytes=ENGINE_MEMORY_LIMIT,
        connect_retry_s=10,
    ),
}  # fmt: skip
EXPECTED = {"unsafe": "FAIL", "tuned": "PASS"}
# The failure mode (kfchaos.knowledge) each scenario designed to FAIL is built to show; the unsafe one is OOM-killed
# by its first burst (tests/demo/test_design.py).
CAUSES = {"unsafe": "host-cgroup-oom-kill"}
# The lines a demo experiment file names its expected verdict and its designed cause on (issue 15's convention).
EXPECT_LINE = re.compile(r"^#\s*demo-expect:\s*(?P<value>.*?)\s*$")
CAUSE_LINE = re.compile(r"^#\s*demo-cause:\s*(?P<value>.*?)\s*$")
EXPECT_VALUES = ("PASS", "FAIL")
SCENARIO_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class Scenario:
    """One experiment against one server setting, and the verdict it is designed to give."""

    name: str
    experiment: Path
    flags: str
    settings: ServerSettings | EngineDeployment
    expect: str
    cause: str | None = None  # the failure mode it is designed to show (a FAIL scenario), by kfchaos.knowledge id

    @property
    def engine(self) -> str:
        return "vllm" if isinstance(self.settings, EngineDeployment) else "demo"

    @property
    def server_name(self) -> str:
        return "the real vLLM engine" if self.engine == "vllm" else "the demo LLM server"


def builtin(name: str, engine: str = "demo") -> Scenario:
    if engine == "vllm":
        deployment = ENGINE_SCENARIOS[name]
        return Scenario(name, ENGINE_EXPERIMENT, deployment.flags(), deployment, EXPECTED[name], CAUSES.get(name))
    flags, settings = SCENARIOS[name]
    return Scenario(name, DEMO_EXPERIMENT, flags, settings, EXPECTED[name], CAUSES.get(name))


def control_stages(scenario: Scenario) -> list[int] | None:
    """The stage rates whose control baseline the scenario records (None: all of them).

    The unsafe scenario records only its first stage: its ramp cannot get further by construction -- the first
    long-context burst OOM-kills it (tests/demo/test_design.py checks the arithmetic) and the abort rule
    `oom_kills above 0` stops the ramp there. Were it to reach a later stage anyway, that stage's drift would be
    judged against the production histogram or be INCONCLUSIVE (kfchaos.verdict.drift), never against a guess.
    """
    if scenario.name == "unsafe" and scenario.experiment in (DEMO_EXPERIMENT, ENGINE_EXPERIMENT):
        from kfchaos.validate import load_experiment

        return list(load_experiment(scenario.experiment).spec.traffic.stages[:1])
    return None


def _header_lines(path: Path, pattern: re.Pattern[str], key: str) -> tuple[int, str] | None:
    """(line number, value) of the file's one `# KEY:` line among its first 200; None when it has none."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines()[:200], start=1):
        match = pattern.match(line.strip())
        if match:
            found.append((number, match["value"]))
    if len(found) > 1:
        raise KfchaosError(f"{path}:{found[1][0]}: {key}: given twice (first on line {found[0][0]})")
    return found[0] if found else None


def read_expectation(path: Path) -> str:
    """The verdict on the file's `# demo-expect:` line; KfchaosError naming the file and line otherwise."""
    found = _header_lines(path, EXPECT_LINE, "demo-expect")
    if found is None:
        raise KfchaosError(f"{path}: no `# demo-expect: PASS|FAIL` line (a demo scenario names its expected verdict)")
    number, value = found
    if value not in EXPECT_VALUES:
        raise KfchaosError(f"{path}:{number}: demo-expect: {value[:40]!r} is not one of {', '.join(EXPECT_VALUES)}")
    return value


def read_cause(path: Path) -> str | None:
    """The failure mode on the file's `# demo-cause:` line (a known kfchaos.knowledge id), None without one."""
    found = _header_lines(path, CAUSE_LINE, "demo-cause")
    if found is None:
        return None
    number, value = found
    known = {mode.id for mode in failure_modes()}
    if value not in known:
        raise KfchaosError(f"{path}:{number}: demo-cause: {value[:60]!r} is not a known failure mode id")
    return value


def file_scenario(name: str, directory: Path = EXPERIMENTS_DIR) -> Scenario:
    """experiments/NAME.yaml against the tuned server, expecting its `# demo-expect:` verdict."""
    path = directory / f"{name}.yaml"
    if not SCENARIO_NAME.match(name) or not path.is_file():
        choices = ", ".join([*SCENARIOS, *sorted(p.stem for p in directory.glob("*.yaml"))])
        raise KfchaosError(f"unknown demo scenario {name[:100]!r}; choose from {choices} (kfchaos demo --list)")
    flags, settings = SCENARIOS["tuned"]
    return Scenario(name, path, flags, settings, read_expectation(path), read_cause(path))


def resolve(name: str, directory: Path = EXPERIMENTS_DIR, engine: str = "demo") -> Scenario:
    if engine == "vllm":
        if name not in ENGINE_SCENARIOS:
            raise KfchaosError(
                f"--engine vllm runs the scenarios {' and '.join(ENGINE_SCENARIOS)}, not {name[:100]!r} (the other "
                "demo scenarios are sized for the demo server)"
            )
        return builtin(name, engine)
    return builtin(name) if name in SCENARIOS else file_scenario(name, directory)


def scenario_lines(directory: Path = EXPERIMENTS_DIR) -> list[str]:
    """`kfchaos demo --list`: one line per scenario (the default pair first), with its expected verdict."""
    rows = [(name, EXPECTED[name], f"{DEMO_EXPERIMENT.name} on {flags} (default `kfchaos demo`)")
            for name, (flags, _) in SCENARIOS.items()]  # fmt: skip
    for path in sorted(directory.glob("*.yaml")):
        try:
            expect = read_expectation(path)
            document = yaml.safe_load(path.read_text())
            about = str(((document or {}).get("metadata") or {}).get("description") or "")
        except (KfchaosError, yaml.YAMLError, AttributeError) as exc:
            rows.append((path.stem, "-", f"not runnable: {exc}"))
            continue
        rows.append((path.stem, expect, f"{about} (tuned server)".strip()))
    width = max(len(name) for name, _, _ in rows)
    return [f"{name:<{width}}  {expect:<4}  {about}" for name, expect, about in rows]


@dataclass
class ScenarioResult:
    scenario: str
    settings: str
    status: str
    run_dir: Path
    reasons: list[str]
    oom_kills: int
    expected: str = ""
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if not self.expected:
            self.expected = EXPECTED.get(self.scenario, "PASS")


def log(message: str) -> None:
    print(f"[demo {datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


def _capture_baseline(
    stack: DemoStack, experiment_path: Path, out: Path, seconds: float, stages: list[int] | None = None
) -> Path:
    """A control baseline (a fault-free replay at each stage rate, measured from its records: what the drift
    is compared with) while Prometheus scrapes, then the production figures captured from Prometheus, in
    one baseline file."""
    from kfchaos.baseline import BaselineScope
    from kfchaos.baselinecapture import capture
    from kfchaos.control import attach, record_control
    from kfchaos.metrics.catalog import Scope
    from kfchaos.metrics.prometheus import PrometheusClient
    from kfchaos.validate import load_experiment

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
        stages=stages,
    )
    # A scrape at least one interval (1 s) after the last request: rate() needs the sample after its last counts.
    stack.wait_scraped(after=time.time() + 1.0)
    baseline = capture(
        experiment.metadata.name,
        PrometheusClient(stack.prometheus_url),
        Scope(DEMO_NAMESPACE, (DEMO_POD,), model=experiment.spec.target.model),
        end=datetime.now(UTC),
        days=1,
        step=5.0,
        drift=experiment.spec.slo.p99_drift_max,
        request_timeout=experiment.spec.target.timeout,
        # Recorded in the baseline and shown in the verdict: the drift reference is the control replay above.
        short_history="the demo's own minutes of local history; the control replay is the drift reference",
        target=BaselineScope.of(experiment, (DEMO_POD,)),
    )
    return attach(baseline, control).write(out)


def _scenario_experiment(workdir: Path, baseline: Path, source: Path = DEMO_EXPERIMENT) -> Path:
    """The experiment with its baseline pointing at this scenario's freshly captured one (and a recorded
    traffic file, which is relative to the experiment file, made absolute: the copy lives elsewhere)."""
    document = yaml.safe_load(source.read_text())
    document["spec"]["baseline"] = {"file": str(baseline)}
    traffic = document["spec"].get("traffic") or {}
    if isinstance(traffic.get("file"), str) and not Path(traffic["file"]).is_absolute():
        traffic["file"] = str((source.parent / traffic["file"]).resolve())
    path = workdir / source.name
    safefile.write_text(path, yaml.safe_dump(document, sort_keys=False), private=True)
    return path


def _collect(outcome: LocalOutcome, runs_root: Path) -> Path:
    """The run folder (kfchaos.rundir layout) from the kfp.local run's artifacts."""
    from kfchaos.rundir import kfpimport

    return kfpimport.from_local_pipeline(outcome.run_dir, runs_root, source="demo", run_id=outcome.run_id).path


def _run_folder(outcome: LocalOutcome, runs_root: Path, log_path: Path) -> Path:
    """The run folder the child `run --local` wrote (it names it on its last lines), else one made here from
    the kfp.local outputs: writing it twice would only render the same report again. Only this run's: its name is
    the run's own id (a folder another run wrote is never taken for it)."""
    from kfchaos.demo.runner.localrun import child_run_folder

    folder, _ = child_run_folder(log_path) if log_path.is_file() else (None, None)
    if folder and (Path(folder) / "verdict.json").is_file() and Path(folder).name == outcome.run_id:
        return Path(folder)
    return _collect(outcome, runs_root)


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
    for check in document.get("checks", []):  # experiment-wide: recovery, fault verification, ...
        rank = {"FAIL": 0, "INCONCLUSIVE": 1}.get(check.get("status", ""))
        if rank is not None and check.get("gating", True):
            ranked.append((rank, f"{check['status']} {check['name']}: {check['reason']}"))
    reasons = [text for _, text in sorted(ranked, key=lambda item: item[0])]
    return reasons[:limit] or list(document.get("reasons", []))[:limit] or ["all checks passed"]


def _run_pipeline(
    experiment: Path,
    repo_root: Path,
    target: str,
    pipeline_root: Path,
    env: dict[str, str],
    workdir: Path,
    on_task: Callable[[str, str], None],
) -> LocalOutcome:
    """`kfchaos run --local` in a child process: kfp.local's own logs go to a file, progress to the terminal."""
    from kfchaos.demo.runner.localrun import run_child

    outcome = run_child(
        experiment,
        root=repo_root,
        target=target,
        pipeline_root=pipeline_root,
        log_path=workdir / "pipeline.log",
        env=env,
        on_task=on_task,
        extra=["--runs", str(pipeline_root.parent)],  # the child's run folder lands where ours does
    )
    if outcome.signum is not None:  # stopped: no scenario after it, the stacks torn down (kfchaos.termination)
        raise termination.Interrupted(outcome.signum)
    return outcome


@dataclass
class Prepared:
    """A scenario's stack, up, with its control baseline recorded and the experiment pointing at it."""

    scenario: Scenario
    stack: DemoStack
    workdir: Path
    experiment: Path
    started: float


def prepare(scenario: Scenario, runs_root: Path, baseline_seconds: float, stacks: list[DemoStack]) -> Prepared:
    """Start the scenario's stack (appended to `stacks`, which the caller stops) and record its baseline."""
    from kfchaos.validate import load_experiment

    name, source = scenario.name, scenario.experiment
    started = time.monotonic()
    log(f"scenario {name}: {source.name} against {scenario.server_name} with {scenario.flags}")
    # Logs (server, proxy, Prometheus, pipeline) stay next to the runs, where a user looks for them.
    workdir = safefile.unique_folder(runs_root / ".work", name)
    stack = DemoStack(scenario.settings, workdir=workdir)
    stacks.append(stack)
    stack.start()
    log(f"  {name}: stack up: target {stack.target_url} (fault proxy), Prometheus {stack.prometheus_url}")
    stages = ", ".join(f"{p}%" for p in control_stages(scenario) or load_experiment(source).spec.traffic.stages)
    log(f"  {name}: recording the control baseline: fault-free replay at each stage rate ({stages}), then Prometheus")
    baseline = _capture_baseline(stack, source, workdir / "baseline.yaml", baseline_seconds, control_stages(scenario))
    return Prepared(scenario, stack, workdir, _scenario_experiment(workdir, baseline, source), started)


def execute(
    prepared: Prepared, repo_root: Path, runs_root: Path, on_task: Callable[[str, str], None] | None = None
) -> ScenarioResult:
    """Run the prepared scenario's pipeline, stop its stack, and read its run folder."""
    scenario, stack, workdir = prepared.scenario, prepared.stack, prepared.workdir
    name = scenario.name
    log(f"  {name}: running the compiled pipeline with kfp.local (each task is a subprocess)")
    env = {
        "KFCHAOS_FAULT_BACKEND": "local",
        "KFCHAOS_FAULT_PROXY": stack.control_url,
        "KFCHAOS_DEMO_STATE": str(stack.state_file),
        "KFCHAOS_PROMETHEUS_URL": stack.prometheus_url or "",
    }

    def progress(task: str, status: str) -> None:
        log(f"    {name:<7} {task:<22} {status}")
        if on_task:
            on_task(task, status)

    try:
        outcome = _run_pipeline(
            prepared.experiment, repo_root, stack.target_url, runs_root / ".kfp", env, workdir, progress
        )
        oom_kills = int(json.loads(stack.state_file.read_text()).get("oom_kills", 0))
    finally:
        stack.stop()

    def result(status: str, run_dir: Path, reasons: list[str]) -> ScenarioResult:
        seconds = time.monotonic() - prepared.started
        return ScenarioResult(name, scenario.flags, status, run_dir, reasons, oom_kills, scenario.expect, seconds)

    try:
        destination = _run_folder(outcome, runs_root, workdir / "pipeline.log")
    except KfchaosError as exc:
        log(f"  {name}: no run folder: {exc}")
        return result(outcome.status, outcome.run_dir, [outcome.message])
    verdict_file = destination / "verdict.json"
    reasons = headline_reasons(json.loads(verdict_file.read_text())) if verdict_file.is_file() else [outcome.message]
    log(f"  {name}: {outcome.status} -> {destination}")
    return result(outcome.status, destination, reasons)


def run_scenario(scenario: Scenario | str, repo_root: Path, runs_root: Path, baseline_seconds: float) -> ScenarioResult:
    """One scenario on its own: prepare, execute, and stop its stack whatever happens."""
    stacks: list[DemoStack] = []
    try:
        prepared = prepare(
            resolve(scenario) if isinstance(scenario, str) else scenario, runs_root, baseline_seconds, stacks
        )
        return execute(prepared, repo_root, runs_root)
    finally:
        for stack in stacks:
            stack.stop()


class _Preparing(threading.Thread):
    """The next scenario prepared in the background (its stack up, its control baseline recorded)."""

    def __init__(
        self, scenario: Scenario, runs_root: Path, baseline_seconds: float, stacks: list[DemoStack], after: Scenario
    ) -> None:
        super().__init__(name=f"prepare-{scenario.name}", daemon=True)
        self.arguments = (scenario, runs_root, baseline_seconds, stacks)
        self.after = after
        self.last_gate = _gate_count(after)  # the gate after the last stage: remove-faults and the report follow
        self.gates = 0
        self.triggered = False
        self.prepared: Prepared | None = None
        self.error: BaseException | None = None

    def on_task(self, task: str, status: str) -> None:
        """Start once `after`'s ramp is over (its last gate has run)."""
        self.gates += task.startswith("stage-gate")
        if self.gates >= self.last_gate and not self.triggered:
            self.triggered = True
            log(f"  preparing {self.arguments[0].name} while {self.after.name} removes its faults and reports")
            self.start()

    def run(self) -> None:
        try:
            self.prepared = prepare(*self.arguments)
        except BaseException as exc:  # handed to the main thread, which raises it
            self.error = exc

    def result(self) -> Prepared:
        self.join()
        if self.error is not None:
            raise self.error
        assert self.prepared is not None
        return self.prepared


def run_order(scenarios: list[Scenario]) -> list[Scenario]:
    """Scenarios expected to PASS first: only a scenario expected to FAIL may record its control baseline while
    the one before it finishes (see `main`)."""
    return sorted(scenarios, key=lambda s: s.expect == "FAIL")


def may_prepare_during(current: Scenario, following: Scenario) -> bool:
    """Whether `following` may record its control baseline while `current`'s recovery probe and report run.

    A control recorded on a busier machine is slower, so the drift limit drawn from it is more lenient: that can
    never turn a PASS into a FAIL, only hide a FAIL. So only a scenario designed to FAIL overlaps, and only when
    its FAIL does not rest on the drift: the unsafe scenario's rests on OOM kills, counted from the restart and
    OOM series (tests/demo/test_design.py: its first burst is bound to OOM-kill it). The scenario expected to
    PASS records its control and runs its stages with nothing else of the demo running.
    """
    # Not with the real engine: its start takes both cores for a minute or more, which the PASS scenario's recovery
    # probe would be judged through.
    return (
        following.expect == "FAIL"
        and following.name == "unsafe"
        and current.expect == "PASS"
        and (following.engine == current.engine == "demo")
    )


def summary_table(results: list[ScenarioResult], engine: str = "demo") -> str:
    lines = ["", "kfchaos demo: long-context traffic + 200 ms network delay against the demo LLM server", ""]
    if any(r.scenario not in SCENARIOS for r in results):
        lines[1] = "kfchaos demo: " + ", ".join(r.scenario for r in results) + " against the demo LLM server"
    if engine == "vllm":
        lines[1] = "kfchaos demo --engine vllm: long-context bursts against the real vLLM engine in a memory cgroup"
    for result in results:
        lines.append(f"  {result.scenario:<7} {result.status:<13} {result.settings}")
        lines.append(f"          expected {result.expected}; took {result.seconds:.0f}s")
        lines.append(f"          OOM kills during the run: {result.oom_kills}")
        for reason in result.reasons[:6]:
            lines.append(f"          - {reason}")
        lines.append(f"          report: {result.run_dir / 'report.html'}")
        lines.append(f"          re-judge: kfchaos verdict --run {result.run_dir}")
        lines.append("")
    return "\n".join(lines)


def main(
    scenarios: list[str],
    repo_root: Path,
    runs_root: Path,
    baseline_seconds: float = 15.0,
    directory: Path = EXPERIMENTS_DIR,
    engine: str = "demo",
) -> int:
    # Every name checked before anything starts; each scenario once.
    chosen = [resolve(name, directory, engine) for name in dict.fromkeys(scenarios)]
    started = time.monotonic()
    runs_root = runs_root.resolve()
    stacks: list[DemoStack] = []
    done: dict[str, ScenarioResult] = {}
    previous = stop_on_signals()  # SIGTERM and SIGINT tear down like Ctrl-C
    try:
        order = run_order(chosen)
        prepared = prepare(order[0], runs_root, baseline_seconds, stacks)
        for index, scenario in enumerate(order):
            following = order[index + 1] if index + 1 < len(order) else None
            helper: _Preparing | None = None
            if following is not None and may_prepare_during(scenario, following):
                helper = _Preparing(following, runs_root, baseline_seconds, stacks, after=scenario)
            done[scenario.name] = execute(prepared, repo_root, runs_root, helper.on_task if helper else None)
            if following is not None:
                if helper is not None and helper.triggered:
                    prepared = helper.result()
                else:
                    prepared = prepare(following, runs_root, baseline_seconds, stacks)
    finally:
        for stack in stacks:
            stack.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    results = [done[scenario.name] for scenario in chosen]
    print(summary_table(results, engine))
    print(f"demo finished in {time.monotonic() - started:.0f}s", file=sys.stderr)
    surprises = surprise_lines(results)
    for line in surprises:
        print(line, file=sys.stderr)
    if not surprises:
        designed = ", ".join(f"{r.scenario} {r.expected}" for r in results)
        print(f"kfchaos demo: every scenario turned out as designed ({designed})", file=sys.stderr)
    return 1 if surprises else 0


def _gate_count(scenario: Scenario) -> int:
    from kfchaos.validate import load_experiment

    return len(load_experiment(scenario.experiment).spec.traffic.stages) + 1


def surprise_lines(results: list[ScenarioResult]) -> list[str]:
    """One line per scenario that did not turn out as designed, with the verdict's own first reason."""
    lines = []
    for result in results:
        if result.status != result.expected:
            because = "; ".join(result.reasons[:2]) or "no reason recorded"
            lines.append(
                f"kfchaos demo: {result.scenario}: expected {result.expected}, got {result.status} because {because} "
                f"(run folder {result.run_dir})"
            )
    return lines
