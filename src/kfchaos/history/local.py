"""The runs of one experiment in a local runs/ folder (kfchaos.rundir's layout: runs/<run-id>/).

Every folder is verified before its figures are read, by the check `kfchaos audit verify DIR` makes
(kfchaos.rundir.verification.verify: the seal over every file, its signature, the audit record against the folder,
and the verdict re-judged from the folder's own inputs). A folder that does not verify is listed as unverified with the
findings that failed; its verdict is still shown, never counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kfchaos import runseal, signing
from kfchaos.errors import KfchaosError
from kfchaos.history.model import RunEntry, measurements, oom_kills, pipeline_version
from kfchaos.rundir import layout, verification


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
    those pipeline versions: the others are not verified, which is the costly part)."""
    if not root.is_dir():
        raise KfchaosError(f"{root}: no such runs folder")
    trusted = signing.trust() if trusted is None else trusted
    runs: list[RunEntry] = []
    unreadable: list[str] = []
    seen: dict[str, Path] = {}
    for path in run_folders(root):
        try:
            run = layout.open_to_verify(path)
            manifest = run.manifest()
        except KfchaosError as exc:
            unreadable.append(f"{path}: {exc}")
            continue
        if (manifest.get("experiment") or {}).get("name") != experiment:
            continue
        version, _ = pipeline_version(manifest.get("pipeline"), (manifest.get("experiment") or {}).get("version"))
        if versions is not None and version not in versions:
            continue
        if run.run_id in seen:  # the same run downloaded twice (CI artifacts) must not count twice
            unreadable.append(f"{path}: run {run.run_id} again (first read from {seen[run.run_id]}); counted once")
            continue
        seen[run.run_id] = path
        runs.append(_entry(run, manifest, require_signed, trusted))
    return Found(runs, unreadable)


def _entry(run: layout.RunDir, manifest: dict, require_signed: bool, trusted: signing.Trust) -> RunEntry:
    try:
        findings = verification.verify(run, trusted)
    except (KfchaosError, OSError, ValueError) as exc:
        findings = [runseal.Finding("verify", False, str(exc))]
    problems = [str(f) for f in findings if not f.ok]
    if require_signed and not runseal.authenticated(findings):
        problems.append("seal not signed by a key trusted here (--require-signed)")
    try:
        verdict = run.verdict()
    except KfchaosError as exc:
        verdict = {}
        problems.append(str(exc))
    version, version_from = pipeline_version(
        manifest.get("pipeline"), (manifest.get("experiment") or {}).get("version")
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
