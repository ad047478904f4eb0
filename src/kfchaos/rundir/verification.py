"""What `kfchaos audit verify DIR` checks of a run folder (kfchaos.rundir.layout): the seal over its files and its
signature (kfchaos.runseal), the pipeline's audit record against the folder's experiment and baseline, and the
verdict re-judged from the folder's own inputs against verdict.json, stage by stage. The re-judgment is also what
a write records in run.json (kfchaos.rundir.writing), and the control records are checked against the baseline's
control before any re-judgment reads them.
"""

from __future__ import annotations

from typing import Any

from kfchaos import runseal, signing
from kfchaos.errors import KfchaosError
from kfchaos.rundir.layout import (
    AUDIT,
    BASELINE,
    CONTROL_RECORDS,
    EXPERIMENT,
    MANIFEST,
    METRICS,
    RECORDS,
    RUN_STATE,
    SEALED,
    RunDir,
)


def verify(run: RunDir, trusted: signing.Trust | None = None, record_checked: bool = False) -> list[runseal.Finding]:
    """Everything `kfchaos audit verify DIR` (or `RECORD` in a run folder) checks: the seal over SEALED, the one list
    of the folder's files that `kfchaos verdict --run` checks too (every file's hash, each changed or missing one
    named, none added; its signature against the keys trusted here, its HMAC where a key is given), the audit
    record against the folder's experiment and baseline (`record_checked`: the caller verified the record's own
    hashes already), and the verdict re-judged from the folder's own inputs against verdict.json, stage by
    stage."""
    trusted = signing.trust() if trusted is None else trusted
    findings = runseal.check(run.path, SEALED, trusted)
    findings += _identity(run)
    if run.has(AUDIT):
        findings += _audit_findings(run, trusted, record_checked)
    again = rejudge(run)
    if again.get("error"):
        findings.append(runseal.Finding("rejudge", False, f"cannot re-judge: {again['error']}"))
    else:
        found = {stage: status for stage, status, _ in again["stages"]}
        # A pipeline's verdict lists the stages that ran; a stage a gate skipped has no records, and re-judging
        # shows it as INCONCLUSIVE with none: not a disagreement.
        held = _stage_statuses(run.verdict())
        skipped = [stage for stage, _, requests in again["stages"] if stage not in held and requests == 0]
        same = again["matches"] and all(found.get(stage) == status for stage, status in held.items())
        same = same and set(found) == set(held) | set(skipped)
        detail = (
            f"re-judged {again['status']}, stages {found}; verdict.json {run.verdict().get('status')}, stages {held}"
        )
        findings.append(runseal.Finding("rejudge", bool(same), detail))
    return findings


def _identity(run: RunDir) -> list[runseal.Finding]:
    """The run the folder holds is the run its name says: the seal names its run id (under its hashes and its
    signature), and so does run.json. A whole genuine folder copied or renamed (to count one good night twice, or
    to stand for another run) keeps the seal of the run it was."""
    sealed = runseal.sealed_run_id(run.path)
    if sealed is None:
        return []  # no readable seal: runseal.check's finding says so
    name = run.path.resolve().name
    try:
        named = run.manifest().get("run_id") if run.has(MANIFEST) else None
    except KfchaosError:
        named = None  # an unreadable run.json: its hash is the finding
    problems = [f"sealed as run {sealed!r}"] if sealed != name else []
    if named is not None and named != name:
        problems.append(f"{MANIFEST} names run {named!r}")
    if problems:
        detail = f"the folder is {name!r}, but {' and '.join(problems)}: a copy or a rename of another run's folder"
        return [runseal.Finding("run_id", False, detail)]
    return [runseal.Finding("run_id", True, f"{name!r}, as sealed")]


def _audit_findings(run: RunDir, trusted: signing.Trust, record_checked: bool = False) -> list[runseal.Finding]:
    """The pipeline's audit record: its own hashes (unless `record_checked`), and its experiment and baseline
    against the folder's files."""
    from kfchaos import audit

    try:
        record = audit.load_record(run.file(AUDIT))
    except KfchaosError as exc:
        return [runseal.Finding(AUDIT, False, str(exc))]
    out = (
        []
        if record_checked
        else [
            runseal.Finding(f"{AUDIT} {f.what}", f.ok, f.detail, f.authenticated, f.signer)
            for f in audit.verify(record, None, trusted)
        ]
    )
    for name, field in ((EXPERIMENT, "experiment"), (BASELINE, "baseline")):
        recorded = (record.get(field) or {}).get("sha256")
        if run.has(name):
            held: str | None = audit.sha256_text(run.file(name).read_text(errors="replace"))
        elif name == EXPERIMENT:
            out.append(runseal.Finding(f"{name} vs {AUDIT}", False, f"missing, audit {recorded}"))
            continue
        else:
            held = None
        out.append(runseal.Finding(f"{name} vs {AUDIT}", recorded == held, f"{held}, audit {recorded}"))
    return out


def _stage_statuses(verdict: dict[str, Any]) -> dict[Any, Any]:
    stages = verdict.get("stages")
    if not isinstance(stages, list):
        return {}
    return {s.get("stage"): s.get("status") for s in stages if isinstance(s, dict)}


def check_control_records(run: RunDir) -> None:
    """The folder's control records are the ones its baseline's control measured (records_sha256): the folder
    keeps them under one name whatever the baseline calls them, so they are checked here by that name."""
    from kfchaos.baseline import check_control_records, load_baseline  # lazy, as the readers here

    if run.has(BASELINE) and run.has(CONTROL_RECORDS):
        baseline, _ = load_baseline(run.file(BASELINE))
        check_control_records(baseline, run.file(CONTROL_RECORDS), run.file(BASELINE))


def rejudge(run: RunDir) -> dict[str, Any]:
    """The verdict `kfchaos verdict` gives on this folder's inputs, and whether it matches verdict.json."""
    from kfchaos.verdict.files import build_from_files  # lazy, as the readers here: only a re-judgment needs it

    try:
        check_control_records(run)
        held = run.verdict().get("status")  # refused here when verdict.json is missing or not a verdict
        again = build_from_files(
            experiment=run.file(EXPERIMENT),
            records=run.file(RECORDS),
            baseline=run.file(BASELINE) if run.has(BASELINE) else None,
            metrics=run.file(METRICS) if run.has(METRICS) else None,
            run_state=run.file(RUN_STATE) if run.has(RUN_STATE) else None,
        )
    except (KfchaosError, OSError, ValueError) as exc:
        return {"status": None, "matches": False, "error": str(exc)}
    status = again.status.value
    stages = [[s.stage, s.status.value, s.requests] for s in again.stages]
    return {"status": status, "matches": status == held, "stages": stages}
