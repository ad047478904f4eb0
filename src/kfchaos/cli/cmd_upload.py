"""`kfchaos upload`: upload every compiled pipeline version in the lock file; existing versions are left alone."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_PASS
from kfchaos.errors import KfchaosError


def register(subparsers: Any) -> None:
    from kfchaos.kfp.cliargs import add_connection_args

    parser = subparsers.add_parser(
        "upload",
        help="create each pipeline, or add the version named after its version; idempotent",
        description="Upload pipelines/compiled/<name>/<version>.yaml for every entry of pipelines/versions.lock.yaml.",
    )
    parser.add_argument("pipelines", nargs="*", metavar="NAME", help="only these pipelines (default: all)")
    parser.add_argument("--root", default=".", type=Path, help="repository root (default: current directory)")
    add_connection_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kfchaos.kfp import client as kfp_client
    from kfchaos.kfp.cliargs import connection_from
    from kfchaos.kfp.compile import LOCK_FILE
    from kfchaos.kfp.versioning import read_lock

    root = args.root.resolve()
    lock = read_lock(root / LOCK_FILE)
    if not lock:
        raise KfchaosError(f"{root / LOCK_FILE}: no pipelines; run `kfchaos compile` first")
    unknown = sorted(set(args.pipelines) - set(lock))
    if unknown:
        raise KfchaosError(f"not in {LOCK_FILE}: {', '.join(unknown)}; have: {', '.join(sorted(lock))}")
    connection = connection_from(args)
    client = kfp_client.connect(connection)
    backend = _backend_version(connection)
    for name in args.pipelines or sorted(lock):
        done = kfp_client.upload(client, lock[name], root)
        action = "created" if done.created else "exists "
        print(f"{action} {done.name} {done.version} (pipeline {done.pipeline_id}, version {done.version_id})")
        _say_what_the_backend_lacks(backend, root / lock[name].file, f"{done.name} {done.version}")
    return EXIT_PASS


def _backend_version(connection: Any) -> Any:
    """The backend's release, or None when its healthz does not say (a dev build, an old UI proxy)."""
    from kfchaos.doctor.diagnose import backend_tag
    from kfchaos.doctor.kfpcheck import parse_version
    from kfchaos.kfp.client import TOKEN_ENV

    try:
        return parse_version(backend_tag(connection.host, connection.token or os.environ.get(TOKEN_ENV)))
    except OSError:
        return None


def _say_what_the_backend_lacks(backend: Any, compiled: Path, what: str) -> None:
    """A plain warning, per uploaded pipeline, of each feature it uses that this backend's release lacks (the
    same table as doctor's `kfp backend version` row, kfchaos.doctor.kfpcheck): the upload itself succeeds."""
    import yaml

    from kfchaos.doctor.kfpcheck import missing, requirements, show

    if backend is None:
        return
    lacking = missing(backend, requirements(yaml.safe_load_all(compiled.read_text())))
    for need in lacking:
        print(
            f"warning: KFP backend {show(backend)} lacks what {what} uses: {need.feature} (>= {show(need.minimum)}): "
            f"{need.why}",
            file=sys.stderr,
        )
