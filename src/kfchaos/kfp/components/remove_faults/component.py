"""Remove faults and recover: delete the run's faults, wait until recovered, measure the time to SLOs (MTTR)."""

from kfp import dsl
from kfp.dsl import Artifact, Input

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def remove_faults(
    experiment: str, experiment_dir: str, target: str, run_id: str, history: str, baseline_in: Input[Artifact]
) -> str:
    """Returns the recovery result as JSON."""
    from kfchaos.steps import faults

    return faults.remove_and_recover(
        experiment_text=experiment,
        experiment_dir=experiment_dir,
        target=target,
        run_id=run_id,
        history=history,
        baseline_path=baseline_in.path,
    )
