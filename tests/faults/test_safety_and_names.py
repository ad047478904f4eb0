"""Safety guards at render time, durations, names and labels."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kfchaos.errors import KfchaosError
from kfchaos.faults.naming import LABEL_EXPERIMENT, LABEL_PIPELINE_VERSION, LABEL_RUN_ID, object_name
from kfchaos.faults.render import render_experiment
from kfchaos.faults.safety import FaultInputError, FaultSafetyError
from tests.faults.experiments import experiment_with, unchecked_experiment, with_fault_fields

KILL: dict[str, Any] = {"name": "kill", "type": "pod-kill"}


def _refusal(experiment: Any) -> FaultSafetyError:
    with pytest.raises(FaultSafetyError) as info:
        render_experiment(experiment, "r")
    return info.value


def test_protected_fault_namespace_refused() -> None:
    error = _refusal(with_fault_fields(experiment_with(KILL), namespace="kube-system"))
    assert error.rule == "protected-namespace"
    assert error.path == ("spec", "faults", 0, "namespace")
    assert "kube-system" in str(error)


def test_protected_target_namespace_refused() -> None:
    experiment = unchecked_experiment(KILL, safety={"protected_namespaces": ["llm-serving"]})
    assert _refusal(experiment).path == ("spec", "target", "namespace")


def test_protected_partition_target_refused() -> None:
    fault = {
        "name": "cut",
        "type": "network-partition",
        "params": {"target": {"namespace": "kubeflow", "labels": {"a": "b"}}},
    }
    # The loader refuses it (validate = render, issue 14); built in code, the render guard still does.
    with pytest.raises(KfchaosError, match=r"params\.target\.namespace: refused by safety rule protected-namespace"):
        experiment_with(fault)
    error = _refusal(unchecked_experiment(fault))
    assert (error.rule, error.path[-1]) == ("protected-namespace", "namespace")


def test_empty_selector_refused() -> None:
    experiment = unchecked_experiment(KILL)
    # Bypass the model's own validator, as code building an Experiment by hand might.
    object.__setattr__(experiment.spec.target.selector, "labels", {})
    assert _refusal(experiment).rule == "empty-selector"


@pytest.mark.parametrize(
    ("extra", "safety", "rule"),
    [
        ({"mode": "all"}, {"max_pod_percent": "50%"}, "max-pod-percent"),
        ({"mode": "fixed-percent", "value": "60"}, {"max_pod_percent": "50%"}, "max-pod-percent"),
        ({"mode": "fixed", "value": "0"}, {}, "mode-value"),
        ({"mode": "fixed"}, {}, "mode-value"),
        ({"mode": "one", "value": "3"}, {}, "mode-value"),
        ({"mode": "random-max-percent", "value": "abc"}, {}, "mode-value"),
        ({"duration": 3 * 3600.0}, {"max_fault_duration": "2h"}, "max-fault-duration"),
    ],
)
def test_mode_value_and_duration_limits(extra: dict[str, Any], safety: dict[str, Any], rule: str) -> None:
    experiment = experiment_with(KILL, safety={"max_pod_percent": "100%", **safety})
    assert _refusal(with_fault_fields(experiment, **extra)).rule == rule


def test_default_duration_is_span_of_active_stages() -> None:
    # stages 10,30,60,90,100 of 10m each, 30s timeout: [60, 90] lasts 30s to be injected + 2 x (10m + 30s) + one
    # 2m gap between stages = 23m30s; [30, 100] lasts 30s + 4 x 10m30s + 3 gaps = 48m30s.
    experiment = experiment_with(
        {**KILL, "stages": [60, 90]}, {"name": "k2", "type": "pod-failure", "stages": [30, 100]}
    )
    assert [m["spec"]["duration"] for m in render_experiment(experiment, "r")] == ["23m30s", "48m30s"]


def test_a_sharded_stage_adds_its_shard_start_lead_to_the_default_duration() -> None:
    """Each sharded stage replays only `shard_start_lead` after its start task (kfchaos.steps.shards): on the real node
    a CPU stress over two sharded stages, sized without it, ended 9.7 s into the second stage's replay. [60, 90] of
    the test above with 4 shards and a 90 s lead: 23m30s + 2 x 90 s = 26m30s."""
    base = experiment_with({**KILL, "stages": [60, 90]})
    traffic = {"synthetic": {"rate": 10}, "stage_duration": "10m", "shards": 4, "shard_start_lead": "90s"}
    sharded = experiment_with({**KILL, "stages": [60, 90]}, traffic=traffic)
    assert render_experiment(base, "r")[0]["spec"]["duration"] == "23m30s"
    assert render_experiment(sharded, "r")[0]["spec"]["duration"] == "26m30s"


def test_default_duration_capped_by_safety() -> None:
    experiment = experiment_with(KILL, safety={"max_pod_percent": "100%", "max_fault_duration": "15m"})
    assert render_experiment(experiment, "r")[0]["spec"]["duration"] == "15m"


def test_explicit_duration_kept() -> None:
    assert render_experiment(experiment_with({**KILL, "duration": "90s"}), "r")[0]["spec"]["duration"] == "1m30s"


def test_container_kill_without_containers_refused() -> None:
    with pytest.raises(KfchaosError, match=r"spec\.faults\[0\]\.containers: container-kill needs containers"):
        experiment_with({"name": "ck", "type": "container-kill"})  # refused at validation already
    with pytest.raises(FaultInputError) as info:
        render_experiment(unchecked_experiment({"name": "ck", "type": "container-kill"}), "r")
    assert info.value.path == ("spec", "faults", 0, "containers")


def test_labels_and_deterministic_names() -> None:
    experiment = experiment_with(KILL)
    first = render_experiment(experiment, "run-1", "2.0.0")[0]
    again = render_experiment(experiment, "run-1", "2.0.0")[0]
    other = render_experiment(experiment, "run-2")[0]
    assert first == again
    assert first["metadata"]["name"] != other["metadata"]["name"]
    labels = first["metadata"]["labels"]
    assert (labels[LABEL_RUN_ID], labels[LABEL_EXPERIMENT], labels[LABEL_PIPELINE_VERSION]) == (
        "run-1",
        "render-test",
        "2.0.0",
    )
    assert other["metadata"]["labels"][LABEL_PIPELINE_VERSION] == "1.2.3"  # the experiment's version


def test_long_names_stay_dns_labels() -> None:
    name = object_name("e" * 63, "f" * 63, "r" * 63)
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert object_name("e", "a-" * 40, "r") != object_name("e", "a-" * 40, "s")


def test_invalid_run_id_refused() -> None:
    with pytest.raises(KfchaosError, match="run-id"):
        render_experiment(experiment_with(KILL), "not a label!")


def test_traffic_side_faults_skipped() -> None:
    burst = {"name": "burst", "type": "long-context-burst", "params": {"requests": 1, "context_tokens": 10}}
    assert [m["kind"] for m in render_experiment(experiment_with(burst, KILL), "r")] == ["PodChaos"]
