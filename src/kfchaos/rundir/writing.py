"""A whole run folder written (the layout is kfchaos.rundir.layout's), through kfchaos.safefile and under the
folder's lock. A folder holds one write's files: writing into a folder that holds an earlier write removes every
file of the layout this write does not make (an old metrics.json would be re-judged with the new records and
sealed as theirs), and run.json names them (`replaced`). `write()` re-judges on the spot
(kfchaos.rundir.verification) and records the result in run.json (`rejudged`), so a pipeline verdict that the
offline verdict would not reproduce is visible instead of silent; the reports are drawn from the folder's own
files, and the seal is written last.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from kfchaos import parquetguard, runseal, safefile, signing
from kfchaos.records import COMPLETE_KEY, END_KEY, RUN_ID_KEY, SPOOL_KEY
from kfchaos.rundir.layout import (
    AUDIT,
    BASELINE,
    CONTROL_RECORDS,
    EVIDENCE,
    EXPERIMENT,
    FAULT_ACTIONS,
    FILES,
    LAYOUT_VERSION,
    MANIFEST,
    METRICS,
    RECORDS,
    REPORT_HTML,
    REPORT_MD,
    RUN_STATE,
    SEALED,
    STAGES,
    VERDICT,
    RunDir,
    RunDirError,
    report_context,
)
from kfchaos.rundir.verification import rejudge

SPOOL_MARKS = (COMPLETE_KEY, END_KEY, SPOOL_KEY)


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
    rejudged = rejudge(run)
    rejudged.pop("stages", None)
    manifest["rejudged"] = rejudged
    folder.write_text(MANIFEST, json.dumps(manifest, indent=2) + "\n")
    render_reports(run, folder)
    manifest["files"] = sorted(name for name in FILES if run.has(name))
    folder.write_text(MANIFEST, json.dumps(manifest, indent=2) + "\n")
    document = runseal.seal(run.path, run.run_id, SEALED, signer, unsigned_because)  # last: it covers all above
    folder.write_text(runseal.SEAL, runseal.dumps(document))
    return run


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


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_reports(run: RunDir, folder: safefile.Folder) -> None:
    """report.html and report.md from the folder's own files."""
    from kfchaos.report.markdown import markdown
    from kfchaos.report.page import html

    context = report_context(run)
    document = run.verdict()
    folder.write_text(REPORT_MD, markdown(document, context))
    folder.write_text(REPORT_HTML, html(document, context))
