"""Collect metrics: the stage's measurements and per-stage verdict, logged as KFP Metrics for the UI."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Output

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def collect_metrics(
    experiment: str,
    stage: int,
    replay: str,
    baseline_in: Input[Artifact],
    requests: Input[Dataset],
    metrics: Output[Metrics],
) -> str:
    """Returns the stage result as JSON (status, figures, reasons)."""
    from kfchaos.steps import stages

    result, figures = stages.collect(
        experiment_text=experiment,
        stage=stage,
        replay_summary=replay,
        baseline_path=baseline_in.path,
        records_path=requests.path,
    )
    for name, value in figures.items():
        metrics.log_metric(name, value)
    return result
