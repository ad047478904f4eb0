"""`kfchaos demo`: the main job on the embedded default.

Until the embedded default (demo LLM server, local fault backend, kfp.local run) lands, this runs the
smallest real end-to-end thing that exists -- validating every shipped experiment and showing what it
declares -- and says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_PASS, EXIT_USAGE
from kfchaos.errors import SpecError
from kfchaos.spec import load_experiment
from kfchaos.units import format_duration


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="run the main job on the embedded default (no cluster needed)")
    parser.add_argument("--experiments", default="experiments", help="folder of experiment files")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(
        "kfchaos demo: the embedded default (demo LLM server + local faults + kfp.local) is not built yet;\n"
        "running the smallest real end-to-end step that exists: load and validate every shipped experiment.\n"
    )
    failed = False
    for path in sorted(Path(args.experiments).glob("*.yaml")):
        try:
            experiment = load_experiment(path)
        except SpecError as exc:
            failed = True
            print(exc)
            continue
        spec = experiment.spec
        stages = " -> ".join(f"{s}%" for s in spec.traffic.stages)
        print(f"{experiment.metadata.name} {experiment.metadata.version}  ({path})")
        print(f"  target   {spec.target.namespace}/{spec.target.endpoint}  api={spec.target.api}")
        print(f"  ramp     {stages}, {format_duration(spec.traffic.stage_duration)} each")
        for fault in spec.faults:
            when = ", ".join(f"{s}%" for s in experiment.fault_stages(fault))
            print(f"  fault    {fault.name}: {fault.type} mode={fault.mode} during {when}")
        slo = spec.slo
        print(f"  slo      P99 drift <= {slo.p99_drift_max:.0%}, error rate < {slo.error_rate_max:.2%}")
    return EXIT_USAGE if failed else EXIT_PASS
