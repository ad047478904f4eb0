"""`kfchaos init [FILE]`: write the starter experiment (the one the README shows) to copy and edit; with a demo
stack up (`source runs/.work/demo-up.env` names its control baseline), copy that baseline beside it, so the file
validates and runs against `kfchaos demo up` as written."""

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


def _control_records(baseline: Path) -> Path | None:
    """The control's records file the baseline names (a bare file name beside it), if there is one."""
    import yaml  # for start-up speed: only `init` with a demo baseline reads YAML

    try:
        control = (yaml.safe_load(baseline.read_text()) or {}).get("control")
    except (OSError, yaml.YAMLError) as exc:
        raise KfchaosError(f"{baseline}: unreadable demo baseline ({exc})") from None
    name = control.get("records") if isinstance(control, dict) else None
    if not isinstance(name, str) or Path(name).name != name:
        return None
    found = baseline.parent / name
    return found if found.is_file() else None


def _write(path: Path, force: bool, write: Any) -> None:
    if path.exists() and not force:
        raise KfchaosError(f"{path} exists; give --force to overwrite it, or another file name")
    if not path.resolve().is_relative_to(Path.cwd().resolve()):
        print(f"note: writing outside the current directory: {path.resolve()}", file=sys.stderr)
    write(path)
    print(f"wrote {path}")


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
        source = Path(demo_baseline)
        records = _control_records(source)
        # The demo's control was replayed with the same traffic as the starter's: the right drift reference.
        _write(target, args.force, lambda p: safefile.copy_file(p, source))
        if records is not None:
            # Under the name the baseline records (its content hash covers that name).
            _write(target.parent / records.name, True, lambda p: safefile.copy_file(p, records))
        print(f"the demo stack's control baseline is {target}: edit the traffic and it no longer fits")
    else:
        print(
            f"no baseline yet ({target}): with the demo, `kfchaos demo up` then `source runs/.work/demo-up.env` "
            "before init; on a cluster, `kfchaos baseline capture` then `kfchaos baseline control`"
        )
    print(f"next: kfchaos validate {path}")
    return EXIT_PASS
