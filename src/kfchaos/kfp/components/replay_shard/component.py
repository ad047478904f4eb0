"""Replay shard: one shard of a stage's traffic, sent on the stage's common schedule."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Output

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def replay_shard(
    experiment: str,
    experiment_dir: str,
    target: str,
    run_id: str,
    stage: int,
    shard: int,
    shards: int,
    schedule: Input[Artifact],
    requests: Output[Dataset],
) -> str:
    """Writes the shard's per-request records (Parquet); returns its summary as JSON."""
    from pathlib import Path

    from kfchaos.steps import shards as steps

    return steps.replay_shard(
        experiment_text=experiment,
        experiment_dir=experiment_dir,
        target=target,
        run_id=run_id,
        stage=stage,
        shard=shard,
        shards=shards,
        start_json=Path(schedule.path).read_text(),
        records_path=requests.path,
    )
