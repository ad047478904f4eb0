"""Stage start (sharded stages): apply the stage's new faults, then fix the shards' common start time."""

from kfp import dsl
from kfp.dsl import Artifact, Output

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def stage_start(
    experiment: str,
    experiment_dir: str,
    run_id: str,
    stage: int,
    shards: int,
    decision: str,
    schedule: Output[Artifact],
) -> str:
    """Returns JSON: start_at (epoch), the stage's plan hash, the faults created (kfchaos.steps.shards.start).

    The same JSON is written to `schedule` for the shard tasks: kfp.local (kfp 2.17) replaces every task-output
    parameter of a ParallelFor task with the loop item (kfp/local/orchestrator/task_spec_utils.py,
    create_parameter_loop_iteration_task_spec), so the shards read an artifact instead."""
    from pathlib import Path

    from kfchaos.steps import shards as steps

    out = steps.start(
        experiment_text=experiment,
        experiment_dir=experiment_dir,
        run_id=run_id,
        stage=stage,
        shards=shards,
        decision=decision,
    )
    Path(schedule.path).parent.mkdir(parents=True, exist_ok=True)
    Path(schedule.path).write_text(out)
    return out
