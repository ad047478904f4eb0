"""A missing target token stops the run at steady state (before any fault) with the Secret to create and the
namespace the task pods run in, instead of replaying into 401s."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfchaos import targetauth
from kfchaos.errors import KfchaosError
from kfchaos.steps.stages import steady_state
from kfchaos.validate import load_experiment
from tests.conftest import ROOT

EXPERIMENT = ROOT / "experiments/vllm-network-delay.yaml"  # spec.target.auth.env: KFCHAOS_TARGET_TOKEN


def test_missing_token_names_the_secret_and_the_pods_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("kubeflow\n")
    monkeypatch.setattr(targetauth, "POD_NAMESPACE_FILE", namespace_file)
    experiment = load_experiment(EXPERIMENT)
    with pytest.raises(KfchaosError) as caught:
        targetauth.require_target_credential(experiment, environ={"KFCHAOS_TARGET_TOKEN": "  "})
    message = str(caught.value)
    assert "KFCHAOS_TARGET_TOKEN" in message and "401" in message
    assert "kubectl -n kubeflow create secret generic kfchaos-target --from-literal=token=..." in message
    targetauth.require_target_credential(experiment, environ={"KFCHAOS_TARGET_TOKEN": "t"})


def test_an_experiment_without_auth_needs_no_token() -> None:
    experiment = load_experiment(ROOT / "scripts/e2e/experiment.yaml")
    assert experiment.spec.target.auth is None
    targetauth.require_target_credential(experiment, environ={})


def test_steady_state_stops_before_replaying(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KFCHAOS_TARGET_TOKEN", raising=False)
    monkeypatch.setattr(targetauth, "POD_NAMESPACE_FILE", tmp_path / "absent")
    with pytest.raises(KfchaosError, match=r"target credential missing.*<the KFP namespace>"):
        steady_state(EXPERIMENT.read_text(), str(EXPERIMENT.parent), "http://127.0.0.1:9", "run-1", "")
