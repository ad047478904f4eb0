"""The chaos-experiment pipeline: one graph shape for every experiment, built for a given ramp.

Shape (see docs/pipelines.md): an ExitHandler whose exit task `cleanup` removes every fault labelled with the
run id, whatever failed; inside it preflight -> baseline -> steady state -> gate -> for each stage
[replay -> collect] -> gate -> remove + recover -> verdict. Faults run inside the stage tasks: the replay task
of a fault's first stage creates it, every replay task watches the faults alive in its stage while it
replays (verified windows), and the replay task of its last stage removes it (kfchaos.steps.stagefaults),
so a fault runs when the experiment file says and each stage is judged on the time it was seen active.
The graph has no branches (dsl.If, dsl.Else and dsl.OneOf need a KFP backend of 2.2 or later): every stage's
replay is handed the previous gate's decision, and after a "stop" it sends and injects nothing and its metrics
task records the stage as skipped, so the UI and the verdict see how far the ramp got. Each gate appends its
step's result to a JSON history it passes on, because the verdict cannot take a list built from several tasks'
outputs.

Tasks keep their generated names (replay-stage-2, stage-gate-3, ...): a display name replaces the task's name in
the IR (taskInfo.name), and KFP 2.1.0's driver finds a producer task by that name (backend/src/v2/metadata/
client.go, GetExecutionsInDAG keys executions by task_name), so a renamed task's outputs can no longer be read
("cannot find producer task"). Only the exit task, whose outputs nothing reads, is renamed.

Caching is off for every task that touches the cluster or depends on time (all but the pure gate step): KFP's
cache key ignores env vars and secrets, so a cached replay would silently report old traffic.
Retries only where a step is idempotent (preflight, baseline, collect, remove, cleanup).
"""

# No `from __future__ import annotations`: KFP reads the pipeline signature's annotations as types.

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kfp import dsl, kubernetes
from kfp.dsl import PipelineTask, graph_component

from kfchaos.kfp.components.baseline.component import baseline as baseline_op
from kfchaos.kfp.components.cleanup.component import cleanup as cleanup_op
from kfchaos.kfp.components.collect_metrics.component import collect_metrics as collect_op
from kfchaos.kfp.components.merge_shards.component import merge_shards_of
from kfchaos.kfp.components.preflight.component import preflight as preflight_op
from kfchaos.kfp.components.remove_faults.component import remove_faults as remove_op
from kfchaos.kfp.components.replay_shard.component import replay_shard as shard_op
from kfchaos.kfp.components.replay_stage.component import replay_stage as replay_op
from kfchaos.kfp.components.stage_gate.component import stage_gate as gate_op
from kfchaos.kfp.components.stage_start.component import stage_start as start_op
from kfchaos.kfp.components.steady_state.component import steady_state as steady_op
from kfchaos.kfp.components.verdict_report.component import verdict_report as verdict_op
from kfchaos.kfp.image import component_image

# Stand-in for the pipeline's own IR hash, replaced (same length) by the hash of the file compiled with it,
# so the IR carries its own verifiable hash (kfchaos.kfp.versioning.seal).
from kfchaos.kfp.versioning import IR_HASH_PLACEHOLDER
from kfchaos.signing import SIGNING_KEY_ENV, SIGNING_SECRET, SIGNING_SECRET_KEY
from kfchaos.targetauth import TARGET_SECRET, TARGET_SECRET_KEY

GENERIC_STAGES = (10, 30, 60, 90, 100)
# Finished runs' pods are removed after a day; their artifacts and the audit record stay in the pipeline root.
TTL_SECONDS = 24 * 3600

DEFAULT_EXPERIMENT_DIR = "/opt/kfchaos/experiments"


@dataclass(frozen=True)
class PipelineDefaults:
    """What one compiled pipeline is built for: its name and version, its ramp, and its parameter defaults."""

    name: str
    version: str
    description: str
    stages: Sequence[int]
    experiment: str = ""
    baseline: str = ""
    auth_env: str | None = "KFCHAOS_TARGET_TOKEN"
    shards: int = 1  # spec.traffic.shards: replay pods per stage (1: one replay task, the shape before sharding)


def _no_cache(task: PipelineTask, retries: int = 0) -> PipelineTask:
    task.set_caching_options(enable_caching=False)
    if retries:
        task.set_retry(num_retries=retries, backoff_duration="10s", backoff_factor=2.0)
    return task


def _with_target_secret(task: PipelineTask, auth_env: str | None) -> PipelineTask:
    # Target credentials come from a Kubernetes Secret, never a parameter (parameters are stored and shown).
    if auth_env:
        kubernetes.use_secret_as_env(task, TARGET_SECRET, {TARGET_SECRET_KEY: auth_env}, optional=True)
    return task


def _sharded_replay(
    defaults: PipelineDefaults,
    stage: int,
    experiment: Any,
    experiment_dir: Any,
    target: Any,
    run_id: Any,
    decision: Any,
) -> PipelineTask:
    """start -> n shard tasks -> merge (kfchaos.steps.shards); the merge task stands where the single replay task
    stood: same outputs. The fan-out is unrolled here, one task per shard, and each shard's outputs are inputs of
    the merge's own (merge_shards_of): no ParallelFor and no dsl.Collected, which KFP's backend refuses before 2.14
    (kubeflow/pipelines#11725) and runs inside an ExitHandler only from 2.17 (#13322). Plain tasks run on every
    v2 backend, 2.1.0 included (docs/pipelines.md, "Sharded stages")."""
    auth_env = defaults.auth_env
    start = _no_cache(
        start_op(
            experiment=experiment,
            experiment_dir=experiment_dir,
            run_id=run_id,
            stage=stage,
            shards=defaults.shards,
            decision=decision,
        )
    )
    parts = []
    for shard in range(defaults.shards):
        part = _no_cache(
            shard_op(
                experiment=experiment,
                experiment_dir=experiment_dir,
                target=target,
                run_id=run_id,
                stage=stage,
                shard=shard,
                shards=defaults.shards,
                schedule=start.outputs["schedule"],
            )
        )
        parts.append(_with_target_secret(part, auth_env))
    merge = _no_cache(
        merge_shards_of(defaults.shards)(
            experiment=experiment,
            experiment_dir=experiment_dir,
            run_id=run_id,
            stage=stage,
            shards=defaults.shards,
            start=start.outputs["Output"],
            **{f"result_{index}": part.outputs["Output"] for index, part in enumerate(parts)},
            **{f"part_{index}": part.outputs["requests"] for index, part in enumerate(parts)},
        )
    )
    return merge


def build_pipeline(defaults: PipelineDefaults) -> graph_component.GraphComponent:
    """The pipeline for one ramp; parameters default to the experiment it was compiled from."""
    auth_env = defaults.auth_env

    @dsl.pipeline(
        name=defaults.name,
        description=defaults.description,
        pipeline_config=dsl.PipelineConfig(ttl_seconds_after_finished=TTL_SECONDS),
    )
    def chaos_experiment(
        experiment: str = defaults.experiment,
        baseline: str = defaults.baseline,
        experiment_dir: str = DEFAULT_EXPERIMENT_DIR,
        target: str = "",
    ) -> None:
        """One chaos experiment run: baseline, steady state, faults over the traffic ramp, verdict.

        Args:
            experiment: The experiment YAML (kfchaos.io/v1alpha1 Experiment), the whole file as text.
            baseline: The baseline YAML as text; empty: no baseline, so P99 drift is INCONCLUSIVE.
            experiment_dir: Folder in the task pods where the experiment's relative paths (traffic.file) resolve.
            target: Endpoint URL that replaces spec.target.endpoint; empty: the experiment's own.
        """
        run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER
        exit_task = _no_cache(cleanup_op(experiment=experiment, run_id=run_id), retries=2)
        exit_task.set_display_name("cleanup (exit handler)")
        with dsl.ExitHandler(exit_task, name="chaos-run"):
            pre = _no_cache(
                preflight_op(experiment=experiment, run_id=run_id, ramp=json.dumps(list(defaults.stages))), retries=2
            )
            base = _no_cache(baseline_op(experiment=experiment, baseline=baseline), retries=2).after(pre)
            baseline_artifact = base.outputs["baseline_out"]
            steady = _no_cache(
                steady_op(
                    experiment=experiment,
                    experiment_dir=experiment_dir,
                    target=target,
                    run_id=run_id,
                    baseline_in=baseline_artifact,
                )
            )
            _with_target_secret(steady, auth_env)
            steady_gate = gate_op(stage=0, result=steady.output, history="[]")

            # No dsl.If/dsl.Else/dsl.OneOf: backends before KFP 2.2 cannot run them (docs/pipelines.md). Each stage
            # is passed the previous gate's decision, and after a "stop" it sends and injects nothing and is
            # recorded as skipped (kfchaos.steps.gates), which stops every later stage the same way.
            gate = steady_gate
            for stage in defaults.stages:
                decision = gate.outputs["decision"]
                if defaults.shards == 1:
                    replay = _no_cache(
                        replay_op(
                            experiment=experiment,
                            experiment_dir=experiment_dir,
                            target=target,
                            run_id=run_id,
                            stage=stage,
                            decision=decision,
                        )
                    )
                    _with_target_secret(replay, auth_env)
                else:
                    replay = _sharded_replay(defaults, stage, experiment, experiment_dir, target, run_id, decision)
                collect = _no_cache(
                    collect_op(
                        experiment=experiment,
                        stage=stage,
                        replay=replay.outputs["Output"],
                        baseline_in=baseline_artifact,
                        requests=replay.outputs["requests"],
                    ),
                    retries=1,
                )
                gate = gate_op(stage=stage, result=collect.outputs["Output"], history=gate.outputs["history"])

            remove = _no_cache(
                remove_op(
                    experiment=experiment,
                    experiment_dir=experiment_dir,
                    target=target,
                    run_id=run_id,
                    history=gate.outputs["history"],
                    baseline_in=baseline_artifact,
                ),
                retries=2,
            )
            _with_target_secret(remove, auth_env)
            verdict = _no_cache(
                verdict_op(
                    experiment=experiment,
                    baseline=baseline,
                    experiment_dir=experiment_dir,
                    target=target,
                    run_id=run_id,
                    pipeline_name=defaults.name,
                    pipeline_version=defaults.version,
                    pipeline_ir_hash=IR_HASH_PLACEHOLDER,
                    image=component_image(),
                    preflight=pre.output,
                    history=gate.outputs["history"],
                    recovery=remove.output,
                )
            )
            # The audit record's signing key (kfchaos.signing): a Secret only this task sees, so no task that replays
            # traffic or talks to the target holds it. Optional: without it the record says it is unsigned.
            kubernetes.use_secret_as_env(verdict, SIGNING_SECRET, {SIGNING_SECRET_KEY: SIGNING_KEY_ENV}, optional=True)

    return chaos_experiment
