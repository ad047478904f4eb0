"""The runs of one experiment on KFP: listed through the API (v2beta1 ListRuns of a KFP experiment, optionally only
those a recurring run started), each run's audit record read as `kfchaos run --wait` reads it (kfchaos.kfp.follow:
the verdict task's `audit` artifact through the API server, else from the object store) and verified
(kfchaos.audit.verify: its hash and its signature) before its verdict is used.

Run fields are KFP v2beta1's Run (kubeflow/pipelines backend/api/v2beta1/run.proto: run_id, experiment_id,
recurring_run_id, created_at, state, runtime_config.parameters, run_details.task_details). A run that ended before
its verdict, or whose record cannot be read, does not verify, or is another run's (its `run.id`), is listed as
unverified with the reason. A run still
going is left out (it has no verdict yet) and counted in `unreadable` as such. The namespace is passed as given: a
single-user API server replaces it with "" and a multi-user one checks the experiment belongs to it
(backend/src/apiserver/resource/resource_manager.go ReplaceNamespace, server/run_server.go listRuns; KFP 2.1.0).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import yaml

from kfchaos import audit, runseal, signing
from kfchaos.errors import KfchaosError
from kfchaos.history.local import Found
from kfchaos.history.model import RunEntry, measurements, oom_kills, pipeline_version
from kfchaos.kfp.follow import TERMINAL, ArtifactStore, audit_record, run_state, verdict_task
from kfchaos.rundir.kfpimport import verdict_from_pipeline

PAGE = 100


def list_runs(
    client: Any, kfp_experiment: str, namespace: str | None, recurring_run: str | None, limit: int
) -> list[Any]:
    """The newest `limit` runs of the KFP experiment (of `recurring_run` only, when given)."""
    try:
        experiment_id = str(client.get_experiment(experiment_name=kfp_experiment, namespace=namespace).experiment_id)
    except ValueError as exc:  # kfp.Client.get_experiment: none or several of that name
        raise KfchaosError(f"KFP experiment {kfp_experiment!r}: {exc}") from None
    runs: list[Any] = []
    token = ""
    while len(runs) < limit:
        page = client.list_runs(
            page_token=token,
            page_size=PAGE,
            sort_by="created_at desc",
            experiment_id=experiment_id,
            namespace=namespace,
        )
        for run in page.runs or []:
            if recurring_run is None or getattr(run, "recurring_run_id", None) == recurring_run:
                runs.append(run)
        token = page.next_page_token or ""
        if not token:
            break
    return runs[:limit]


def _experiment_of(parameters: Any) -> dict[str, Any]:
    """The kfchaos experiment's metadata from the run's `experiment` parameter (the experiment file's text)."""
    text = parameters.get("experiment") if isinstance(parameters, dict) else None
    try:
        data = yaml.safe_load(text) if isinstance(text, str) else None
    except yaml.YAMLError:
        return {}
    metadata = data.get("metadata") if isinstance(data, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def _epoch(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def read_runs(
    client: Any,
    experiment: str,
    *,
    kfp_experiment: str,
    namespace: str | None = None,
    recurring_run: str | None = None,
    artifacts: ArtifactStore | None = None,
    limit: int = 200,
    require_signed: bool = False,
    trusted: signing.Trust | None = None,
) -> Found:
    trusted = signing.trust() if trusted is None else trusted
    runs: list[RunEntry] = []
    unreadable: list[str] = []
    for run in list_runs(client, kfp_experiment, namespace, recurring_run, limit):
        run_id = str(run.run_id)
        state = run_state(run)
        if state not in TERMINAL:
            unreadable.append(f"KFP run {run_id}: {state}, no verdict yet")
            continue
        run = client.get_run(run_id)  # the whole run, its task details included, as `kfchaos run --wait` reads it
        parameters = getattr(getattr(run, "runtime_config", None), "parameters", None)
        metadata = _experiment_of(parameters)
        if metadata and metadata.get("name") != experiment:
            continue  # another kfchaos experiment's run in the same KFP experiment
        entry = _entry(client, run, experiment, metadata, artifacts, require_signed, trusted)
        if entry is not None:
            runs.append(entry)
    return Found(runs, unreadable)


def _entry(
    client: Any,
    run: Any,
    experiment: str,
    metadata: dict[str, Any],
    artifacts: ArtifactStore | None,
    require_signed: bool,
    trusted: signing.Trust,
) -> RunEntry | None:
    """The run as history sees it, or None when its audit record shows it ran another kfchaos experiment."""
    run_id, state = str(run.run_id), run_state(run)
    source = f"KFP run {run_id}"
    started = _epoch(getattr(run, "created_at", None))
    task = verdict_task(run)
    problems: list[str] = []
    record: dict[str, Any] = {}
    if task is None:
        problems.append(f"the run ended {state} before its verdict")
    else:
        try:
            record = audit_record(client, run_id, str(task.task_id), artifacts)
        except KfchaosError as exc:
            problems.append(f"its audit record could not be read: {exc}")
    if record:
        record_experiment = _experiment_of(record.get("parameters"))
        if metadata and record_experiment and record_experiment.get("name") != metadata.get("name"):
            problems.append("its audit record names another experiment than the run's parameters")
        metadata = metadata or record_experiment
        if metadata.get("name") not in (None, experiment):
            return None
        recorded = record.get("run")
        recorded_run: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
        if recorded_run.get("id") != run_id:  # the pipeline records its own run's id (PIPELINE_JOB_ID_PLACEHOLDER)
            problems.append(
                f"its audit record is of run {str(recorded_run.get('id'))[:80]!r}, not of this one: a record "
                "copied from another run counts for that run alone"
            )
        findings = audit.verify(record, None, trusted)
        problems += [str(f) for f in findings if not f.ok]
        if require_signed and not runseal.authenticated(findings, "record_signature"):
            problems.append("audit record not signed by a key trusted here (--require-signed)")
        if state != "SUCCEEDED":
            problems.append(f"the run ended {state}: its verdict is not trusted (kfchaos.kfp.follow)")
    if not metadata:
        return _unattributed(run_id, source, started, problems)
    verdict = verdict_from_pipeline(record, None) if record else {}
    version, version_from = pipeline_version(record.get("pipeline"), metadata.get("version"))
    run_times = record.get("run")
    began = run_times.get("started_at") if isinstance(run_times, dict) else None
    return RunEntry(
        run_id=run_id,
        source=source,
        started_at=float(began) if isinstance(began, int | float) else started,
        pipeline_version=version,
        version_from=version_from,
        status=verdict.get("status") if record else None,
        verified=not problems,
        unverified_because=problems,
        measurements=measurements(verdict),
        oom_kills=oom_kills(verdict),
    )


def _unattributed(run_id: str, source: str, started: float | None, problems: list[str]) -> RunEntry:
    """A run of the KFP experiment with neither parameters nor a record to say which kfchaos experiment it ran:
    listed (it is in the experiment or recurring run asked for), never counted."""
    return RunEntry(
        run_id,
        source,
        started,
        None,
        "unknown",
        None,
        False,
        [*problems, "no experiment parameter or audit record names its experiment"],
    )
