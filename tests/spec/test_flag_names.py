"""One set of names: durations with units everywhere, --kube-host/--kube-context for the Kubernetes API."""

from __future__ import annotations

import pytest

from kfchaos.cli import build_parser


def test_baseline_capture_step_takes_a_duration_with_a_unit() -> None:
    parse = build_parser("baseline").parse_args
    assert parse(["baseline", "capture", "--experiment", "x.yaml", "--step", "10s"]).step == 10.0
    assert parse(["baseline", "capture", "--experiment", "x.yaml", "--step", "5m"]).step == 300.0
    assert parse(["baseline", "capture", "--experiment", "x.yaml", "--step", "30"]).step == 30.0
    with pytest.raises(SystemExit) as exited:
        parse(["baseline", "capture", "--experiment", "x.yaml", "--step", "ten"])
    assert exited.value.code == 3


@pytest.mark.parametrize(
    ("flags", "host", "context"),
    [
        (["--kube-host", "http://127.0.0.1:8001", "--kube-context", "kind"], "http://127.0.0.1:8001", "kind"),
        (["--host", "http://127.0.0.1:8001", "--context", "kind"], "http://127.0.0.1:8001", "kind"),  # old names
    ],
)
def test_cleanup_names_the_kubernetes_api_like_doctor_does(flags: list[str], host: str, context: str) -> None:
    args = build_parser("cleanup").parse_args(["cleanup", "--run-id", "r", *flags])
    assert (args.host, args.context) == (host, context)
