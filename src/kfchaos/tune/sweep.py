"""The sweep, checked before anything runs: an experiment and a grid whose runs can all be judged.

Every configuration replays the experiment's own plan (the same stages, rates and seed), so a stage with too few
requests for a check is too few in every run: the sweep would end INCONCLUSIVE everywhere however well a
configuration holds. The rule is the verdict's, counted as `kfchaos validate` counts it
(kfchaos.verdict.samples.stage_support, one place for it); here it refuses instead of warning, since a sweep costs a
run per configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from kfchaos.errors import SpecError, format_path
from kfchaos.spec import Experiment
from kfchaos.tune.grid import Configuration, LoadedGrid, load_grid
from kfchaos.validate import load_experiment, parse_experiment
from kfchaos.verdict.samples import shortfall, stage_support
from kfchaos.yamlsource import load_yaml, read_source


@dataclass(frozen=True)
class Sweep:
    experiment_path: Path
    experiment: Experiment
    grid_path: Path
    loaded: LoadedGrid

    @property
    def top_stage(self) -> int:
        return max(self.experiment.spec.traffic.stages)


def unjudgeable(experiment_path: Path, experiment: Experiment) -> SpecError | None:
    """The experiment's stages that cannot be judged with the requests they plan, as problems naming
    spec.traffic.stages; None when every stage can."""
    short = [s for s in stage_support(experiment, experiment_path.parent) if s.short]
    if not short:
        return None
    document = load_yaml(read_source(experiment_path), str(experiment_path))
    where = ("spec", "traffic", "stages")
    return SpecError(
        [document.problem(where, f"{shortfall(s)}; every configuration of the sweep would end there") for s in short]
    )


def load_sweep(experiment_path: str | Path, grid_path: str | Path) -> Sweep:
    """The experiment and grid, both valid, every stage judgeable; SpecError listing every problem otherwise."""
    experiment_path, grid_path = Path(experiment_path), Path(grid_path)
    problems = []
    experiment = loaded = None
    try:
        experiment = load_experiment(experiment_path)
    except SpecError as exc:
        problems += exc.problems
    try:
        loaded = load_grid(grid_path)
    except SpecError as exc:
        problems += exc.problems
    if experiment is not None:
        refused = unjudgeable(experiment_path, experiment)
        problems += refused.problems if refused else []
    if problems:
        raise SpecError(problems)
    assert experiment is not None and loaded is not None
    return Sweep(experiment_path, experiment, grid_path, loaded)


def configured_experiment(sweep: Sweep, index: int) -> str:
    """The experiment text one configuration's run on a cluster judges: its own target (endpoint and selector, so
    traffic and faults reach that configuration's pods) and its own name (`<experiment>-<configuration>`, so its run
    folder, lease and audit record say which it was), validated by the one validator. SpecError naming the grid's
    line where the configuration has no target or the result is not a valid experiment."""
    configuration: Configuration = sweep.loaded.grid.configurations[index]
    if configuration.target is None:
        needs = "a cluster sweep needs each configuration's target (endpoint and selector of the Deployment running it)"
        raise SpecError([sweep.loaded.problem(index, None, needs)])
    document = yaml.safe_load(sweep.experiment_path.read_text())
    document["metadata"]["name"] = f"{sweep.experiment.metadata.name}-{configuration.name}"
    target = document["spec"]["target"]
    target["endpoint"] = configuration.target.endpoint
    target["selector"] = configuration.target.selector.model_dump(exclude_defaults=True)
    text = yaml.safe_dump(document, sort_keys=False)
    try:
        parse_experiment(text, f"{sweep.experiment_path} with configuration {configuration.name}")
    except SpecError as exc:
        reasons = "; ".join(f"{format_path(p.path)}: {p.message}" for p in exc.problems)
        raise SpecError(
            [sweep.loaded.problem(index, None, f"the experiment with this configuration is invalid: {reasons}")]
        ) from None
    return text


def configured_experiments(sweep: Sweep) -> list[str]:
    """Every configuration's experiment text; SpecError listing every configuration that cannot have one."""
    texts, problems = [], []
    for index in range(len(sweep.loaded.grid.configurations)):
        try:
            texts.append(configured_experiment(sweep, index))
        except SpecError as exc:
            problems += exc.problems
    if problems:
        raise SpecError(problems)
    return texts
