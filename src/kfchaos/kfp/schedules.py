"""Recurring runs as code: make KFP's recurring runs match manifests/schedules.yaml.

File format::

    schedules:
      - name: vllm-network-delay-nightly     # recurring run display name (unique)
        pipeline: vllm-network-delay         # pipeline name; version defaults to the lock file's
        version: 1.0.0                       # optional
        cron: "0 0 2 * * *"                  # 6 fields, seconds first (KFP's backend reads it so)
        enabled: true                        # optional, default true
        parameters: {target: http://...}     # optional run parameters
        service_account: kfchaos-runner      # optional, default: the file's service_account
    experiment: kfchaos                      # optional KFP experiment holding the recurring runs
    service_account: kfchaos-runner          # the identity every run executes as (default kfchaos-runner)

Sync: create what is missing; replace (delete + create) what differs, since KFP has no update of a recurring
run; disable what is marked `enabled: false`, and disable (never delete) managed runs no longer in the file.
Every recurring run is created with max_concurrency 1 and no catch-up: a chaos run must never overlap another,
and a paused schedule must not fire a backlog of experiments when resumed. Every recurring run names its
service account: without one KFP runs it as its default `pipeline-runner`, which cannot touch chaos-mesh.org
(manifests/base/pipeline-runner-binding.yaml explains the identity model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from kfchaos.errors import KfchaosError, SpecError
from kfchaos.kfp import client as kfp_client
from kfchaos.spec import Schedule
from kfchaos.types import StrictModel
from kfchaos.yamlsource import load_yaml, read_source

MANAGED_MARK = "managed by kfchaos schedule sync"
SERVICE_ACCOUNT_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"  # a DNS subdomain, as Kubernetes names are


class ScheduleEntry(StrictModel):
    name: str = Field(min_length=1, max_length=128)
    pipeline: str = Field(min_length=1)
    version: str | None = None
    cron: str
    enabled: bool = True
    parameters: dict[str, str | int | float | bool] = Field(default_factory=dict)
    service_account: str | None = Field(None, pattern=SERVICE_ACCOUNT_PATTERN)

    @field_validator("cron")
    @classmethod
    def _six_fields(cls, value: str) -> str:
        # Same rule as an experiment's schedule.cron; one implementation, its message without pydantic's nesting.
        try:
            return Schedule(cron=value).cron
        except ValidationError as exc:
            raise ValueError(str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None


class SchedulesFile(StrictModel):
    experiment: str = kfp_client.DEFAULT_EXPERIMENT
    service_account: str = Field(kfp_client.RUN_SERVICE_ACCOUNT, pattern=SERVICE_ACCOUNT_PATTERN)
    schedules: list[ScheduleEntry] = Field(default_factory=list)

    @field_validator("schedules")
    @classmethod
    def _unique(cls, value: list[ScheduleEntry]) -> list[ScheduleEntry]:
        names = [s.name for s in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"schedule names must be unique; repeated: {', '.join(repeated)}")
        return value


def load_schedules(path: Path) -> SchedulesFile:
    try:
        raw = read_source(path)
    except OSError as exc:
        raise KfchaosError(f"{path}: cannot read: {exc.strerror or exc}") from None
    document = load_yaml(raw, str(path))
    try:
        return SchedulesFile.model_validate(document.data or {})
    except ValidationError as exc:
        problems = [
            document.problem(tuple(e["loc"]), str(e["msg"]).removeprefix("Value error, "))
            for e in exc.errors(include_url=False)
        ]
        raise SpecError(sorted(problems, key=lambda p: p.line)) from None


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    enabled: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for action in ("created", "replaced", "enabled", "disabled", "unchanged"):
            out += [f"{action} {name}" for name in getattr(self, action)]
        return out


def _is_enabled(run: Any) -> bool:
    return str(run.mode).upper() == "ENABLE"


def _description(pipeline: str, version: str, entry: ScheduleEntry, service_account: str) -> str:
    # The description carries what the run was created from, so the next sync can tell whether it differs.
    wanted = {
        "pipeline": pipeline,
        "version": version,
        "cron": entry.cron,
        "parameters": entry.parameters,
        "service_account": service_account,
    }
    return f"{MANAGED_MARK}: {json.dumps(wanted, sort_keys=True)}"


def sync(client: Any, schedules: SchedulesFile, versions: dict[str, str]) -> SyncReport:
    """Make the recurring runs in `schedules.experiment` match; `versions` maps pipeline -> locked version."""
    report = SyncReport()
    experiment_id = kfp_client.experiment_id(client, schedules.experiment)
    existing: dict[str, Any] = {}
    page = client.list_recurring_runs(experiment_id=experiment_id, page_size=100)
    for run in page.recurring_runs or []:
        existing[run.display_name] = run
    for entry in schedules.schedules:
        version = entry.version or versions.get(entry.pipeline)
        if not version:
            raise KfchaosError(
                f"schedule {entry.name}: pipeline {entry.pipeline} is not in the lock file; give version"
            )
        service_account = entry.service_account or schedules.service_account
        description = _description(entry.pipeline, version, entry, service_account)
        current = existing.pop(entry.name, None)
        if current is not None and current.description == description:
            if _is_enabled(current) == entry.enabled:
                report.unchanged.append(entry.name)
            elif entry.enabled:
                client.enable_recurring_run(current.recurring_run_id)
                report.enabled.append(entry.name)
            else:
                client.disable_recurring_run(current.recurring_run_id)
                report.disabled.append(entry.name)
            continue
        pipeline_id, version_id = kfp_client.resolve_version(client, entry.pipeline, version)
        if current is not None:
            client.delete_recurring_run(current.recurring_run_id)
        client.create_recurring_run(
            experiment_id=experiment_id,
            job_name=entry.name,
            description=description,
            cron_expression=entry.cron,
            max_concurrency=1,
            no_catchup=True,
            params=dict(entry.parameters),
            pipeline_id=pipeline_id,
            version_id=version_id,
            enabled=entry.enabled,
            service_account=service_account,
        )
        (report.replaced if current is not None else report.created).append(entry.name)
    for name, run in sorted(existing.items()):
        managed = (run.description or "").startswith(MANAGED_MARK)
        if managed and _is_enabled(run):
            client.disable_recurring_run(run.recurring_run_id)
            report.disabled.append(name)
    return report
