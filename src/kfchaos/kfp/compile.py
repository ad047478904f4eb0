"""Compile every pipeline and component deterministically, and check that what is committed is current.

Targets: the generic pipeline (`kfchaos-experiment`, versioned with the package) and one pipeline per
experiment in experiments/ (named metadata.name, versioned metadata.version, parameters defaulting to the file),
plus any other experiment file named on the command line (`kfchaos compile PATH`) or already in the lock.
Outputs: pipelines/compiled/<name>/<version>.yaml, pipelines/versions.lock.yaml, and where the repository has a
components/ folder (kfchaos's own), components/<c>/component.yaml. The pipeline and its components are the
installed package's (kfchaos.kfp.pipelines, kfchaos.kfp.components): any folder can be the repository.

A compiled version is immutable: once pipelines/compiled/<name>/<version>.yaml exists, a different compile result
for the same version is refused (and `--check` fails) naming the version to bump, because uploading it would
silently change what an existing KFP pipeline version means.
"""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from kfchaos import __version__, safefile
from kfchaos.errors import KfchaosError, SpecError
from kfchaos.kfp.versioning import LockEntry, read_lock, render_lock, seal
from kfchaos.spec import Experiment, baseline_path
from kfchaos.validate import load_experiment

GENERIC_PIPELINE = "kfchaos-experiment"
LOCK_FILE = Path("pipelines/versions.lock.yaml")
COMPILED_DIR = Path("pipelines/compiled")
COMPONENTS_DIR = Path("components")


@dataclass(frozen=True)
class Target:
    name: str
    version: str
    version_source: str  # the file to bump the version in
    defaults: Any  # kfchaos.kfp.pipelines.chaos_experiment.PipelineDefaults

    @property
    def file(self) -> Path:
        return COMPILED_DIR / self.name / f"{self.version}.yaml"


@dataclass(frozen=True)
class Problem:
    """Something stale or inconsistent, with what to do about it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _pipeline_module() -> Any:
    # Imported when something is compiled, not with this module: it loads kfp's DSL, which the commands that
    # only read the lock (upload, schedule) do not need.
    from kfchaos.kfp.pipelines import chaos_experiment

    return chaos_experiment


COMPONENTS_PACKAGE = "kfchaos.kfp.components"


def component_names() -> list[str]:
    """The package's components: one folder each under kfchaos/kfp/components/ with a component.py."""
    folder = resources.files(COMPONENTS_PACKAGE)
    return sorted(p.name for p in folder.iterdir() if p.joinpath("component.py").is_file())


def comment_header(text: str) -> str:
    """Repair KFP's header comment: it prints multi-line parameter defaults (our experiment YAML) without '#'
    on the continuation lines, which makes the file invalid YAML. Everything before the spec's first key
    (`components:`, keys are sorted) is header; comment each line of it that is not a comment yet."""
    head, marker, body = text.partition("\ncomponents:\n")
    if not marker:
        return text
    lines = [line if line.startswith("#") else f"#    {line}".rstrip() for line in head.split("\n")]
    return "\n".join(lines) + marker + body


def compile_bytes(obj: Any) -> bytes:
    from kfp import compiler

    with tempfile.TemporaryDirectory(prefix="kfchaos-compile-") as tmp:
        out = Path(tmp) / "out.yaml"
        compiler.Compiler().compile(obj, str(out))
        return comment_header(out.read_text(encoding="utf-8")).encode("utf-8")


def _bump_hint(version: str) -> str:
    parts = version.split("-")[0].split(".")
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        return f"{parts[0]}.{parts[1]}.{int(parts[2]) + 1}"
    return "a new version"


def experiment_target(root: Path, path: Path, experiment: Experiment | None = None) -> Target:
    """The pipeline of one experiment file: parameters default to its text and its committed baseline."""
    module = _pipeline_module()
    experiment = experiment or load_experiment(path)
    meta = experiment.metadata
    found = baseline_path(path, experiment)
    baseline = found.read_text() if found is not None and found.is_file() else ""
    auth = experiment.spec.target.auth
    # Relative to the repository root, wherever the command runs; absolute for an experiment outside it (the
    # embedded demo's, or `compile --allow-outside`): never relative to the current directory.
    try:
        where = str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        where = str(path.resolve())
    return Target(
        name=meta.name,
        version=meta.version,
        version_source=f"{where}{VERSION_SOURCE_SUFFIX}",
        defaults=module.PipelineDefaults(
            name=meta.name,
            version=meta.version,
            description=meta.description or f"kfchaos experiment {meta.name}",
            stages=tuple(experiment.spec.traffic.stages),
            experiment=path.read_text(),
            baseline=baseline,
            auth_env=auth.env if auth else None,
            shards=experiment.spec.traffic.shards,
        ),
    )


VERSION_SOURCE_SUFFIX = " (metadata.version)"


def experiment_files(root: Path, extra: Sequence[Path] = ()) -> list[Path]:
    """experiments/*.yaml, then the experiment files elsewhere that the lock already holds (compiled once by
    `kfchaos compile PATH`: they stay compiled and checked), then `extra`; each file once."""
    paths = sorted((root / "experiments").glob("*.yaml"))
    for entry in read_lock(root / LOCK_FILE).values():
        source = entry.version_source
        if source.endswith(VERSION_SOURCE_SUFFIX):
            path = root / source.removesuffix(VERSION_SOURCE_SUFFIX)
            if path.is_file():
                paths.append(path)
    paths += list(extra)
    seen: set[Path] = set()
    unique = []
    for path in paths:
        if path.resolve() not in seen:
            seen.add(path.resolve())
            unique.append(path)
    return unique


def outside(root: Path, path: Path) -> bool:
    return not path.resolve().is_relative_to(root.resolve())


def discover(root: Path, extra: Sequence[Path] = ()) -> list[Target]:
    """The generic pipeline plus one per experiment file, in a stable order; invalid experiments are errors."""
    module = _pipeline_module()
    defaults_cls = module.PipelineDefaults
    targets = [
        Target(
            name=GENERIC_PIPELINE,
            version=__version__,
            version_source="pyproject.toml (project.version)",
            defaults=defaults_cls(
                name=GENERIC_PIPELINE,
                version=__version__,
                description="kfchaos chaos experiment; pass the experiment YAML as the `experiment` parameter",
                stages=tuple(module.GENERIC_STAGES),
            ),
        )
    ]
    problems: list[str] = []
    seen: dict[str, Path] = {}
    for path in experiment_files(root, extra):
        try:
            experiment = load_experiment(path)
        except SpecError as exc:
            problems.append(str(exc))
            continue
        meta = experiment.metadata
        relative = path.resolve().relative_to(root.resolve()) if not outside(root, path) else path.resolve()
        if meta.name in seen or meta.name == GENERIC_PIPELINE:
            other = seen.get(meta.name, Path("the generic pipeline"))
            problems.append(f"{relative}: metadata.name {meta.name!r} is also used by {other}")
            continue
        seen[meta.name] = relative
        targets.append(experiment_target(root, path, experiment))
    if problems:
        raise KfchaosError("cannot compile:\n" + "\n".join(problems))
    return targets


def compile_target(target: Target) -> tuple[bytes, str]:
    """Sealed pipeline YAML and its IR hash."""
    module = _pipeline_module()
    return seal(compile_bytes(module.build_pipeline(target.defaults)))


def component_outputs(root: Path) -> dict[Path, bytes]:
    """components/<name>/component.yaml for every component of the package, so other pipelines can load them;
    written where the repository keeps a components/ folder (kfchaos's own, as kubeflow/pipelines-components lays
    one out). A team's repository holds only its pipelines: its components are the installed kfchaos's."""
    out: dict[Path, bytes] = {}
    if not (root / COMPONENTS_DIR).is_dir():
        return out
    for name in component_names():
        module = importlib.import_module(f"{COMPONENTS_PACKAGE}.{name}.component")
        out[COMPONENTS_DIR / name / "component.yaml"] = compile_bytes(getattr(module, name))
    return out


@dataclass
class Plan:
    """What compiling would write, and the problems that forbid writing or fail --check."""

    writes: dict[Path, bytes]
    refusals: list[Problem]  # changed content without a version bump
    stale: list[Problem]  # out of date; `kfchaos compile` fixes these
    entries: list[LockEntry]


def plan(root: Path, extra: Sequence[Path] = ()) -> Plan:
    lock = read_lock(root / LOCK_FILE)
    writes: dict[Path, bytes] = {}
    refusals: list[Problem] = []
    stale: list[Problem] = []
    entries: list[LockEntry] = []
    for target in discover(root, extra):
        sealed, digest = compile_target(target)
        entries.append(LockEntry(target.name, target.version, digest, str(target.file), target.version_source))
        existing = root / target.file
        if not existing.exists():
            writes[target.file] = sealed
            stale.append(Problem(str(target.file), f"missing: {target.name} {target.version} is not compiled yet"))
        elif existing.read_bytes() != sealed:
            writes[target.file] = sealed  # written only with --force
            refusals.append(
                Problem(
                    str(target.file),
                    f"pipeline {target.name} changed but its version {target.version} did not: bump the version in "
                    f"{target.version_source}, e.g. to {_bump_hint(target.version)}",
                )
            )
        locked = lock.get(target.name)
        if locked is None or (locked.version, locked.ir_hash) != (target.version, digest):
            stale.append(Problem(str(LOCK_FILE), f"entry for {target.name} is out of date"))
    for name in sorted(set(lock) - {e.name for e in entries}):
        stale.append(Problem(str(LOCK_FILE), f"entry for {name} has no pipeline any more"))
    for path, data in component_outputs(root).items():
        current = root / path
        if not current.exists() or current.read_bytes() != data:
            writes[path] = data
            stale.append(Problem(str(path), "out of date"))
    lock_text = render_lock(entries).encode()
    lock_path = root / LOCK_FILE
    if not lock_path.exists() or lock_path.read_bytes() != lock_text:
        writes[LOCK_FILE] = lock_text
    return Plan(writes=writes, refusals=refusals, stale=stale, entries=entries)


def apply(root: Path, result: Plan) -> list[Path]:
    """Write what the plan says (refused versions are never overwritten); returns the paths written."""
    refused = {Path(p.path) for p in result.refusals}
    written = []
    for path, data in sorted(result.writes.items()):
        if path in refused:
            continue
        safefile.write_bytes(root / path, data)
        written.append(path)
    return written
