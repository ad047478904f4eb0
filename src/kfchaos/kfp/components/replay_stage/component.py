"""Replay stage: replay recorded traffic at one stage's share of the recorded rate."""

from kfp import dsl
from kfp.dsl import Dataset, Output

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def replay_stage(
    experiment: str,
    experiment_dir: str,
    target: str,
    run_id: str,
    stage: int,
    decision: str,
    requests: Output[Dataset],
) -> str:
    """Writes the stage's per-request records (Parquet, kfchaos.records schema); returns a JSON summary.
    `decision` is the previous gate's: after a 'stop' the stage sends nothing (kfchaos.steps.gates)."""
    from kfchaos.steps import stages

    return stages.replay(
        experiment_text=experiment,
        experiment_dir=experiment_dir,
        target=target,
        run_id=run_id,
        stage=stage,
        records_path=requests.path,
        decision=decision,
    )
