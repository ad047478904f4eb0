"""`kfchaos init [FILE]`: write the starter experiment (the one the README shows) to copy and edit; with a demo
stack up (`source runs/.work/demo-up.env` names its control baseline), that baseline beside it as the new
experiment's own (named after it, its control's records in a file of their own), so the file validates, runs
and re-judges against `kfchaos demo up` as written."""

from __future__ import annotations

import argparse
import os
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from kfchaos import safefile
from kfchaos.cli import EXIT_FAIL, EXIT_PASS
from kfchaos.errors import KfchaosError

TEMPLATE = "data/starter-experiment.yaml"
TEMPLATE_NAME = "my-first-experiment"  # metadata.name in the template; the baseline file is named after it
# Set by `source runs/.work/demo-up.env` (kfchaos.demo.runner.up.BASELINE_ENV; not imported: that module pulls in the
# demo stack, and `init` must start fast).
DEMO_BASELINE_ENV = "KFCHAOS_DEMO_BASELINE"
DEFAULT_FILE = Path("my-experiment.yaml")
DEFAULT_REPO_FILE = Path("experiments/my-experiment.yaml")
BASELINES_DIR = Path("baselines")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "init", help="write a starter experiment to copy and edit (runs against `kfchaos demo up` as written)"
    )
    parser.add_argument(
        "file",
        nargs="?",
        type=Path,
        metavar="FILE",
        help=f"the experiment to write (default: {DEFAULT_FILE}; with --repo: {DEFAULT_REPO_FILE})",
    )
    parser.add_argument(
        "--repo",
        action="store_true",
        help="lay out the current folder as a team's repository: experiments/ with the starter, baselines/, "
        "pipelines/compiled/ and the lock (compiled now), manifests/ (namespace, RBAC, schedules), CI for GitHub "
        "Actions and GitLab that installs this kfchaos version (requirements.txt) and runs validate, "
        "`compile --check` and the chaos gate; files already there are kept",
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite FILE and its baseline (with --repo: every file) if they exist"
    )
    parser.set_defaults(func=run)


def template_text() -> str:
    return resources.files("kfchaos").joinpath(TEMPLATE).read_text(encoding="utf-8")


def experiment_name(path: Path) -> str:
    """metadata.name from the file name: a DNS label (lower case, digits, '-'; at most 63 characters)."""
    name = re.sub(r"[^a-z0-9-]+", "-", path.stem.lower()).strip("-")[:63].strip("-")
    return name or "my-experiment"


def starter(name: str) -> str:
    return template_text().replace(TEMPLATE_NAME, name)


def _write(path: Path, force: bool, write: Any) -> None:
    if path.exists() and not force:
        raise KfchaosError(f"{path} exists; give --force to overwrite it, or another file name")
    if not path.resolve().is_relative_to(Path.cwd().resolve()):
        print(f"note: writing outside the current directory: {path.resolve()}", file=sys.stderr)
    write(path)
    print(f"wrote {path}")


def copy_demo_baseline(source: Path, target: Path, experiment: str, force: bool) -> None:
    """The demo stack's control baseline as `experiment`'s own, at `target`, its control's records beside it under
    a name of their own (<target stem>.control.parquet, as `kfchaos baseline control` names them): the starter
    replays the very traffic, ramp and target the control was recorded with, so its figures are the right drift
    reference. Sealed again for the new name (content_hash, records_sha256 unchanged); a records file that is
    not the one the demo's control measured is refused, as are files already there without --force."""
    # Imported here, for start-up speed: the baseline model pulls in numpy, and `init` without a demo stack up
    # (the usual case) must not wait for it.
    from kfchaos.baseline import check_control_records, control_records_beside, for_experiment, load_baseline

    baseline, _ = load_baseline(source)  # its content hash, and its records' hash when they lie beside it
    records = control_records_beside(baseline, source)
    if baseline.control is not None and records is None:
        raise KfchaosError(f"{source}: its control's records {baseline.control.records} are not beside it")
    copied = target.with_name(f"{target.stem}.control.parquet")
    if records is not None:
        check_control_records(baseline, records, source)
        _write(copied, force, lambda p: safefile.copy_file(p, records))
    own = for_experiment(baseline, experiment, copied.name if records is not None else None)
    _write(target, force, lambda p: safefile.write_text(p, own.to_yaml()))


def _demo_baseline() -> Path | None:
    demo_baseline = os.environ.get(DEMO_BASELINE_ENV, "")
    if demo_baseline and not Path(demo_baseline).is_file():
        raise KfchaosError(f"{DEMO_BASELINE_ENV}={demo_baseline}: no such file; is the demo stack still up?")
    return Path(demo_baseline) if demo_baseline else None


def _keep_or_write(path: Path, force: bool, write: Any) -> None:
    """--repo: a file already there is the team's (their README, their .gitignore): kept unless --force."""
    if path.exists() and not force:
        print(f"kept {path} (exists; --force overwrites it)")
        return
    write(path)
    print(f"wrote {path}")


def run_repo(args: argparse.Namespace) -> int:
    """`init --repo`: the team repository's layout in the current folder, its starter compiled."""
    # Imported here, for start-up speed: they load kfp's compiler (seconds); --repo compiles, plain init does not.
    from kfchaos.cli import teamrepo
    from kfchaos.kfp.compile import apply, plan
    from kfchaos.validate import load_experiment

    root = Path(".")
    path: Path = args.file or DEFAULT_REPO_FILE
    # Refused before anything is written: the path goes into the CI templates (kfchaos.cli.teamrepo.STARTER_FILE).
    refused = teamrepo.file_problem(path.as_posix())
    if refused:
        raise KfchaosError(f"init --repo: FILE: {refused}; e.g. {DEFAULT_REPO_FILE}")
    demo_baseline = _demo_baseline()
    name = experiment_name(path)
    baseline = BASELINES_DIR / f"{name}.baseline.yaml"
    # The starter names its baseline beside it; in a repository baselines live in baselines/ (relative to the file).
    text = starter(name).replace(
        f"{{file: {name}.baseline.yaml}}", f"{{file: {os.path.relpath(baseline, path.parent)}}}"
    )
    _keep_or_write(path, args.force, lambda p: safefile.write_text(p, text))
    namespace = load_experiment(path).spec.target.namespace  # the file there, the team's own when kept
    if demo_baseline is not None:
        if baseline.exists() and not args.force:
            print(f"kept {baseline} (exists; --force overwrites it)")
        else:
            copy_demo_baseline(demo_baseline, baseline, name, force=True)
    layout = teamrepo.files(teamrepo.Starter(file=path.as_posix(), name=name, namespace=namespace))
    for where, content in layout.items():
        _keep_or_write(Path(where), args.force, lambda p, content=content: safefile.write_text(p, content))
    compiled = plan(root.resolve())
    for problem in compiled.refusals:
        print(f"kfchaos compile: refused: {problem}", file=sys.stderr)
    for written in apply(root.resolve(), compiled):
        print(f"wrote {written}")
    print(f"kfchaos {teamrepo.pinned_version()} pinned in requirements.txt; CI runs validate and `compile --check`")
    print("next: git add -A && git commit -m 'kfchaos: chaos experiments as code'")
    if demo_baseline is None:
        print(
            f"no baseline yet ({baseline}): on a cluster, `kfchaos baseline capture` then `kfchaos baseline control`, "
            "then a new metadata.version and `kfchaos compile`; to try it here, `kfchaos demo up` and `source "
            "runs/.work/demo-up.env` before `kfchaos init --repo` (it then copies the demo stack's)"
        )
    print(f'try it: kfchaos validate {path} && kfchaos run {path} --local --target "$KFCHAOS_TARGET"')
    return EXIT_FAIL if compiled.refusals else EXIT_PASS


def run(args: argparse.Namespace) -> int:
    if args.repo:
        return run_repo(args)
    path: Path = args.file or DEFAULT_FILE
    name = experiment_name(path)
    text = starter(name)
    demo_baseline = _demo_baseline()
    _write(path, args.force, lambda p: safefile.write_text(p, text))
    target = path.parent / f"{name}.baseline.yaml"
    if demo_baseline is not None:
        copy_demo_baseline(demo_baseline, target, name, args.force)
        print(f"the demo stack's control baseline is {target}: edit the traffic and it no longer fits")
    else:
        print(
            f"no baseline yet ({target}): with the demo, `kfchaos demo up` then `source runs/.work/demo-up.env` "
            "before init; on a cluster, `kfchaos baseline capture` then `kfchaos baseline control`"
        )
    print(f"next: kfchaos validate {path}")
    return EXIT_PASS
