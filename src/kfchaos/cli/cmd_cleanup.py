"""`kfchaos cleanup --run-id ID`: delete every chaos object (and GPU allocator pod) a run left behind."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kfchaos import safefile
from kfchaos.cli import EXIT_PASS, EXIT_USAGE
from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.units import parse_duration


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cleanup", help="delete the chaos objects of a run (or of every run, with --older-than)"
    )
    parser.add_argument("--run-id", help="the run whose objects to delete (label kfchaos.io/run-id)")
    parser.add_argument(
        "--namespace", action="append", default=None, metavar="NS", help="repeatable; default: all namespaces"
    )
    parser.add_argument("--older-than", metavar="DURATION", help="only objects created longer ago than this, e.g. 6h")
    # --kube-host / --kube-context as in `doctor` and `run`, where --host is the KFP API; the old spellings
    # still work so existing scripts do not break.
    parser.add_argument(
        "--kube-host",
        "--host",
        dest="host",
        help="Kubernetes API URL (e.g. from kubectl proxy); default: in-cluster or kubeconfig",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file")
    parser.add_argument("--kube-context", "--context", dest="context", help="kubeconfig context")
    parser.add_argument("--timeout", default="2m", metavar="DURATION", help="wait this long for finalizers (2m)")
    parser.add_argument("--audit", metavar="FILE", help="write the API calls made, as JSON lines")
    parser.add_argument(
        "--experiment",
        metavar="FILE",
        help="also unload the kfchaos- LoRA adapters its lora-adapter-churn faults left loaded at the target",
    )
    parser.add_argument("--target", default="", help="with --experiment: the target URL (default: its endpoint)")
    parser.add_argument(
        "--demo-runs",
        metavar="DIR",
        help="also end what a killed `kfchaos demo` left running there (the stack records under DIR/.work)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.experiment:
        code = _unload_adapters(args.experiment, args.target)
        if code != EXIT_PASS or (args.run_id is None and args.older_than is None):
            return code
    if args.demo_runs:
        from kfchaos.demo.runner.up import sweep_orphans  # the demo's modules only when asked for

        ended = sweep_orphans(Path(args.demo_runs))
        print(f"ended {ended} process group(s) left by killed demo runs in {args.demo_runs}")
        if args.run_id is None and args.older_than is None:
            return EXIT_PASS
    if args.run_id is None and args.older_than is None:
        print("kfchaos cleanup: give --run-id, or --older-than to sweep leftovers of every run", file=sys.stderr)
        return EXIT_USAGE
    try:
        older_than = parse_duration(args.older_than) if args.older_than else None
        timeout = parse_duration(args.timeout)
    except ValueError as exc:
        print(f"kfchaos cleanup: {exc}", file=sys.stderr)
        return EXIT_USAGE
    backend = ChaosMeshBackend.from_config(host=args.host, kubeconfig=args.kubeconfig, context=args.context)
    try:
        deleted = backend.sweep(args.run_id, args.namespace, older_than=older_than, timeout=timeout)
    finally:
        if args.audit:
            with safefile.stream(args.audit, private=True) as out:
                for event in backend.events:
                    out.write((json.dumps(event.to_dict()) + "\n").encode())
    scope = ", ".join(args.namespace) if args.namespace else "all namespaces"
    print(f"deleted {deleted} object(s) of {'run ' + args.run_id if args.run_id else 'kfchaos'} in {scope}")
    return EXIT_PASS


def _unload_adapters(path: str, target: str) -> int:
    """The LoRA adapters of the experiment's churn faults that the target still lists (kfchaos.faults.lorachurn).
    Like every other error of this command, one it cannot unload is a KfchaosError: exit 3 with the reason."""
    from kfchaos.errors import SpecError
    from kfchaos.faults.lorachurn import LoraChurnError, LoraClient, churn_faults, sweep
    from kfchaos.validate import load_experiment

    try:
        experiment = load_experiment(path)
    except SpecError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_USAGE
    if not churn_faults(experiment):
        print(f"{path}: no lora-adapter-churn fault: no adapters to unload")
        return EXIT_PASS
    done = sweep(experiment, LoraClient.for_experiment(experiment, target))
    for item in done:
        print(f"unload {item['adapter']}: {item['status'] or item['error']}")
    failed = [d["adapter"] for d in done if d["status"] not in (200, 404)]
    if failed:
        raise LoraChurnError(f"LoRA adapter(s) {', '.join(failed)} of {path} not unloaded: unload them by hand")
    print(f"unloaded {len(done)} LoRA adapter(s) of {path}")
    return EXIT_PASS
