"""`kfchaos doctor --experiment F`: check every precondition of a run on a live cluster; exit 0 only when all pass."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kfchaos.kfp.client import RUN_SERVICE_ACCOUNT, TOKEN_ENV


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check a live cluster for everything a run needs (KFP version, run identity, Chaos Mesh, Secret, "
        "Prometheus series); exit 0 only when all pass",
    )
    parser.add_argument("--experiment", type=Path, required=True, metavar="FILE")
    parser.add_argument("--host", help="KFP API URL (for the backend version)")
    parser.add_argument("--token", help=f"KFP bearer token (default: env {TOKEN_ENV}); never stored")
    parser.add_argument("--namespace", default="kubeflow", help="KFP namespace: where the task pods run")
    parser.add_argument("--service-account", default=RUN_SERVICE_ACCOUNT, help="the run identity to review")
    parser.add_argument("--kube-context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--chaos-namespace", default="chaos-mesh", help="where Chaos Mesh is installed")
    parser.add_argument("--prometheus", help="Prometheus URL (default: spec.baseline.capture.prometheus)")
    parser.add_argument("--root", default=".", type=Path, help="repository root, for the compiled pipeline")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kfchaos.doctor.diagnose import Options, diagnose

    report = diagnose(
        Options(
            experiment=args.experiment,
            root=args.root,
            kfp_host=args.host,
            token=args.token,
            kfp_namespace=args.namespace,
            service_account=args.service_account,
            kubeconfig=args.kubeconfig,
            kube_context=args.kube_context,
            chaos_namespace=args.chaos_namespace,
            prometheus=args.prometheus,
        )
    )
    print(report.to_json() if args.json else report.table())
    return report.exit_code
