"""Steady state: a short replay without faults; when the target is not at baseline nothing is injected."""

from kfp import dsl
from kfp.dsl import Artifact, Input

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def steady_state(experiment: str, experiment_dir: str, target: str, run_id: str, baseline_in: Input[Artifact]) -> str:
    """Returns the step result as JSON; its `decision` is 'continue' or 'stop'."""
    from kfchaos.steps import stages

    return stages.steady_state(
        experiment_text=experiment,
        experiment_dir=experiment_dir,
        target=target,
        run_id=run_id,
        baseline_path=baseline_in.path,
    )
