"""The tuning sweep as one pipeline: a dsl.ParallelFor over the grid's configurations, each iteration the whole
chaos-experiment pipeline (kfchaos.kfp.pipelines.chaos_experiment, nested as a sub-DAG) on that configuration's
experiment text (its own target and name: kfchaos.tune.sweep.configured_experiment).

What KFP 2.1.0 can run decided the shape (docs/kfp-backend.md, docs/pipelines.md "Backend versions"):
- No dsl.Collected fan-in: KFP 2.1.0's backend cannot collect a ParallelFor's outputs (kubeflow/pipelines#11725,
  first in 2.14.0). Each iteration's verdict-report task writes its own verdict and audit artifacts, as a single run
  does, and nothing inside the pipeline gathers them. Reading them back into `kfchaos tune`'s table and
  recommendation from the KFP API is not built yet (docs/tune.md).
- No dsl.If: the nested pipeline already has no branches.
- The loop items are the configured experiment texts themselves, a static list in the IR (parameterIterator.items):
  a loop item's sub-field (`item.experiment`) cannot be passed into a nested pipeline by the KFP SDK (2.17:
  compiler_utils.get_inputs_for_all_groups fails on a LoopArgumentVariable), a whole item can.
- parallelism=1: the iterations run one after another. They share the run's id (dsl.PIPELINE_JOB_ID_PLACEHOLDER),
  which labels their faults and holds the target's lease, and each must be measured on a cluster that no other
  configuration's replay or faults load.
Not run on a real backend here: the IR is what the tests check (tests/kfp_glue/test_tune_sweep.py). A ParallelFor
whose iterations hold an ExitHandler is the reverse of kubeflow/pipelines#12390's shape (ParallelFor inside an
ExitHandler); whether 2.1.0 runs it is unverified.
"""

# No `from __future__ import annotations`: KFP reads the pipeline signature's annotations as types.

from collections.abc import Sequence

from kfp import dsl
from kfp.dsl import graph_component

from kfchaos.kfp.pipelines.chaos_experiment import DEFAULT_EXPERIMENT_DIR, TTL_SECONDS, PipelineDefaults, build_pipeline

LOOP_NAME = "configurations"


def build_sweep(
    name: str, description: str, defaults: PipelineDefaults, experiments: Sequence[str]
) -> graph_component.GraphComponent:
    """The sweep `name` over `experiments` (one configured experiment text per configuration, in grid order);
    `defaults` builds the nested chaos pipeline (the experiment's own: its name, version, ramp, shards and target
    credentials, recorded in each configuration's audit record)."""
    run_one = build_pipeline(defaults)

    @dsl.pipeline(
        name=name,
        description=description,
        pipeline_config=dsl.PipelineConfig(ttl_seconds_after_finished=TTL_SECONDS),
    )
    def tune_sweep(baseline: str = defaults.baseline, experiment_dir: str = DEFAULT_EXPERIMENT_DIR) -> None:
        """One chaos run per serving configuration of a tuning grid, one after another.

        Args:
            baseline: The baseline YAML as text, the same for every configuration; empty: P99 drift is INCONCLUSIVE.
            experiment_dir: Folder in the task pods where the experiment's relative paths (traffic.file) resolve.
        """
        with dsl.ParallelFor(list(experiments), parallelism=1, name=LOOP_NAME) as experiment:
            run = run_one(experiment=experiment, baseline=baseline, experiment_dir=experiment_dir, target="")
            run.set_caching_options(enable_caching=False)  # as every task of the chaos pipeline that replays

    return tune_sweep
