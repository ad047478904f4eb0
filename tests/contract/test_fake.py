"""The contract scenarios (tests/contract/scenarios.py) against the loopback fake (tests/support/kubeapi.py).
The same functions run against the real kube-apiserver and Chaos Mesh controller
(tests/cluster/test_contract_real.py); here the fake plays them. The admission scenarios run there only: the
fake's webhooks are kfchaos.faultspec.admission itself, so comparing the two here could not fail."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.contract import scenarios
from tests.support.kubeapi import KubeApiServer, kubernetes_client


@pytest.fixture
def cluster() -> Iterator[scenarios.Cluster]:
    with KubeApiServer(inject_delay=0.05, finalizer_delay=0.05) as server:
        yield scenarios.Cluster(
            api=kubernetes_client(server.url),
            namespace="contract",
            # The fake's hook for what chaos-daemon (or a gone node) does upstream: Recover keeps failing.
            stall_recovery=server.stall_recovery,
        )


def test_pick_once_after_pod_replacement(cluster: scenarios.Cluster) -> None:
    scenarios.pick_once_after_pod_replacement(cluster)


def test_pod_kill_records_the_killed_pod(cluster: scenarios.Cluster) -> None:
    scenarios.pod_kill_records_the_killed_pod(cluster)


def test_pick_once_same_name_replacement(cluster: scenarios.Cluster) -> None:
    scenarios.pick_once_same_name_replacement(cluster)


def test_container_records_first_container(cluster: scenarios.Cluster) -> None:
    scenarios.container_records_first_container(cluster)


def test_finalizer_added_after_create(cluster: scenarios.Cluster) -> None:
    scenarios.finalizer_added_after_create(cluster)


def test_finalizer_stuck_then_released(cluster: scenarios.Cluster) -> None:
    scenarios.finalizer_stuck_then_released(cluster)


def test_never_injected_stays_terminating() -> None:
    # Its pod must land where no chaos-daemon runs: the real cluster's KWOK nodes have none, the fake none at all.
    with KubeApiServer(inject_delay=0.05, finalizer_delay=0.05, chaos_daemon=False) as server:
        scenarios.never_injected_stays_terminating(scenarios.Cluster(api=kubernetes_client(server.url), namespace="c"))
