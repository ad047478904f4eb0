"""One run folder layout, written and read here only: `kfchaos demo`, `kfchaos run --local`,
`kfchaos verdict --out` and the pipeline's artifacts (collected from a kfp.local run) all land as

    runs/<run-id>/
      run.json           manifest: layout version, run id (= the folder's name), experiment, target, commit,
                         start/end, where it came from, the files present, the re-judged status, and
                         `replaced`: the files an earlier write into the same folder left and this one removed
      experiment.yaml    the experiment as run
      baseline.yaml      the baseline it was judged against (absent: the run had none)
      records.parquet    every request's record (kfchaos.records.REQUEST_SCHEMA), all stages
      metrics.json       the metric series of the run (kfchaos.metrics.snapshot format)
      run-state.json     facts the records cannot tell: faults verified, stage validity, faults removed at
      stages.json        the pipeline's step results (gates, faults, stages), pipeline runs only
      fault-actions.jsonl  the calls a traffic-side fault made to the target (LoRA loads/unloads), one a line
      verdict.json       the verdict, in the documented kfchaos.Verdict format (docs/verdict.md)
      report.html        the report (offline: its plotting script is inline)
      report.md          the Markdown summary
      audit.json         the sealed audit record, pipeline runs only (`kfchaos audit verify`)
      seal.json          SHA-256 of every other file, written last (kfchaos.runseal; `kfchaos audit verify DIR`)
      evidence/          the OOM evidence bundle, when the run called for one (kfchaos.evidence.files):
                         index.json and one file per item

The folder is self-sufficient to re-judge: `kfchaos verdict --run runs/<run-id>` reads its inputs and gives
the verdict again. A folder holds one write's files: writing into a folder that holds an earlier write removes
every file of the layout this write does not make (an old metrics.json would be re-judged with the new records and
sealed as theirs), and run.json names them (`replaced`). `write()` re-judges on the spot and records the result in
run.json (`rejudged`), so a pipeline verdict that the offline verdict would not reproduce is visible instead of
silent.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from kfchaos import parquetguard, runseal, safefile, signing
from kfchaos.errors import KfchaosError
from kfchaos.jsonsource import load_json
from kfchaos.records import COMPLETE_KEY, END_KEY, RUN_ID_KEY, SPOOL_KEY

SPOOL_MARKS = (COMPLETE_KEY, END_KEY, SPOOL_KEY)

LAYOUT_VERSION = 1
MANIFEST = "run.json"
EXPERIMENT = "experiment.yaml"
BASELINE = "baseline.yaml"
CONTROL_RECORDS = "baseline.control.parquet"  # the control baseline's own records (`kfchaos baseline control`)
RECORDS = "records.parquet"
METRICS = "metrics.json"
RUN_STATE = "run-state.json"
STAGES = "stages.json"
VERDICT = "verdict.json"
REPORT_HTML = "report.html"
REPORT_MD = "report.md"
AUDIT = "audit.json"
EVIDENCE = "evidence/index.json"  # kfchaos.evidence.files: FOLDER/INDEX
FAULT_ACTIONS = "fault-actions.jsonl"
FILES = (
    EXPERIMENT,
    BASELINE,
    CONTROL_RECORDS,
    RECORDS,
    METRICS,
    RUN_STATE,
    STAGES,
    VERDICT,
    REPORT_HTML,
    REPORT_MD,
    AUDIT,
    EVIDENCE,
    FAULT_ACTIONS,
)

# Every file a verdict or a report of the folder reads (and the manifest): sealed in seal.json (kfchaos.runseal).
SEALED = (MANIFEST, *FILES)

# Where kfp.local leaves the pipeline's artifacts: <run>/<task>/<output name> (KFP output names cannot hold dots).
PIPELINE_ARTIFACTS = {REPORT_HTML: ("verdict-report", "report_html"), AUDIT: ("verdict-report", "audit")}
_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


class RunDirError(KfchaosError):
    pass


@dataclass(frozen=True)
class RunDir:
    """A run folder on disk."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    def file(self, name: str) -> Path:
        return self.path / name

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    def manifest(self) -> dict[str, Any]:
        return _json(self.file(MANIFEST))

    def verdict(self) -> dict[str, Any]:
        return _json(self.file(VERDICT))

    def verdict_argv(self) -> list[str]:
        """`kfchaos verdict` arguments that re-judge this folder from its own inputs."""
        argv = ["verdict", "--experiment", str(self.file(EXPERIMENT)), "--records", str(self.file(RECORDS))]
        for flag, name in (("--baseline", BASELINE), ("--metrics", METRICS), ("--run-state", RUN_STATE)):
            if self.has(name):
                argv += [flag, str(self.file(name))]
        return argv


def _json(path: Path) -> dict[str, Any]:
    try:  # capped before reading: a run folder is outside input (a 3 GB file is refused, not read whole)
        data = load_json(path, "run folder file", finite_only=False)
    except KfchaosError as exc:
        raise RunDirError(str(exc)) from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    return data


def open_run(path: str | Path) -> RunDir:
    """A run folder to read; refuses a folder without the manifest or the inputs a re-judgment needs."""
    run = RunDir(Path(path))
    if not run.path.is_dir():
        raise RunDirError(f"{path}: not a run folder (no such directory)")
    missing = [name for name in (MANIFEST, EXPERIMENT, RECORDS) if not run.has(name)]
    if missing:
        raise RunDirError(f"{path}: not a kfchaos run folder: missing {', '.join(missing)}")
    layout = run.manifest().get("layout")
    if layout != LAYOUT_VERSION:
        raise RunDirError(f"{run.file(MANIFEST)}: layout {layout!r}; this kfchaos reads layout {LAYOUT_VERSION}")
    return run


def holding(record: Path) -> RunDir | None:
    """The run folder an audit record lies in (its AUDIT file, beside the folder's manifest or seal), or None: a
    record verified there is verified with the folder's files (`verify`), the one list of files (SEALED) that
    `kfchaos verdict --run` checks too."""
    folder = record.resolve().parent
    if record.name != AUDIT or not ((folder / MANIFEST).is_file() or (folder / runseal.SEAL).is_file()):
        return None
    return RunDir(folder)


def open_to_verify(path: str | Path) -> RunDir:
    """A run folder to verify (`kfchaos audit verify DIR`): a directory with its manifest or its seal. Unlike
    `open_run`, the inputs may be missing: each file the seal lists and the folder lacks is a finding of `verify`,
    named, not a refusal to look."""
    run = RunDir(Path(path))
    if not run.path.is_dir():
        raise RunDirError(f"{path}: not a run folder (no such directory)")
    if not run.has(MANIFEST) and not run.has(runseal.SEAL):
        raise RunDirError(f"{path}: not a kfchaos run folder: missing {MANIFEST} and {runseal.SEAL}")
    if run.has(MANIFEST) and (layout := run.manifest().get("layout")) != LAYOUT_VERSION:
        raise RunDirError(f"{run.file(MANIFEST)}: layout {layout!r}; this kfchaos reads layout {LAYOUT_VERSION}")
    return run


def safe_id(text: str) -> str:
    """A run id usable as a folder name (no separators, no leading dot)."""
    cleaned = _SAFE_ID.sub("-", text).strip(".-")[:120]
    if not cleaned:
        raise RunDirError(f"run id {text!r} has no usable characters")
    return cleaned


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write(path: str | Path, **parts: Any) -> RunDir:
    """Write a whole run folder (see `_write`), holding the folder's lock: two writers never interleave. The folder
    is kfchaos's own (kfchaos.safefile): refused when a symlink stands at its name or another user owns it; it is
    private (0700, files 0600): it is the run's evidence. The seal is signed (kfchaos.signing): with the configured
    key (the pipeline's Secret) or the user's own, made on first use; a configured key that cannot be used stops the
    write before anything is written."""
    signer, unsigned_because = _signer()
    with safefile.Folder.open(path, private=True, own=True) as folder:
        folder.lock()
        return _write(folder, signer=signer, unsigned_because=unsigned_because, **parts)


def _signer() -> tuple[signing.Signer | None, str]:
    """(the key to seal with, why there is none). A config folder that cannot be written leaves the seal unsigned
    (it then verifies as integrity only, and `audit verify --require-signed` refuses it); a broken key raises."""
    try:
        return signing.signer(local=True), ""
    except OSError as exc:
        return None, f"no signing key: {signing.config_folder()} cannot hold one ({exc.strerror or exc})"


def _write(
    folder: safefile.Folder,
    *,
    signer: signing.Signer | None,
    unsigned_because: str,
    experiment_text: str,
    records: Any,
    verdict: dict[str, Any],
    baseline_text: str | None = None,
    baseline_path: Path | None = None,
    metrics: Any | None = None,
    run_state: dict[str, Any] | None = None,
    stages: list[dict[str, Any]] | None = None,
    audit: dict[str, Any] | None = None,
    info: dict[str, Any] | None = None,
    evidence: dict[str, Any] | None = None,
) -> RunDir:
    """Write a whole run folder. `records`: a Parquet path (file or folder), a pyarrow Table, or a list of
    Parquet paths (merged); `metrics`: a MetricsSnapshot, its dict, or None. The reports are drawn from the
    folder's own files, so what they show is what a re-judgment reads. Every file goes through `folder`
    (kfchaos.safefile: a new temporary renamed onto its name)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = RunDir(folder.path)
    written = {EXPERIMENT, RECORDS, VERDICT, REPORT_HTML, REPORT_MD}  # the files every write makes
    folder.write_text(EXPERIMENT, experiment_text)
    if baseline_text and baseline_text.strip():
        folder.write_text(BASELINE, baseline_text)
        written.add(BASELINE)
        control = _control_records(baseline_text, baseline_path)
        if control is not None:
            folder.copy(CONTROL_RECORDS, control)
            written.add(CONTROL_RECORDS)
    if isinstance(records, pa.Table):
        table = records
    elif isinstance(records, list):
        for part in records:
            parquetguard.check(part)
        tables = [pq.read_table(p) for p in records]
        table = pa.concat_tables(tables, promote_options="default") if tables else None
    else:
        parquetguard.check(records)
        table = pq.read_table(records)
    if table is None:
        raise RunDirError(f"{run.path}: the run has no request records")
    # The run id rides in the Parquet metadata, so that a folder of two runs' records is refused when judged. The
    # marks of a replay's parts do not: records.parquet is one whole file, and a stage its disk cut says so in
    # run-state.json (stage_valid), which the caller gives.
    metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k not in SPOOL_MARKS}
    metadata[RUN_ID_KEY] = run.run_id.encode()
    stamped = table.replace_schema_metadata(metadata)
    folder.write(RECORDS, lambda handle: pq.write_table(stamped, handle))
    info = dict(info or {})
    if info.get("started_at") is None and "intended" in table.column_names and table.num_rows:
        # No pipeline to say when the run began and ended: the first request's send and the last response.
        import pyarrow.compute as pc

        info["started_at"] = pc.min(table["intended"]).as_py()
        ends = pc.add(table["sent"], table["latency"]) if "latency" in table.column_names else table["intended"]
        info["finished_at"] = pc.max(ends).as_py() or pc.max(table["intended"]).as_py()
    if metrics is not None:
        data = metrics if isinstance(metrics, dict) else metrics.to_dict()
        folder.write_text(METRICS, json.dumps(data, indent=1) + "\n")
        written.add(METRICS)
    if run_state:
        folder.write_text(RUN_STATE, json.dumps(run_state, indent=2) + "\n")
        written.add(RUN_STATE)
    if stages is not None:
        folder.write_text(STAGES, json.dumps(stages, indent=2) + "\n")
        written.add(STAGES)
        actions = [a for step in stages for a in (step.get("detail") or {}).get("fault_actions") or []]
        if actions:
            folder.write_text(FAULT_ACTIONS, "".join(json.dumps(a, sort_keys=True) + "\n" for a in actions))
            written.add(FAULT_ACTIONS)
    if audit is not None:
        folder.write_text(AUDIT, json.dumps(audit, indent=2) + "\n")
        written.add(AUDIT)
    if _write_evidence(folder, evidence):
        written.add(EVIDENCE)
    # Inputs all read and written: what an earlier write left here and this one did not make goes, before anything
    # is judged or sealed (an old metrics.json would be re-judged with this run's records and sealed as its own).
    replaced = _remove_others(folder, written)
    verdict = {**verdict, "run_id": run.run_id}
    folder.write_text(VERDICT, json.dumps(verdict, indent=2) + "\n")
    manifest = _manifest(run, experiment_text, verdict, info)
    if replaced:
        manifest["replaced"] = replaced  # this write replaced an earlier one; these of its files are gone
    folder.write_text(MANIFEST, json.dumps(manifest, indent=2) + "\n")
    rejudged = _rejudge(run)
    rejudged.pop("stages", None)
    manifest["rejudged"] = rejudged
    folder.write_text(MANIFEST, json.dumps(manifest, indent=2) + "\n")
    render_reports(run, folder)
    manifest["files"] = sorted(name for name in FILES if run.has(name))
    folder.write_text(MANIFEST, json.dumps(manifest, indent=2) + "\n")
    document = runseal.seal(run.path, run.run_id, SEALED, signer, unsigned_because)  # last: it covers all above
    folder.write_text(runseal.SEAL, runseal.dumps(document))
    return run


def verify(run: RunDir, trusted: signing.Trust | None = None, record_checked: bool = False) -> list[runseal.Finding]:
    """Everything `kfchaos audit verify DIR` (or `RECORD` in a run folder) checks: the seal over SEALED, the one list
    of the folder's files that `kfchaos verdict --run` checks too (every file's hash, each changed or missing one
    named, none added; its signature against the keys trusted here, its HMAC where a key is given), the audit
    record against the folder's experiment and baseline (`record_checked`: the caller verified the record's own
    hashes already), and the verdict re-judged from the folder's own inputs against verdict.json, stage by
    stage."""
    trusted = signing.trust() if trusted is None else trusted
    findings = runseal.check(run.path, SEALED, trusted)
    if run.has(AUDIT):
        findings += _audit_findings(run, trusted, record_checked)
    again = _rejudge(run)
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
            runseal.Finding(f"{AUDIT} {f.what}", f.ok, f.detail, f.authenticated)
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


def _write_evidence(folder: safefile.Folder, evidence: dict[str, Any] | None) -> bool:
    """evidence/ with this bundle's files only (an earlier write's items are removed, so none is sealed as this
    run's); whether there was a bundle to write."""
    from kfchaos.evidence import files
    from kfchaos.evidence.model import Bundle

    bundle = Bundle.from_dict(evidence) if evidence else None
    if bundle is None:
        return False
    files.write(bundle, folder)  # refuses a symlink at evidence/ (kfchaos.safefile)
    keep = {files.INDEX, *(item.file for item in bundle.items if item.collected)}
    with folder.subfolder(files.FOLDER) as items:
        for name in items.names():
            if name not in keep:
                items.remove_tree(name)
    return True


def _remove_others(folder: safefile.Folder, written: set[str]) -> list[str]:
    """Remove every file of the layout this write did not make (left by an earlier write into the same folder): a
    folder holds one write's files, and the seal covers those only. Returns what was removed."""
    from kfchaos.evidence import files

    removed = []
    for name in FILES:
        if name in written:
            continue
        if name == EVIDENCE:
            if folder.exists(files.FOLDER):
                folder.remove_tree(files.FOLDER)
                removed.append(f"{files.FOLDER}/")
        elif folder.exists(name):
            folder.remove(name)
            removed.append(name)
    return removed


def _control_records(baseline_text: str, baseline_path: Path | None) -> Path | None:
    """The control baseline's records file named in the baseline (it lies beside the baseline file)."""
    if baseline_path is None:
        return None
    try:
        control = (yaml.safe_load(baseline_text) or {}).get("control")
    except yaml.YAMLError:
        return None
    name = control.get("records") if isinstance(control, dict) else None
    if not isinstance(name, str) or not name or Path(name).name != name:
        return None  # a bare file name only: never a path out of the baseline's folder
    found = Path(baseline_path).parent / name
    return found if found.is_file() else None


def _manifest(run: RunDir, experiment_text: str, verdict: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    metadata = (yaml.safe_load(experiment_text) or {}).get("metadata", {}) if experiment_text.strip() else {}
    spec = (yaml.safe_load(experiment_text) or {}).get("spec", {}) if experiment_text.strip() else {}
    target = info.get("target") or ((spec.get("target") or {}).get("endpoint") if isinstance(spec, dict) else None)
    started, finished = info.get("started_at"), info.get("finished_at")
    return {
        "kind": "kfchaos.Run",
        "layout": LAYOUT_VERSION,
        "run_id": run.run_id,
        "source": info.get("source", "verdict"),
        "experiment": {"name": metadata.get("name"), "version": metadata.get("version")},
        "target": target,
        "commit": info.get("commit"),
        "pipeline": info.get("pipeline"),
        "pipeline_job_id": info.get("pipeline_job_id"),
        "started_at": started,
        "finished_at": finished,
        "started": _iso(started),
        "finished": _iso(finished),
        "written_at": _iso(time.time()),
        "status": verdict.get("status"),
    }


def check_control_records(run: RunDir) -> None:
    """The folder's control records are the ones its baseline's control measured (records_sha256): the folder
    keeps them under one name whatever the baseline calls them, so they are checked here by that name."""
    from kfchaos.baseline import check_control_records, load_baseline  # lazy, as the readers here

    if run.has(BASELINE) and run.has(CONTROL_RECORDS):
        baseline, _ = load_baseline(run.file(BASELINE))
        check_control_records(baseline, run.file(CONTROL_RECORDS), run.file(BASELINE))


def _rejudge(run: RunDir) -> dict[str, Any]:
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


def render_reports(run: RunDir, folder: safefile.Folder) -> None:
    """report.html and report.md from the folder's own files."""
    from kfchaos.report import html, markdown

    context = report_context(run)
    document = run.verdict()
    folder.write_text(REPORT_MD, markdown(document, context))
    folder.write_text(REPORT_HTML, html(document, context))


def report_context(run: RunDir) -> dict[str, Any]:
    """What the report draws besides the verdict, read from the folder (each part optional)."""
    from kfchaos.metrics.snapshot import MetricsSnapshot

    context: dict[str, Any] = {"run": run.manifest() if run.has(MANIFEST) else {"run_id": run.run_id}}
    if run.has(RECORDS):
        context["records"] = run.file(RECORDS)
    if run.has(METRICS):
        context["metrics"] = MetricsSnapshot.load(run.file(METRICS))
    if run.has(EXPERIMENT):
        from kfchaos.validate import load_experiment

        # Unloadable: the report still shows the verdict; the header says which experiment from the manifest.
        with contextlib.suppress(KfchaosError):
            context["experiment"] = load_experiment(run.file(EXPERIMENT))
    if run.has(BASELINE):
        context["baseline"] = yaml.safe_load(run.file(BASELINE).read_text())
    if run.has(CONTROL_RECORDS):
        context["control_records"] = run.file(CONTROL_RECORDS)
    for key, name in (("run_state", RUN_STATE), ("audit", AUDIT)):
        if run.has(name):
            context[key] = _json(run.file(name))
    if run.has(STAGES):
        context["steps"] = json.loads(run.file(STAGES).read_text())
    if run.has(EVIDENCE):
        from kfchaos.evidence import files

        context["evidence"] = files.read(run.file(EVIDENCE).parent)
    return context


# --- pipeline runs -------------------------------------------------------------------------------------------


def _quiet_reason(step: dict[str, Any]) -> str:
    """The reason shown for a step that gave none: a steady-state probe that proceeded is short by design, so
    its own status is usually INCONCLUSIVE (too few samples) and it is not counted in the verdict."""
    if step.get("step") == "steady_state" and step.get("proceed", True):
        return "proceeded: no gating check failed; the short probe is not counted in the verdict"
    return "ok"


def verdict_from_pipeline(audit: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, Any]:
    """The pipeline's overall verdict in the documented kfchaos.Verdict format: its stages are the stage
    steps' results; the other steps (steady state, injection, removal) and recovery are experiment-wide checks."""
    steps = audit.get("steps", [])
    experiment = yaml.safe_load(audit.get("parameters", {}).get("experiment", "") or "{}") or {}
    metadata = experiment.get("metadata", {})
    stages = [
        s["detail"]["stage"]
        for s in steps
        if s.get("step") == "stage" and isinstance(s.get("detail"), dict) and isinstance(s["detail"].get("stage"), dict)
    ]
    checks = []
    for step in steps:
        if step.get("step") == "stage":
            continue
        status = step.get("status", "INCONCLUSIVE")
        checks.append(
            {
                "name": step.get("step"),
                "status": status if status in ("PASS", "FAIL", "INCONCLUSIVE") else "INCONCLUSIVE",
                "gating": step.get("step") != "steady_state" or not step.get("proceed", True),
                "value": None,
                "threshold": None,
                "interval": None,
                "samples": 0,
                "unit": "",
                "reason": "; ".join(step.get("reasons", [])) or _quiet_reason(step),
                "details": {},
            }
        )
    recovery = (audit.get("recovery") or {}).get("recovery")
    if isinstance(recovery, dict):
        checks.append(recovery)
    verdict = audit.get("verdict", {})
    return {
        "kind": "kfchaos.Verdict",
        "version": 1,
        "experiment": {"name": metadata.get("name"), "version": metadata.get("version")},
        "status": verdict.get("status", "INCONCLUSIVE"),
        "confidence": None,
        "reasons": list(verdict.get("reasons", [])),
        "warnings": [],
        "baseline": baseline,
        "checks": checks,
        "stages": stages,
        "source": "pipeline",
        **({"fault_windows": audit["fault_windows"]} if audit.get("fault_windows") else {}),
    }


def run_state_from_pipeline(audit: dict[str, Any]) -> dict[str, Any]:
    """run-state.json from the pipeline's step results, so that a re-judgment sees what the pipeline saw."""
    steps = audit.get("steps", [])
    state: dict[str, Any] = {}
    injected = [s for s in steps if s.get("step") == "inject"]
    if injected:
        state["faults_verified"] = all(s.get("status") == "PASS" for s in injected)
    verified = _faults_verified(steps)
    if verified and not injected:
        state["faults_verified"] = verified
    valid: dict[str, Any] = {}
    for step in steps:
        if step.get("step") == "stage" and step.get("status") != "SKIPPED":
            replay = (step.get("detail") or {}).get("replay") or {}
            if "valid" in replay and isinstance(replay["valid"], bool | str):
                valid[str(step.get("stage"))] = replay["valid"]
    if valid:
        state["stage_valid"] = valid
    removed = (audit.get("recovery") or {}).get("removed_at")
    if isinstance(removed, int | float):
        state["faults_removed_at"] = float(removed)
    recovery = (audit.get("recovery") or {}).get("recovery")
    if isinstance(recovery, dict) and recovery.get("status") in ("PASS", "FAIL", "INCONCLUSIVE"):
        state["recovery"] = recovery  # measured on the probe's records, which the folder does not hold
    # The verified fault windows, where this kfchaos's run state reads them (docs/verdict.md, "Fault windows").
    from kfchaos.verdict.runstate import RunState

    if audit.get("fault_windows") and "fault_windows" in RunState.__dataclass_fields__:
        state["fault_windows"] = audit["fault_windows"]
    return state


def _faults_verified(steps: list[dict[str, Any]]) -> dict[str, bool]:
    """Per cluster fault, whether a stage step saw one of its chaos objects injected (the object's `injection`,
    kfchaos.steps.stagefaults: Chaos Mesh's AllInjected condition, or the demo proxy's confirmation): the facts
    the pipeline's stages were judged on, so that re-judging the folder does not call them unverified."""
    out: dict[str, bool] = {}
    for step in steps:
        if step.get("step") != "stage" or not isinstance(step.get("detail"), dict):
            continue
        for obj in step["detail"].get("chaos_objects") or []:
            if not isinstance(obj, dict) or not isinstance(obj.get("fault"), str):
                continue
            injection = obj.get("injection")
            # As the stage step decides (kfchaos.steps.stagefaults._wait_injected): an answer without the flag is ok.
            seen = injection.get("injected", True) is True if isinstance(injection, dict) else injection is True
            out[obj["fault"]] = out.get(obj["fault"], False) or seen
    return out


def _baseline_file(parameters: dict[str, Any]) -> Path | None:
    """Where the run's baseline file lies on this machine (for the control records beside it): the experiment's
    spec.baseline.file, absolute or relative to the experiment file's folder (kfchaos.spec.experiment_relative)."""
    try:
        experiment = yaml.safe_load(parameters.get("experiment", "") or "{}") or {}
    except yaml.YAMLError:
        return None
    name = ((experiment.get("spec") or {}).get("baseline") or {}).get("file") if isinstance(experiment, dict) else None
    if not isinstance(name, str) or not name:
        return None
    folder = Path(str(parameters.get("experiment_dir") or "."))
    candidate = Path(name) if Path(name).is_absolute() else folder / name
    return candidate if candidate.is_file() else None


def _baseline_summary(text: str) -> dict[str, Any] | None:
    """The verdict's `baseline` entry (as `evaluate` gives it) from the baseline text the pipeline ran with."""
    from pydantic import ValidationError

    from kfchaos.baseline import Baseline

    try:
        return Baseline.model_validate(yaml.safe_load(text)).summary()
    except (yaml.YAMLError, ValidationError):
        return None


def embedded_metrics(report_html: str, key: str = "metrics") -> dict[str, Any] | None:
    """The metrics snapshot the pipeline's report embedded (the verdict step fetched it over the whole run), or
    with key="evidence" the OOM evidence bundle it collected."""
    from kfchaos.report import DATA_ID

    found = re.search(rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', report_html, re.S)
    if not found:
        return None
    try:
        data = json.loads(found.group(1))
    except json.JSONDecodeError:
        return None
    metrics = data.get(key) if isinstance(data, dict) else None
    return metrics if isinstance(metrics, dict) else None


def from_local_pipeline(kfp_run_dir: Path, runs_root: Path, *, source: str, run_id: str | None = None) -> RunDir:
    """runs/<run-id>/ from a kfp.local run's outputs (<run>/<task>/<output>): the folder's name is `run_id`, the
    run's own (kfchaos.kfp.runs.LocalOutcome.run_id: its pipeline root's name, time and a random part), else the
    kfp.local run's (the job-id placeholder is a fresh random id per task there, so no task sees one run id)."""
    audit_path = kfp_run_dir.joinpath(*PIPELINE_ARTIFACTS[AUDIT])
    if not audit_path.is_file():
        raise RunDirError(f"{kfp_run_dir}: the run wrote no audit record (it failed before its verdict)")
    audit = _json(audit_path)
    parameters = audit.get("parameters", {})
    baseline_text = parameters.get("baseline", "") or ""
    baseline = None
    if baseline_text.strip():
        baseline = _baseline_summary(baseline_text)
    baseline_path = _baseline_file(parameters)
    html_path = kfp_run_dir.joinpath(*PIPELINE_ARTIFACTS[REPORT_HTML])
    page = html_path.read_text() if html_path.is_file() else ""
    metrics = embedded_metrics(page) if page else None
    run = audit.get("run", {})
    # One records file per stage: the replay task's, or the merge task's for a sharded stage (kfchaos.steps.shards).
    parts = sorted([*kfp_run_dir.glob("replay-stage*/requests"), *kfp_run_dir.glob("merge-shards*/requests")])
    return write(
        runs_root / safe_id(run_id or kfp_run_dir.name),
        experiment_text=parameters.get("experiment", ""),
        records=[p for p in parts if p.exists()],  # a folder: the parts of a stage its disk cut
        verdict=verdict_from_pipeline(audit, baseline),
        baseline_text=baseline_text,
        baseline_path=baseline_path,
        metrics=metrics,
        run_state=run_state_from_pipeline(audit),
        stages=audit.get("steps", []),
        audit=audit,
        evidence=embedded_metrics(page, "evidence") if page else None,
        info={
            "source": source,
            "target": parameters.get("target"),
            "commit": audit.get("git_commit"),
            "pipeline": audit.get("pipeline"),
            "pipeline_job_id": run.get("id"),
            "started_at": run.get("started_at"),
            "finished_at": run.get("finished_at"),
        },
    )
