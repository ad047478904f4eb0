"""Merge shards: one stage's records and summary from its shards; faults ending in the stage removed."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Output

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def merge_shards(
    experiment: str,
    experiment_dir: str,
    run_id: str,
    stage: int,
    shards: int,
    start: str,
    results: list[str],
    parts: Input[list[Dataset]],
    requests: Output[Dataset],
) -> str:
    """Writes the merged records (Parquet); returns the stage's replay summary as the replay task does."""
    from kfchaos.steps import shards as steps

    return steps.merge(
        experiment_text=experiment,
        experiment_dir=experiment_dir,
        run_id=run_id,
        stage=stage,
        shards=shards,
        start_json=start,
        shard_results=list(results),
        parts=[part.path for part in parts],
        records_path=requests.path,
    )
