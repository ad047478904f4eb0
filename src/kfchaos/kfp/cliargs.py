"""Command-line options shared by the commands that talk to a KFP endpoint."""

from __future__ import annotations

import argparse

from kfchaos.kfp.client import TOKEN_ENV, Connection


def add_connection_args(parser: argparse.ArgumentParser, required: bool = False) -> None:
    group = parser.add_argument_group("KFP endpoint (authentication as kfp.Client supports it)")
    group.add_argument("--host", required=required, help="KFP API URL, e.g. https://kubeflow.example.com/pipeline")
    group.add_argument("--token", help=f"bearer token (default: env {TOKEN_ENV}); never stored")
    group.add_argument("--kube-context", help="use this kube context's credentials")
    group.add_argument("--namespace", default="kubeflow", help="KFP namespace (multi-user: your profile)")


def connection_from(args: argparse.Namespace) -> Connection:
    return Connection(host=args.host, token=args.token, namespace=args.namespace, kube_context=args.kube_context)
