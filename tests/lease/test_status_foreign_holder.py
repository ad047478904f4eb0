"""`kfchaos status` on a Lease kfchaos did not write: its holder is named as a waiting run names it
(LeaseRecord.foreign_holder), never as a run, whatever run id the holder string looks like."""

from __future__ import annotations

from typing import Any

from kfchaos.cli.cmd_status import _holder
from kfchaos.lease import LeaseRecord, RunInfo

LIVE = "run-live-1"


def record(**fields: Any) -> LeaseRecord:
    return LeaseRecord("kfchaos-target", "llm-serving", "pods", holder_identity=LIVE, **fields)


def test_a_lease_without_kfchaoss_label_is_named_not_kfchaoss() -> None:
    shown = _holder(record(labels={"app": "other-tool"}))
    assert shown == (
        "the lease is not kfchaos's (it has no label app.kubernetes.io/managed-by=kfchaos): held by 'run-live-1'"
    )


def test_a_holder_kfchaos_did_not_write_is_named_as_such() -> None:
    shown = _holder(record(holder=RunInfo("run-someone-else", "nightly")))
    assert (
        shown == "the lease names a holder kfchaos did not write (kfchaos.io/holder does not name 'run-live-1'): "
        "held by 'run-live-1'"
    )
    assert "run run-" not in shown


def test_a_kfchaos_holder_is_named_as_a_run() -> None:
    assert (
        _holder(record(holder=RunInfo(LIVE, "nightly", "KFP run x"))) == "held by run run-live-1 of nightly (KFP run x)"
    )
