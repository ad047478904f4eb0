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

from kfchaos.errors import SpecError
from kfchaos.spec import Experiment
from kfchaos.tune.grid import LoadedGrid, load_grid
from kfchaos.validate import load_experiment
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
