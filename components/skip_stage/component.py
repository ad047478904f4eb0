"""Skip: the Else branch of a gated step, so the verdict and the UI can see how far the ramp got."""

from kfp import dsl

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def skip_stage(stage: int, reason: str) -> str:
    """Returns a 'skipped' step result as JSON."""
    from kfchaos.steps import gates

    return gates.skipped(stage=stage, reason=reason)
