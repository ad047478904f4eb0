"""Shared test fixtures: paths, and the rule for tools the integration tests need."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kfchaos.steps import seams
from tests.support.groups import mark_groups

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
# --timing-report and --quick (`make check`): tests/support/timing.py
pytest_plugins = ("tests.support.timing",)


def require_tool(name: str, why: str) -> str:
    """Path of an executable the test needs. Missing: skip with a message, or fail under CI=true."""
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} not found ({why}); `make test` installs it where it can"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests that need a real cluster run only when one is configured.
    has_cluster = bool(os.environ.get("KUBECONFIG") or os.environ.get("KFCHAOS_E2E_CLUSTER"))
    skip = pytest.mark.skip(reason="needs a real Kubernetes cluster (set KUBECONFIG or KFCHAOS_E2E_CLUSTER)")
    for item in items:
        if item.path.is_relative_to(ROOT / "tests" / "cluster"):
            continue  # tests/cluster starts its own control plane (tests/cluster/conftest.py)
        if not has_cluster and ("cluster" in item.keywords or "e2e" in item.keywords):
            item.add_marker(skip)
    mark_groups(items)  # for pytest-xdist's --dist loadgroup (scripts/test.sh)


@pytest.fixture(scope="session", autouse=True)
def _config_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Run folders are signed with the user's own key, made on first use in $XDG_CONFIG_HOME/kfchaos
    (kfchaos.signing): the tests' key lives in a folder of their own, never in the real one. Set in os.environ, so
    that the commands the tests start (kfp.local tasks, demo stacks) use it too; a pipeline's key is unset."""
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))
    for name in ("KFCHAOS_SIGNING_KEY", "KFCHAOS_SIGNING_KEY_FILE", "KFCHAOS_SEAL_KEY"):
        os.environ.pop(name, None)


@pytest.fixture(autouse=True)
def _lock_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local runs lock their target under the user's cache folder (kfchaos.lease.local): each test's locks live in
    a folder of its own, so a test never queues behind a person's run or another test's (tests reuse run ids and
    ports), nor leaves a lock in the user's cache. Set in os.environ, for the commands the test starts too."""
    monkeypatch.setenv("KFCHAOS_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))


@pytest.fixture(autouse=True)
def _one_step_a_test() -> None:
    """What a step makes once from its experiment (kfchaos.steps.seams: its fault backend and manifests) is kept for
    the last experiment object seen; a test is a step of its own, so a backend one test faked is never another's."""
    seams._PER_STEP.clear()


@pytest.fixture
def root() -> Path:
    return ROOT
