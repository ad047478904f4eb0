"""The real control plane for the cluster suite (docs/cluster.md): etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, KWOK, Chaos Mesh's controller-manager, kube-state-metrics and Prometheus, built from their Go
modules by scripts/cluster/build.sh and started on loopback by scripts/cluster/localcluster.

`real_cluster` reuses the cluster `.cluster/env` names when it is up (`make cluster-up`), else starts one for
the session and stops it at the end. A cluster that cannot be built or started fails the tests under CI=true
and skips them elsewhere, with the reason.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import kfp
import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "cluster"))

from localcluster import controlplane  # noqa: E402  (scripts/cluster is not an installed package)

# (case, agrees, kfchaos admits, the real API server admits, who refused): filled by test_admission_agreement.
AGREEMENT: list[tuple[str, bool, bool, bool, str]] = []
# (case, the loopback fake admits, the real API server admits): filled by the fake-vs-real contract test.
FAKE_AGREEMENT: list[tuple[str, bool, bool]] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    fake = FAKE_AGREEMENT
    if fake:
        same = sum(1 for _, ours, real in fake if ours == real)
        terminalreporter.section("the loopback fake's webhook model vs the real Chaos Mesh webhooks")
        terminalreporter.write_line(f"{same} of {len(fake)} fault specs answered alike")
        for label, ours, real in fake:
            if ours != real:
                terminalreporter.write_line(
                    f"  DIFFERENT {label}: fake {'admits' if ours else 'refuses'}, "
                    f"real {'admits' if real else 'refuses'}"
                )
    if not AGREEMENT:
        return
    agreed = sum(1 for row in AGREEMENT if row[1])
    terminalreporter.section("admission agreement (kfchaos validate vs the real Chaos Mesh webhooks)")
    terminalreporter.write_line(f"{agreed} of {len(AGREEMENT)} fault specs agree")
    for label, agrees, ours, real, by in AGREEMENT:
        terminalreporter.write_line(
            f"  {'agree   ' if agrees else 'DISAGREE'} {label}: kfchaos {'admits' if ours else 'refuses'}, "
            f"Chaos Mesh {'admits' if real else 'refuses'}{f' ({by})' if by else ''}"
        )


@dataclass(frozen=True)
class RealCluster:
    env: controlplane.ClusterEnv
    started_here: bool

    @property
    def admin_kubeconfig(self) -> Path:
        return self.env.admin_kubeconfig

    @property
    def runner_kubeconfig(self) -> Path:
        return self.env.runner_kubeconfig

    @property
    def prometheus_url(self) -> str:
        return self.env.prometheus_url

    def api_client(self, identity: str = "admin") -> k8s.ApiClient:
        """A kubernetes ApiClient as `admin` (system:masters) or `runner` (kubeflow/kfchaos-runner's token)."""
        paths = {"admin": self.admin_kubeconfig, "runner": self.runner_kubeconfig}
        return k8s_config.new_client_from_config(config_file=str(paths[identity]))


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the real control plane is required under CI=true: {reason}", pytrace=False)
    pytest.skip(f"no real control plane: {reason}")


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[RealCluster]:
    state = controlplane.default_state().resolve()
    running = controlplane.reuse(state)
    if running is not None:
        yield RealCluster(running, started_here=False)
        return
    try:
        env = controlplane.up(state)
    except controlplane.ClusterError as error:
        _unavailable(str(error))
        return
    try:
        yield RealCluster(env, started_here=True)
    finally:
        controlplane.down(state)


def stop_runs(kfp_host: str, since: float) -> None:
    """Terminate the KFP runs created after `since` (epoch) that have not ended. The cluster's real Argo executes
    every run a test submits; tests that only read what the API server wrote stop theirs, so they neither wait for
    an image the node lacks nor take the node's CPU from the tests after them."""
    client = kfp.Client(host=kfp_host)
    started = datetime.datetime.fromtimestamp(since, tz=datetime.UTC)
    for run in client.list_runs(page_size=100, sort_by="created_at desc").runs or []:
        if run.created_at and run.created_at < started:
            break
        if str(run.state) in ("PENDING", "RUNNING"):
            client.terminate_run(run.run_id)


@pytest.fixture(scope="module")
def runs_stopped_after(real_cluster: RealCluster) -> Iterator[None]:
    """Use in a module whose tests submit runs only to read what the server wrote (stop_runs)."""
    since = time.time()
    yield
    if real_cluster.env.kfp_host:
        stop_runs(real_cluster.env.kfp_host, since)
