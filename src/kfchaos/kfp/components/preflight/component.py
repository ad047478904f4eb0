"""Preflight: spec, cluster access, Chaos Mesh CRDs, protected namespaces, server-side dry run of every fault."""

from kfp import dsl

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def preflight(experiment: str, run_id: str, ramp: str) -> str:
    """Fails the task (and so the run, before anything is injected) when any check fails; returns a summary.

    `ramp` is the JSON list of stages this pipeline was compiled with: an experiment whose stages are not all
    among them is refused rather than run partly."""
    from kfchaos.steps import setup

    return setup.preflight(experiment_text=experiment, run_id=run_id, ramp=ramp)
