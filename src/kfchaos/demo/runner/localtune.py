"""`kfchaos tune --local` and `kfchaos demo tune`: each configuration of a grid is one chaos run on the demo server
started with that configuration's flags, one after another, through the demo's own runner
(kfchaos.demo.runner.scenarios: a fresh stack, the configuration's own control baseline, the compiled pipeline with
kfp.local, a run folder).

Locally only what the demo server has can be set: its vLLM-named flags (LOCAL_FLAGS). A flag it lacks, env, or more than
one replica is refused before anything runs, naming the grid's line: a configuration silently run with other settings
than it names would recommend what was never tested. A flag a configuration leaves out takes vLLM's default
(vllm/engine/arg_utils.py, EngineArgs of the V0 engine: max_num_seqs 256, gpu_memory_utilization 0.90,
enable_prefix_caching False; a newer vLLM's defaults may differ, so name the flags that matter); the demo server's clock
(330 ms decode steps) and the proxy's connect retry are the demo scenarios' own
(kfchaos.demo.runner.scenarios.SCENARIOS).
"""

from __future__ import annotations

import dataclasses
import signal
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kfchaos.demo.faults.local_backend import LOCAL_FAULT_TYPES
from kfchaos.demo.runner.preflight import unsupported_faults
from kfchaos.demo.runner.scenarios import SCENARIOS, Scenario, execute, log, prepare
from kfchaos.demo.stack.demostack import DemoStack, ServerSettings, stop_on_signals
from kfchaos.errors import KfchaosError, Problem, SpecError
from kfchaos.faults.safety import fault_path
from kfchaos.tune.grid import VLLM_DEFAULT_GPU_MEMORY_UTILIZATION, Configuration, LoadedGrid
from kfchaos.tune.outcome import ConfigOutcome, from_run_folder, without_run
from kfchaos.tune.recommend import Recommendation, recommend
from kfchaos.tune.sweep import Sweep, load_sweep
from kfchaos.yamlsource import load_yaml, read_source

# The demo's grids and experiments: package data of kfchaos.demo (pyproject.toml, [tool.setuptools.package-data]).
DEMO_DIR = Path(str(resources.files("kfchaos.demo")))
DEMO_GRID = DEMO_DIR / "grids" / "demo-settings.yaml"
DEMO_TUNE_EXPERIMENT = DEMO_DIR / "experiments" / "demo-llm-chaos.yaml"

# The settings a configuration starts from: vLLM's defaults for the flags it can set, the demo's clock for the rest.
_DEMO_CLOCK = SCENARIOS["tuned"][1]
BASE_SETTINGS = ServerSettings(
    max_num_seqs=256,
    gpu_memory_utilization=VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
    enable_prefix_caching=False,
    decode_step_ms=_DEMO_CLOCK.decode_step_ms,
    connect_retry_s=_DEMO_CLOCK.connect_retry_s,
)
# flag -> (ServerSettings field, the type the flag takes)
LOCAL_FLAGS: dict[str, tuple[str, type]] = {
    "max-num-seqs": ("max_num_seqs", int),
    "gpu-memory-utilization": ("gpu_memory_utilization", float),
    "enable-prefix-caching": ("enable_prefix_caching", bool),
    "max-loras": ("max_loras", int),
}


def _flag_problem(name: str, value: object) -> str | None:
    if name not in LOCAL_FLAGS:
        return f"the demo server has no flag --{name}; with --local a configuration sets {', '.join(LOCAL_FLAGS)}"
    kind = LOCAL_FLAGS[name][1]
    if kind is bool and not isinstance(value, bool):
        return f"--{name} is on or off: true or false, not {value!r}"
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        return f"--{name} takes a whole number >= 1, not {value!r}"
    if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
        return f"--{name} takes a number, not {value!r}"
    return None


def local_problems(loaded: LoadedGrid) -> list[Problem]:
    """What the demo server cannot apply, per configuration, naming the grid's line."""
    problems = []
    for index, configuration in enumerate(loaded.grid.configurations):
        for name, value in configuration.args.items():
            message = _flag_problem(name, value)
            if message:
                problems.append(loaded.document.problem(("spec", "configurations", index, "args", name), message))
        if configuration.env:
            problems.append(loaded.problem(index, "env", "the demo server takes no environment settings (--local)"))
        if configuration.replicas != 1:
            problems.append(loaded.problem(index, "replicas", "the demo server runs one replica (--local)"))
    return problems


def settings_of(configuration: Configuration) -> ServerSettings:
    """The demo server's settings for a configuration local_problems accepted."""
    changes = {LOCAL_FLAGS[name][0]: LOCAL_FLAGS[name][1](value) for name, value in configuration.args.items()}
    return dataclasses.replace(BASE_SETTINGS, **changes)


def scenario_of(configuration: Configuration, experiment: Path) -> Scenario:
    """The configuration as a demo scenario (its server settings, expected to PASS like any candidate). Named apart
    from the demo's own scenarios: demo.runner.scenarios records the control baseline of the scenario named "unsafe"
    for its first stage only, a rule for that designed FAIL, not for a configuration that happens to share its name."""
    return Scenario(
        f"tune-{configuration.name}", experiment.resolve(), configuration.summary(), settings_of(configuration), "PASS"
    )


def fault_problems(sweep: Sweep) -> list[Problem]:
    """The experiment's cluster-side faults the demo's local backend cannot inject (the rule `run --local` checks before
    it starts, kfchaos.demo.runner.preflight), naming the experiment's line: every configuration's run would fail."""
    unsupported = unsupported_faults(sweep.experiment)
    if not unsupported:
        return []
    document = load_yaml(read_source(sweep.experiment_path), str(sweep.experiment_path))
    does = ", ".join(LOCAL_FAULT_TYPES)
    return [
        document.problem(
            (*fault_path(sweep.experiment, f), "type"),
            f"the demo's local fault backend cannot inject {f.type}: it does {does}",
        )
        for f in unsupported
    ]


def load_local_sweep(experiment: str | Path, grid: str | Path) -> Sweep:
    """The sweep, refused whole (every problem listed) where a configuration cannot run on the demo server."""
    sweep = load_sweep(experiment, grid)
    problems = [*fault_problems(sweep), *local_problems(sweep.loaded)]
    if problems:
        raise SpecError(problems)
    return sweep


def run_sweep(sweep: Sweep, repo_root: Path, runs_root: Path, baseline_seconds: float = 15.0) -> list[ConfigOutcome]:
    """Each configuration in grid order, one at a time (each owns the machine: a run measured beside another
    would be judged on a busier machine), every stack stopped whatever happens."""
    grid = sweep.loaded.grid
    ramp = list(sweep.experiment.spec.traffic.stages)
    runs_root = runs_root.resolve()
    outcomes: list[ConfigOutcome] = []
    previous = stop_on_signals()  # SIGTERM and SIGINT tear down like Ctrl-C
    try:
        for configuration in grid.configurations:
            flags, cost = configuration.summary(), grid.cost_of(configuration)
            log(f"tune: configuration {configuration.name}: {flags}")
            scenario = scenario_of(configuration, sweep.experiment_path)
            stacks: list[DemoStack] = []
            try:
                result = execute(prepare(scenario, runs_root, baseline_seconds, stacks), repo_root, runs_root)
            finally:
                for stack in stacks:
                    stack.stop()
            try:
                outcome = from_run_folder(
                    configuration.name, flags, cost, result.run_dir, sweep.experiment.spec.slo, ramp,
                    oom_kills_seen=result.oom_kills, reasons=result.reasons,
                )  # fmt: skip
            except KfchaosError as exc:
                outcome = without_run(configuration.name, flags, cost, ramp, f"no run folder: {exc}", result.oom_kills)
            outcomes.append(outcome)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return outcomes


@dataclass(frozen=True)
class TuneResult:
    sweep: Sweep
    outcomes: list[ConfigOutcome]
    recommendation: Recommendation
    seconds: float


def tune_locally(experiment: Path, grid: Path, repo_root: Path, runs_root: Path, baseline_seconds: float) -> TuneResult:
    """Refuse the sweep (every problem at once) or run it and recommend."""
    sweep = load_local_sweep(experiment, grid)
    started = time.monotonic()
    outcomes = run_sweep(sweep, repo_root, runs_root, baseline_seconds)
    chosen = recommend(outcomes, sweep.loaded.grid.cost_rule)
    return TuneResult(sweep, outcomes, chosen, time.monotonic() - started)
