"""Inject faults: create every cluster-side fault of the run and wait until it is verifiably injected."""

from kfp import dsl

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def inject_faults(experiment: str, run_id: str) -> str:
    """Returns the step result as JSON: the objects applied, their events, and the decision."""
    from kfchaos.steps import faults

    return faults.inject(experiment_text=experiment, run_id=run_id)
