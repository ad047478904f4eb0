"""The lease record read back from outside input (anyone with `update` on leases can write it), its name, and the
durations' rules (client-go's NewLeaderElector checks)."""

from __future__ import annotations

import pytest

from kfchaos.errors import KfchaosError
from kfchaos.lease import DEFAULT_LEASE_DURATION, LeaseRecord, RunInfo, Timings, lease_name
from kfchaos.lease.record import micro_time, parse_time


def test_the_default_durations_keep_client_gos_rules_and_scale_its_recommended_ones() -> None:
    default = Timings.for_duration(DEFAULT_LEASE_DURATION)
    assert (default.lease_duration, default.renew_deadline, default.retry_period) == (300, 200.0, 10.0)
    assert Timings.for_duration(15) == Timings(15, 10.0, 2.0)  # component-base's 15 s / 10 s / 2 s
    with pytest.raises(KfchaosError, match="leaseDuration must be greater than renewDeadline"):
        Timings(10, 10.0, 2.0)
    with pytest.raises(KfchaosError, match="renewDeadline must be greater than retryPeriod\\*JitterFactor"):
        Timings(15, 2.4, 2.0)


def test_a_bad_lease_duration_in_the_environment_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFCHAOS_LEASE_DURATION", "soon")
    with pytest.raises(KfchaosError, match=r"\$KFCHAOS_LEASE_DURATION"):
        Timings.from_environment()
    monkeypatch.setenv("KFCHAOS_LEASE_DURATION", "1s")
    with pytest.raises(KfchaosError, match="at least 2s"):
        Timings.from_environment()
    monkeypatch.setenv("KFCHAOS_LEASE_DURATION", "2m")
    assert Timings.from_environment().lease_duration == 120


def test_one_selector_written_in_another_order_names_one_lease() -> None:
    one = lease_name("llm", {"app": "vllm", "tier": "gpu"}, [])
    assert one == lease_name("llm", {"tier": "gpu", "app": "vllm"}, [])
    assert one != lease_name("other", {"app": "vllm", "tier": "gpu"}, [])
    assert one.startswith("kfchaos-target-") and len(one) == len("kfchaos-target-") + 16


def test_a_record_round_trips_through_its_lease_object() -> None:
    record = LeaseRecord(
        "kfchaos-target-x", "llm", "pods app=vllm in namespace llm", "run-a", 300, 1.5e9, 1.5e9 + 10, 2,
        RunInfo("run-a", "exp", "KFP run run-a", since=1.5e9), [RunInfo("run-b", since=1.5e9 + 5, seen=1.5e9 + 9)],
    )  # fmt: skip
    back = LeaseRecord.from_object(record.to_object())
    assert back == record
    assert parse_time(micro_time(1.5e9 + 0.25)) == 1.5e9 + 0.25


@pytest.mark.parametrize(
    "annotations",
    [
        {"kfchaos.io/holder": "not json", "kfchaos.io/waiting": "{", "kfchaos.io/history": "[[[[["},
        {"kfchaos.io/holder": "[1]", "kfchaos.io/waiting": '{"run_id": 1}', "kfchaos.io/history": '[1, "x", {}]'},
        {"kfchaos.io/waiting": '[{"run_id": "r", "since": "yesterday", "pid": true, "namespaces": "ns"}]'},
        {"kfchaos.io/history": "[" + ",".join(['{"run_id": "r"}'] * 500) + "]"},
    ],
)
def test_annotations_that_do_not_parse_are_read_as_empty_and_lists_are_cut(annotations: dict[str, str]) -> None:
    obj = {
        "metadata": {"name": "n", "namespace": "ns", "annotations": annotations, "resourceVersion": "7"},
        "spec": {"holderIdentity": 5, "leaseDurationSeconds": True, "acquireTime": "noon", "leaseTransitions": "2"},
    }
    record = LeaseRecord.from_object(obj)
    assert record.holder_identity == "" and record.lease_duration == 0 and record.acquire_time is None
    assert record.transitions == 0 and len(record.history) <= 20 and len(record.waiting) <= 50
    assert all(isinstance(w.since, float | type(None)) and w.pid is None for w in record.waiting)


def test_an_object_that_is_not_a_lease_is_refused() -> None:
    with pytest.raises(KfchaosError, match="not a Lease object"):
        LeaseRecord.from_object(["not", "a", "lease"])
