"""The run folder's layout, and opening a folder to read or verify. `kfchaos demo`, `kfchaos run --local`,
`kfchaos verdict --out` and the pipeline's artifacts (collected from a kfp.local run, kfchaos.rundir.kfpimport)
all land as

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
the verdict again. A folder holds one write's files (kfchaos.rundir.writing: an earlier write's files this write
does not make are removed, and run.json names them). The names are here, once, for the writer, the verifier and
every reader.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kfchaos import runseal
from kfchaos.errors import KfchaosError
from kfchaos.jsonsource import load_json

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
        return read_json(self.file(MANIFEST))

    def verdict(self) -> dict[str, Any]:
        return read_json(self.file(VERDICT))

    def verdict_argv(self) -> list[str]:
        """`kfchaos verdict` arguments that re-judge this folder from its own inputs."""
        argv = ["verdict", "--experiment", str(self.file(EXPERIMENT)), "--records", str(self.file(RECORDS))]
        for flag, name in (("--baseline", BASELINE), ("--metrics", METRICS), ("--run-state", RUN_STATE)):
            if self.has(name):
                argv += [flag, str(self.file(name))]
        return argv


def read_json(path: Path) -> dict[str, Any]:
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
            context[key] = read_json(run.file(name))
    if run.has(STAGES):
        context["steps"] = json.loads(run.file(STAGES).read_text())
    if run.has(EVIDENCE):
        from kfchaos.evidence import files

        context["evidence"] = files.read(run.file(EVIDENCE).parent)
    return context
