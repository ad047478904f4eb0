"""The runs of one experiment in a local runs/ folder (kfchaos.rundir's layout: runs/<run-id>/).

Every folder is verified before its figures are read, by the check `kfchaos audit verify DIR` makes
(kfchaos.rundir.verification.verify: the seal over every file, its signature, the audit record against the folder,
and the verdict re-judged from the folder's own inputs). A folder that does not verify is listed as unverified with the
findings that failed; its verdict is still shown, never counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from kfchaos import runseal, signing
from kfchaos.errors import KfchaosError, SpecError
from kfchaos.history.model import RunEntry, measurements, oom_kills, pipeline_version
from kfchaos.rundir import layout, verification
from kfchaos.yamlsource import load_yaml


@dataclass(frozen=True)
class Found:
    """The runs of the experiment, and the folders that could not even be attributed to an experiment."""

    runs: list[RunEntry]
    unreadable: list[str] = field(default_factory=list)


DEPTH = 3  # runs/<run-id>/, and CI's downloaded artifacts: history/<workflow run>/<artifact>/<run-id>/


def _is_run_folder(path: Path) -> bool:
    return (path / layout.MANIFEST).is_file() or (path / runseal.SEAL).is_file()


def run_folders(root: Path, depth: int = DEPTH) -> list[Path]:
    """The run folders under `root`, `depth` levels down at most; a run folder's own subfolders are not searched (its
    evidence/ is part of it). Symbolic links are not followed: a run folder is kfchaos's own (kfchaos.safefile)."""
    found: list[Path] = []
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        if _is_run_folder(path):
            found.append(path)
        elif depth > 1:
            found += run_folders(path, depth - 1)
    return found


def read_runs(
    root: Path,
    experiment: str,
    *,
    versions: set[str] | None = None,
    require_signed: bool = False,
    trusted: signing.Trust | None = None,
) -> Found:
    """Every run folder under `root` (run_folders) whose manifest names `experiment` (and, given `versions`, one of
    those pipeline versions: the others are not verified, which is the costly part). A run met in several folders
    that all carry the same seal (CI downloads the same artifact twice) is listed once, and counted once when every
    copy verifies; copies whose seals differ are each listed unverified, since which of them is the run cannot be
    told."""
    if not root.is_dir():
        raise KfchaosError(f"{root}: no such runs folder")
    trusted = signing.trust() if trusted is None else trusted
    unreadable: list[str] = []
    met: dict[str, list[tuple[layout.RunDir, dict]]] = {}
    for path in run_folders(root):
        try:
            run = layout.open_to_verify(path)
            manifest = run.manifest()
        except KfchaosError as exc:
            unreadable.append(f"{path}: {exc}")
            continue
        if _mapping(manifest.get("experiment")).get("name") != experiment:
            continue
        version, _ = pipeline_version(manifest.get("pipeline"), _mapping(manifest.get("experiment")).get("version"))
        if versions is not None and version not in versions:
            continue
        met.setdefault(run.run_id, []).append((run, manifest))
    runs: list[RunEntry] = []
    for copies in met.values():
        entries = [_entry(run, manifest, require_signed, trusted) for run, manifest in copies]
        if len(copies) == 1:
            runs += entries
        elif len({_seal_bytes(run) for run, _ in copies}) == 1:
            # The same run downloaded twice (CI artifacts): listed once, counted once if every copy verifies (one
            # that does not is what is listed, with why).
            kept = next((e for e in entries if not e.verified), entries[0])
            runs.append(kept)
            unreadable += [f"{e.source}: run {e.run_id} again (also read from {kept.source}); listed once"
                           for e in entries if e is not kept]  # fmt: skip
        else:
            others = ", ".join(e.source for e in entries)
            why = f"run {copies[0][0].run_id} is in {len(copies)} folders that differ ({others}): none is counted"
            runs += [replace(e, verified=False, unverified_because=[*e.unverified_because, why]) for e in entries]
    return Found(runs, unreadable)


def _seal_bytes(run: layout.RunDir) -> bytes | None:
    try:
        return run.file(runseal.SEAL).read_bytes()[: runseal.MAX_SEAL_BYTES]
    except OSError:
        return None


def _mapping(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _consistency(run: layout.RunDir, manifest: dict) -> list[str]:
    """What history reads from run.json (the experiment's name and version, the pipeline) against the files the
    verdict was judged from: experiment.yaml's metadata and, where the folder has one, the audit record's pipeline
    version. A folder whose run.json was rewritten to stand for another version or another experiment (its hashes
    recomputed, or a seal by a key that is not trusted) disagrees with them; a folder kfchaos wrote never does."""
    problems: list[str] = []
    said = _mapping(manifest.get("experiment"))
    try:
        document = load_yaml(run.file(layout.EXPERIMENT).read_bytes(), layout.EXPERIMENT).data
    except (OSError, SpecError):
        document = None  # missing or unreadable: verification's findings say so
    metadata = document.get("metadata") if isinstance(document, dict) else None
    if isinstance(metadata, dict):
        for field in ("name", "version"):
            if said.get(field) is not None and str(said.get(field)) != str(metadata.get(field)):
                problems.append(
                    f"{layout.MANIFEST} says experiment {field} {str(said.get(field))[:80]!r}, its "
                    f"{layout.EXPERIMENT} {str(metadata.get(field))[:80]!r}: run.json was rewritten"
                )
    pipeline = _mapping(manifest.get("pipeline"))
    if run.has(layout.AUDIT):  # a pipeline's run (kfchaos.rundir.kfpimport): run.json's pipeline is its record's
        try:
            record = layout.read_json(run.file(layout.AUDIT))
        except KfchaosError:
            return problems  # verification names it
        where, expected = layout.AUDIT, _mapping(record.get("pipeline")).get("version")
    else:  # no record: the version is the experiment's, the one its pipeline is compiled under
        where, expected = layout.EXPERIMENT, _mapping(metadata).get("version", pipeline.get("version"))
    if pipeline.get("version") is not None and str(pipeline.get("version")) != str(expected):
        problems.append(
            f"{layout.MANIFEST} says pipeline version {str(pipeline.get('version'))[:80]!r}, its {where} "
            f"{str(expected)[:80]!r}: run.json was rewritten"
        )
    return problems


def _entry(run: layout.RunDir, manifest: dict, require_signed: bool, trusted: signing.Trust) -> RunEntry:
    try:
        findings = verification.verify(run, trusted)
    except (KfchaosError, OSError, ValueError) as exc:
        findings = [runseal.Finding("verify", False, str(exc))]
    problems = [str(f) for f in findings if not f.ok]
    if require_signed and not runseal.authenticated(findings):
        problems.append("seal not signed by a key trusted here (--require-signed)")
    problems += _consistency(run, manifest)
    try:
        verdict = run.verdict()
    except KfchaosError as exc:
        verdict = {}
        problems.append(str(exc))
    version, version_from = pipeline_version(
        manifest.get("pipeline"), _mapping(manifest.get("experiment")).get("version")
    )
    started = manifest.get("started_at")
    return RunEntry(
        run_id=run.run_id,
        source=str(run.path),
        started_at=float(started) if isinstance(started, int | float) else None,
        pipeline_version=version,
        version_from=version_from,
        status=verdict.get("status") if isinstance(verdict.get("status"), str) else None,
        verified=not problems,
        unverified_because=problems,
        measurements=measurements(verdict),
        oom_kills=oom_kills(verdict),
    )
