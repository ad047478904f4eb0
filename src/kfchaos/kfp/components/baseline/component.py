"""Baseline: load the committed baseline (a pipeline parameter) or capture one from Prometheus."""

from kfp import dsl
from kfp.dsl import Artifact, Output

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def baseline(experiment: str, baseline: str, baseline_out: Output[Artifact]) -> str:
    """Writes the baseline YAML the later steps compare against; returns its sha256."""
    from kfchaos.steps import setup

    return setup.baseline(experiment_text=experiment, baseline_text=baseline, out_path=baseline_out.path)
