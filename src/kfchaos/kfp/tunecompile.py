"""`kfchaos tune --output FILE`: the sweep compiled as one KFP pipeline (kfchaos.kfp.pipelines.tune_sweep), named
`<experiment>-tune` at the experiment's version and sealed with its own IR hash like every compiled pipeline
(kfchaos.kfp.versioning.seal)."""

from __future__ import annotations

from pathlib import Path

from kfchaos.kfp.compile import compile_bytes, experiment_target
from kfchaos.kfp.versioning import seal
from kfchaos.tune.sweep import Sweep, configured_experiments


def sweep_name(sweep: Sweep) -> str:
    return f"{sweep.experiment.metadata.name}-tune"


def compile_sweep(sweep: Sweep, root: Path) -> tuple[bytes, str]:
    """Sealed pipeline YAML and its IR hash; SpecError naming the grid's lines where a configuration has no
    cluster target or makes the experiment invalid."""
    from kfchaos.kfp.pipelines.tune_sweep import build_sweep  # loads kfp's DSL: only when something is compiled

    experiments = configured_experiments(sweep)
    grid = sweep.loaded.grid
    defaults = experiment_target(root, sweep.experiment_path, sweep.experiment).defaults
    description = (
        f"kfchaos tune: {sweep.experiment.metadata.name} x {len(experiments)} configurations of grid "
        f"{grid.metadata.name} ({', '.join(c.name for c in grid.configurations)})"
    )
    return seal(compile_bytes(build_sweep(sweep_name(sweep), description, defaults, experiments)))
