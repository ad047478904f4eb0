"""The grid file and the sweep are refused before anything runs: errors name the file, line and field; a grid
with a field the format lacks, mixed costs, a flag the demo server lacks, or an experiment whose stages cannot be
judged never starts a run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kfchaos.cli import main
from kfchaos.demo.runner.localtune import DEMO_GRID, DEMO_TUNE_EXPERIMENT, load_local_sweep, scenario_of, settings_of
from kfchaos.errors import SpecError
from kfchaos.tune.grid import load_grid
from kfchaos.tune.sweep import load_sweep
from tests.conftest import EXPERIMENTS

GRID = """\
apiVersion: kfchaos.io/v1alpha1
kind: TuneGrid
metadata: {name: check}
spec:
  configurations:
    - name: small
      args: {max-num-seqs: 64}
    - name: wide
      replicas: 2
      args:
        gpu-memory-utilization: 0.5
        enable-prefix-caching: true
"""


def _write(tmp_path: Path, text: str, name: str = "grid.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _problems(call: object) -> list[str]:
    with pytest.raises(SpecError) as caught:
        call()  # type: ignore[operator]
    return [str(p) for p in caught.value.problems]


def test_the_cheapest_is_the_least_gpu_memory_unless_the_grid_gives_costs(tmp_path: Path) -> None:
    grid = load_grid(_write(tmp_path, GRID)).grid
    small, wide = grid.configurations
    # vLLM's default utilization (0.9) where the flag is not set; replicas multiply it.
    assert (grid.cost_of(small), grid.cost_of(wide)) == (0.9, 1.0)
    assert not grid.priced and "GPU memory" in grid.cost_rule
    assert wide.summary() == "--gpu-memory-utilization 0.5 --enable-prefix-caching x2"
    priced = load_grid(_write(tmp_path, GRID.replace("args: {max-num-seqs: 64}", "args: {}\n      cost: 7")
                              .replace("replicas: 2", "replicas: 2\n      cost: 3"))).grid  # fmt: skip
    assert priced.priced and [priced.cost_of(c) for c in priced.configurations] == [7, 3]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            ("replicas: 2", "replicas: 2\n      colour: red"),
            "grid.yaml:10: spec.configurations[1].colour: unknown field",
        ),
        (("name: wide", "name: small"), "grid.yaml:5: spec.configurations: configuration names must be unique"),
        (
            ("0.5", "1.5"),
            "grid.yaml:10: spec.configurations[1].args: gpu-memory-utilization must be a number in (0, 1]",
        ),
        (
            ("replicas: 2", "replicas: 2\n      cost: 3"),
            "grid.yaml:5: spec.configurations: cost is given for wide but not for small",
        ),
        (("kind: TuneGrid", "kind: Experiment"), "grid.yaml:2: kind: String should match pattern"),
        (("{max-num-seqs: 64}", "{--max-num-seqs: 64}"), "grid.yaml:7: spec.configurations[0].args: '--max-num-seqs'"),
    ],
)
def test_a_bad_grid_names_file_line_and_field(tmp_path: Path, edit: tuple[str, str], expected: str) -> None:
    path = _write(tmp_path, GRID.replace(*edit))
    problems = _problems(lambda: load_grid(path))
    assert any(p.startswith(str(tmp_path / expected.split(":")[0]) + expected[len(expected.split(":")[0]):])
               for p in problems), problems  # fmt: skip


def test_locally_a_flag_the_demo_server_lacks_is_refused_naming_its_line(tmp_path: Path) -> None:
    text = GRID.replace("{max-num-seqs: 64}", "{max-num-seqs: 64, speculative-model: tiny}")
    path = _write(tmp_path, text)
    problems = _problems(lambda: load_local_sweep(DEMO_TUNE_EXPERIMENT, path))
    assert f"{path}:7: spec.configurations[0].args.speculative-model: the demo server has no flag" in problems[0]
    assert f"{path}:9: spec.configurations[1].replicas: the demo server runs one replica" in problems[1]
    assert len(problems) == 2


def test_locally_a_fault_the_demo_backend_cannot_inject_is_refused_naming_the_experiments_line() -> None:
    experiment = EXPERIMENTS / "vllm-memory-stress.yaml"
    problems = _problems(lambda: load_local_sweep(experiment, DEMO_GRID))
    assert len(problems) == 1
    assert problems[0].startswith(f"{experiment}:26: spec.faults[0].type: the demo's local fault backend cannot inject")


def test_a_sweep_whose_stages_cannot_be_judged_is_refused_before_anything_runs(tmp_path: Path) -> None:
    document = yaml.safe_load(DEMO_TUNE_EXPERIMENT.read_text())
    document["spec"]["traffic"]["stage_duration"] = "5s"  # 117 and 153 requests: a 1 % limit needs >= 368
    experiment = _write(tmp_path, yaml.safe_dump(document, sort_keys=False), "short.yaml")
    problems = _problems(lambda: load_sweep(experiment, DEMO_GRID))
    assert len(problems) == 2
    assert problems[0].startswith(f"{experiment}:")
    assert "spec.traffic.stages: stage 75%: 117 requests planned, too few for p99_drift" in problems[0]
    assert "needs >= 368 with none above its limit" in problems[0]
    assert "stage 100%: 153 requests planned" in problems[1]
    # The command refuses with exit 3 and starts nothing (no run folder).
    runs = tmp_path / "runs"
    assert main(["tune", str(experiment), "--grid", str(DEMO_GRID), "--local", "--runs", str(runs)]) == 3
    assert not runs.exists()


def test_the_shipped_demo_grid_is_the_demo_scenarios_own_settings() -> None:
    from kfchaos.demo.runner.scenarios import SCENARIOS

    sweep = load_local_sweep(DEMO_TUNE_EXPERIMENT, DEMO_GRID)
    by_name = {c.name: settings_of(c) for c in sweep.loaded.grid.configurations}
    assert by_name == {name: settings for name, (_, settings) in SCENARIOS.items()}


def test_a_configuration_named_like_a_demo_scenario_gets_every_stage_of_its_control_baseline() -> None:
    from kfchaos.demo.runner.scenarios import DEMO_EXPERIMENT, builtin, control_stages

    sweep = load_local_sweep(DEMO_TUNE_EXPERIMENT, DEMO_GRID)
    unsafe = next(c for c in sweep.loaded.grid.configurations if c.name == "unsafe")
    assert DEMO_TUNE_EXPERIMENT == DEMO_EXPERIMENT and control_stages(builtin("unsafe")) == [75]  # the demo's rule
    scenario = scenario_of(unsafe, DEMO_TUNE_EXPERIMENT)
    assert control_stages(scenario) is None  # every stage: the configuration may hold past the first
    assert scenario.settings == builtin("unsafe").settings
