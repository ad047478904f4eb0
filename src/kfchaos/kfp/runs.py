"""Running an experiment's pipeline: submitted to KFP by version, or here through kfp.local."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from kfchaos import safefile, termination
from kfchaos.baseline import load_baseline
from kfchaos.errors import KfchaosError
from kfchaos.kfp import client as kfp_client
from kfchaos.spec import Experiment, baseline_path
from kfchaos.steps.seams import FAULT_OWNER_ENV, RUN_WHERE_ENV, TARGET_URL_ENV
from kfchaos.validate import load_experiment

EXIT_FOR = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 2}


def parameters_for(
    experiment_path: Path, experiment: Experiment, root: Path, target: str, experiment_dir: str | None
) -> dict[str, str]:
    """The run parameters: the experiment YAML, its committed baseline, where traffic resolves, the target. A
    baseline that would be refused when the run is re-judged (edited, or its control's records replaced) is
    refused here, before anything runs."""
    found = baseline_path(experiment_path, experiment)
    baseline = ""
    if found is not None and found.is_file():
        load_baseline(found)
        baseline = found.read_text()
    parameters = {"experiment": experiment_path.read_text(), "baseline": baseline, "target": target}
    if experiment_dir is not None:
        parameters["experiment_dir"] = experiment_dir
    return parameters


def submit_experiment(
    client: Any,
    experiment_path: Path,
    *,
    root: Path,
    target: str = "",
    experiment_dir: str | None = None,
    run_name: str | None = None,
    kfp_experiment: str = kfp_client.DEFAULT_EXPERIMENT,
    service_account: str = kfp_client.RUN_SERVICE_ACCOUNT,
) -> str:
    experiment = load_experiment(experiment_path)
    meta = experiment.metadata
    return kfp_client.submit(
        client,
        meta.name,
        meta.version,
        parameters_for(experiment_path, experiment, root, target, experiment_dir),
        run_name=run_name or f"{meta.name}-{meta.version}",
        kfp_experiment=kfp_experiment,
        service_account=service_account,
    )


# A kfp.local pipeline root made for one run (`run_root`): this file in it says so, and its name is the run's id.
RUN_ROOT_MARK = ".kfchaos-run-root"


def run_root(pipeline_root: Path, name: str) -> Path:
    """A pipeline root of one run's own under `pipeline_root`: `<name>-<time>-<random>` (kfchaos.safefile.
    unique_folder: created exclusively, so two runs started in the same second never share it), marked. kfp.local
    writes exactly one run folder in it, so the run's outputs are found there, never as "the newest run folder" of a
    root other runs write into too, and the run's id is this folder's name (`LocalOutcome.run_id`)."""
    root = safefile.unique_folder(pipeline_root, name)
    safefile.write_text(root / RUN_ROOT_MARK, "one kfp.local run's pipeline root (kfchaos.kfp.runs.run_root)\n")
    return root


@dataclass(frozen=True)
class LocalOutcome:
    status: str  # PASS, FAIL, INCONCLUSIVE, ERROR when the run failed before a verdict, INTERRUPTED when stopped
    run_dir: Path
    audit: Path | None
    message: str
    signum: int | None = None  # the signal that stopped the run (status INTERRUPTED)

    @property
    def run_id(self) -> str:
        """The run's id, its run folder's name: its own pipeline root's (`run_root`: time and a random part), else
        kfp.local's own name for the run (the pipeline's name and the time, to the microsecond)."""
        own = self.run_dir.parent
        return own.name if (own / RUN_ROOT_MARK).is_file() else self.run_dir.name

    @property
    def exit_code(self) -> int:
        if self.signum is not None:
            return termination.exit_code(self.signum)  # stopped: never a verdict (kfchaos.termination)
        return EXIT_FOR.get(self.status, 2)  # a run that failed before its verdict is inconclusive, never a pass

    def summary(self) -> str:
        where = f"audit record {self.audit}" if self.audit else f"outputs in {self.run_dir}"
        return f"{self.status}: {self.message} ({where})"


# The line a local run prints before its first task: the display name KFP's UI shows for each task key, so that
# progress read from kfp.local's "Task 'replay-stage-2' finished" lines says "replay 30%" as the UI does.
TASK_NAMES_PREFIX = "kfchaos task names: "


# What the progress calls each kind of task (its component), with the stage it runs for: the compiled pipeline keeps
# KFP's generated task names (kfchaos/kfp/pipelines/chaos_experiment.py says why it sets no display names).
TASK_LABELS = {
    "comp-replay-stage": "replay {stage}%",
    "comp-collect-metrics": "metrics {stage}%",
    "comp-stage-gate": "gate {stage}%",
    "comp-stage-start": "start {stage}%",
    "comp-replay-shard": "replay {stage}% shard",
    "comp-merge-shards": "replay {stage}% (merge)",
    "comp-remove-faults": "remove faults + recovery",
    "comp-verdict-report": "verdict + report",
}
STEADY_GATE = "gate: steady state"  # the gate with stage 0


def task_display_names(pipeline_spec: dict[str, Any]) -> dict[str, str]:
    """Task key -> the name progress shows, over the root DAG and every sub-DAG of a compiled pipeline spec: a
    display name the IR gives (taskInfo.name other than the key), else the task's kind and stage (TASK_LABELS).
    Task keys are unique in one pipeline (the compiler suffixes repeated names: replay-stage-2, ...)."""
    dags = [pipeline_spec.get("root", {}).get("dag", {})]
    dags += [c.get("dag", {}) for c in pipeline_spec.get("components", {}).values() if isinstance(c, dict)]
    names: dict[str, str] = {}
    for dag in dags:
        for key, task in (dag.get("tasks") or {}).items():
            if not isinstance(task, dict):
                continue
            shown = (task.get("taskInfo") or {}).get("name")
            label = _label(task)
            if isinstance(shown, str) and shown and shown != key:
                names[key] = shown
            elif label:
                names[key] = label
    return names


def _label(task: dict[str, Any]) -> str | None:
    template = TASK_LABELS.get(str((task.get("componentRef") or {}).get("name", "")).rstrip("-0123456789"))
    if template is None:
        return None
    parameters = (task.get("inputs") or {}).get("parameters") or {}
    stage = ((parameters.get("stage") or {}).get("runtimeValue") or {}).get("constant")
    if "{stage}" not in template:
        return template
    if stage is None:
        return None
    if template == TASK_LABELS["comp-stage-gate"] and int(stage) == 0:
        return STEADY_GATE
    return template.format(stage=int(stage))


def run_local(experiment_path: Path, *, root: Path, target: str, pipeline_root: Path) -> LocalOutcome:
    """Run the experiment's pipeline with kfp.local (SubprocessRunner, current environment)."""
    from kfp import local
    from kfp.components import load_component_from_text

    from kfchaos.kfp.compile import compile_target, experiment_target

    experiment = load_experiment(experiment_path)
    # Run exactly the sealed IR `kfchaos compile` produces, so the audit record's IR hash is the real one.
    sealed, _digest = compile_target(experiment_target(root, experiment_path, experiment))
    pipeline = load_component_from_text(sealed.decode("utf-8"))
    spec = next((d for d in yaml.safe_load_all(sealed) if isinstance(d, dict) and "root" in d), {})
    print(TASK_NAMES_PREFIX + json.dumps(task_display_names(spec), sort_keys=True), flush=True)
    pipeline_root.mkdir(parents=True, exist_ok=True)
    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(pipeline_root), raise_on_error=False)
    started = time.time()
    parameters = parameters_for(experiment_path, experiment, root, target, str(experiment_path.resolve().parent))
    # The tasks inherit this process's env: the local fault backend names this process as its faults' owner.
    os.environ[FAULT_OWNER_ENV] = str(os.getpid())
    stopped: list[int] = []
    with _git_commit_env(root), _stopping(stopped), _lock_env(experiment, target, pipeline_root):
        pipeline(**parameters)
    return read_local_outcome(
        pipeline_root, experiment.metadata.name, since=started, stopped_by=stopped[0] if stopped else None
    )


@contextlib.contextmanager
def _lock_env(experiment: Experiment, target: str, pipeline_root: Path) -> Iterator[None]:
    """Every task keys the target's local lock by one URL, also those without a `target` parameter (preflight, the
    exit handler), and names where this run's outputs are, for whoever finds the target held
    (kfchaos.steps.seams.target_lease)."""
    chosen = {
        TARGET_URL_ENV: target or experiment.spec.target.endpoint or "",
        RUN_WHERE_ENV: f"kfchaos run --local on {socket.gethostname()}, process {os.getpid()}, outputs {pipeline_root}",
    }
    before = {name: os.environ.get(name) for name in chosen}
    os.environ.update({name: value for name, value in chosen.items() if value})
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _stopping(stopped: list[int]) -> Iterator[None]:
    """SIGTERM or SIGINT while kfp.local runs the tasks: the task running gets the signal too (`kfchaos run --local`
    signals this process's whole group) and stops as a pod's step does (kfchaos.steps.stopping: its faults removed,
    its records kept and marked); kfp.local then runs the exit handler, which sweeps the run's faults. This process
    goes on to let it: it only notes the signal, and tells every task it still starts that the run was stopped
    (kfchaos.termination.INTERRUPTED_ENV), so none of them injects or sends.

    Unless the process that started this one died: kfchaos.demo.runner.localrun ties it with a death signal (SIGTERM),
    and nobody is left to stop the tasks or to wait for the exit handler. Then this process ends its own group, the
    tasks kfp.local started in it included (`_end_orphaned_group`)."""
    parent = os.getppid()
    orphaned = _Orphaned(parent)

    def note(signum: int, frame: FrameType | None) -> None:
        if not stopped:
            stopped.append(signum)
            os.environ[termination.INTERRUPTED_ENV] = termination.name(signum)
        orphaned.check()

    previous = {signum: signal.signal(signum, note) for signum in termination.SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.environ.pop(termination.INTERRUPTED_ENV, None)


# How long the tasks of a local run whose starter died get to remove their faults (kfchaos.steps.stopping) before
# their group is killed: the starter cannot wait for an exit handler any more, and nothing may outlive it long.
ORPHAN_GRACE_S = 5.0


# The kernel sends the death signal while it reparents the child, so the handler may still see the old parent: it
# watches this long for the parent to be gone.
ORPHAN_WATCH_S = 3.0


class _Orphaned:
    """After a stop signal: whether the process that started this one died (then this one was reparented), watched
    from a thread for ORPHAN_WATCH_S; if so, this process's group is ended (`_end_orphaned_group`), once."""

    def __init__(self, parent: int) -> None:
        self.parent = parent
        self.ended = False
        self._watching = threading.Lock()

    def check(self) -> None:
        if not self.ended and self._watching.acquire(blocking=False):
            threading.Thread(target=self._watch, name="kfchaos-orphan-watch", daemon=True).start()

    def _watch(self) -> None:
        try:
            deadline = time.monotonic() + ORPHAN_WATCH_S
            while time.monotonic() < deadline:
                if os.getppid() != self.parent:
                    self.ended = True
                    _end_orphaned_group()
                    return
                time.sleep(0.05)
        finally:
            self._watching.release()


def _end_orphaned_group() -> None:
    """SIGTERM to this process's group (its tasks stop as a pod's steps do: faults removed, records kept), SIGKILL to it
    ORPHAN_GRACE_S later, this process with it. Only for a group this process leads (kfchaos.demo.runner.localrun starts
    it so): never a group it merely belongs to, a user's shell's."""
    group = os.getpgrp()
    if group != os.getpid():
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGTERM)  # this process too: its handler has already noted the stop
    timer = threading.Timer(ORPHAN_GRACE_S, os.killpg, (group, signal.SIGKILL))
    timer.daemon = True
    timer.start()


@contextlib.contextmanager
def _git_commit_env(root: Path) -> Iterator[None]:
    """Local tasks inherit this process's env: give them the checkout's commit for the audit record, as the
    image's build arg does on a cluster."""
    from kfchaos.steps.conclude import GIT_COMMIT_ENV

    if os.environ.get(GIT_COMMIT_ENV):
        yield
        return
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        yield
        return
    commit = done.stdout.strip() if done.returncode == 0 else ""
    dirty = ""
    if commit:
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True, timeout=10, check=False
        )
        dirty = "-dirty" if status.stdout.strip() else ""
    os.environ[GIT_COMMIT_ENV] = (commit + dirty) or "unknown"
    try:
        yield
    finally:
        os.environ.pop(GIT_COMMIT_ENV, None)


def read_local_outcome(pipeline_root: Path, name: str, since: float, stopped_by: int | None = None) -> LocalOutcome:
    """The outcome of the kfp.local run of `name` in `pipeline_root`, a root of that run's own (`run_root`), or of
    the one run of `name` since `since` in a root given by hand; INTERRUPTED when `stopped_by` (a signal) stopped it,
    whatever its tasks got to. Never "the newest" of several: a root holding more than one is refused."""
    own = (pipeline_root / RUN_ROOT_MARK).is_file()
    runs = sorted(p for p in pipeline_root.glob(f"{name}-*") if p.is_dir() and (own or p.stat().st_mtime >= since - 1))
    if not runs:
        raise KfchaosError(f"kfp.local wrote no run folder for {name} under {pipeline_root}")
    if len(runs) > 1:
        raise KfchaosError(
            f"{pipeline_root} holds {len(runs)} kfp.local runs of {name} ({', '.join(p.name for p in runs)}): which is "
            "this run's cannot be told; give each run a pipeline root of its own (--output)"
        )
    run_dir = runs[0]
    if stopped_by is not None:
        return _interrupted(run_dir, stopped_by)
    audit = run_dir / "verdict-report" / "audit"
    if not audit.is_file():
        return LocalOutcome("ERROR", run_dir, None, "the run failed before its verdict: a task failed")
    record = json.loads(audit.read_text())
    verdict = record["verdict"]
    reasons = "; ".join(verdict["reasons"]) or "all checks passed"
    return LocalOutcome(verdict["status"], run_dir, audit, reasons)


# The exit handler's task and its output under kfp.local's run folder (<run>/<task>/<output>: pipelines/
# chaos_experiment.py names the task after its component, components/cleanup).
CLEANUP_RECORD = ("cleanup", "cleanup_record")


def _interrupted(run_dir: Path, signum: int) -> LocalOutcome:
    """A run stopped by `signum`: which records were kept marked as cut, and what the exit handler swept."""
    from kfchaos.records import unfinished_stages

    kept = [p for p in sorted(run_dir.glob("*/requests")) if p.exists() and unfinished_stages(p)]
    said = [f"stopped by {termination.name(signum)}"]
    if kept:
        said.append("records kept, marked as cut: " + ", ".join(str(p.relative_to(run_dir)) for p in kept))
    record = run_dir.joinpath(*CLEANUP_RECORD)
    try:
        swept = json.loads(record.read_text()).get("swept")
    except (OSError, ValueError, AttributeError):
        said.append("the exit handler left no record: run `kfchaos cleanup --run-id ...` to be sure no fault is left")
    else:
        count = len(swept) if isinstance(swept, list) else swept
        said.append(f"the exit handler's sweep deleted {count} more fault(s)")
    return LocalOutcome("INTERRUPTED", run_dir, None, "; ".join(said), signum=signum)
