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
from kfchaos.cli import EXIT_PASS
from kfchaos.errors import KfchaosError

TEMPLATE = "data/starter-experiment.yaml"
TEMPLATE_NAME = "my-first-experiment"  # metadata.name in the template; the baseline file is named after it
# Set by `source runs/.work/demo-up.env` (kfchaos.demo.up.BASELINE_ENV; not imported: that module pulls in the
# demo stack, and `init` must start fast).
DEMO_BASELINE_ENV = "KFCHAOS_DEMO_BASELINE"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "init", help="write a starter experiment to copy and edit (runs against `kfchaos demo up` as written)"
    )
    parser.add_argument("file", nargs="?", default="my-experiment.yaml", type=Path, metavar="FILE")
    parser.add_argument("--force", action="store_true", help="overwrite FILE (and its baseline) if they exist")
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


def run(args: argparse.Namespace) -> int:
    path: Path = args.file
    name = experiment_name(path)
    text = starter(name)
    demo_baseline = os.environ.get(DEMO_BASELINE_ENV, "")
    if demo_baseline and not Path(demo_baseline).is_file():
        raise KfchaosError(f"{DEMO_BASELINE_ENV}={demo_baseline}: no such file; is the demo stack still up?")
    _write(path, args.force, lambda p: safefile.write_text(p, text))
    target = path.parent / f"{name}.baseline.yaml"
    if demo_baseline:
        copy_demo_baseline(Path(demo_baseline), target, name, args.force)
        print(f"the demo stack's control baseline is {target}: edit the traffic and it no longer fits")
    else:
        print(
            f"no baseline yet ({target}): with the demo, `kfchaos demo up` then `source runs/.work/demo-up.env` "
            "before init; on a cluster, `kfchaos baseline capture` then `kfchaos baseline control`"
        )
    print(f"next: kfchaos validate {path}")
    return EXIT_PASS
