"""Every catalog fault type, with edge values, renders an object the real Chaos Mesh CRD schema accepts
(unknown fields are errors, as under fieldValidation=Strict)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from kfchaos.faults.catalog import CATALOG
from kfchaos.faults.render import render_experiment, render_fault
from kfchaos.faultspec.kinds import PARAMS_BY_TYPE, TRAFFIC_SIDE_TYPES
from tests.faults.experiments import experiment_with
from tests.support.kubeapi import validate_chaos_object

PARTITION_TARGET = {"namespace": "llm-gateway", "labels": {"app": "gateway"}}

# (fault type, params, extra fault fields): edge values of each parameter.
CASES: list[tuple[str, dict[str, Any] | None, dict[str, Any]]] = [
    ("pod-kill", None, {}),
    ("pod-kill", {"grace_period": "30s"}, {"mode": "fixed", "value": "1"}),
    ("pod-failure", None, {"mode": "fixed-percent", "value": "100", "duration": "1s"}),
    ("container-kill", None, {"containers": ["vllm", "sidecar"]}),
    ("network-delay", {"latency": "1ns"}, {}),
    ("network-delay", {"latency": "1h", "jitter": "1.5s", "correlation": "100%"}, {"mode": "all"}),
    ("network-delay", {"latency": "200ms", "jitter": "250us", "correlation": "0.001%", "target": PARTITION_TARGET}, {}),
    ("network-loss", {"loss": "0%"}, {}),
    ("network-loss", {"loss": "100%", "correlation": "0.5%", "direction": "both", "target": PARTITION_TARGET}, {}),
    ("network-duplicate", {"duplicate": "0.00001%", "correlation": "100%"}, {}),
    ("network-corrupt", {"corrupt": "50%", "direction": "from", "target": PARTITION_TARGET}, {}),
    ("network-bandwidth", {"rate": "1bps", "limit": 1, "buffer": 1}, {}),
    ("network-bandwidth", {"rate": "10500mbps", "limit": 2**31 - 1, "buffer": 2**31 - 1}, {}),
    ("network-partition", {"target": PARTITION_TARGET}, {}),
    ("network-partition", {"external_targets": ["10.0.0.1", "api.example.com"], "direction": "to"}, {}),
    ("stress-memory", {"size": "1B"}, {}),
    ("stress-memory", {"size": "80%", "workers": 64, "oom_score_adj": -1000}, {"containers": ["vllm"]}),
    ("stress-memory", {"size": "1.5GiB", "oom_score_adj": 1000}, {}),
    ("stress-cpu", None, {}),
    ("stress-cpu", {"workers": 64, "load": 0}, {"mode": "random-max-percent", "value": "1"}),
    ("http-abort", {"port": 1}, {}),
    ("http-abort", {"port": 65535, "path": "/v1/*", "method": "POST", "code": 599, "target": "Response"}, {}),
    ("http-delay", {"port": 8000, "delay": "1h30m"}, {}),
    ("http-delay", {"port": 8000, "delay": "1ns", "method": "GET"}, {}),
    ("http-replace", {"port": 8000, "replace_code": 100}, {}),
    ("http-replace", {"port": 8000, "replace_body": '{"error": "ünïcode"}', "replace_headers": {"X-A": "b"}}, {}),
    ("io-latency", {"volume_path": "/models", "delay": "100ms"}, {}),
    ("io-latency", {"volume_path": "/models", "delay": "1us", "path": "/models/**/*.bin", "percent": 1}, {}),
    ("io-fault", {"volume_path": "/data", "errno": 1, "methods": ["READ", "WRITE"]}, {}),
    ("io-fault", {"volume_path": "/data", "errno": 133, "percent": 100}, {"containers": ["vllm"]}),
    ("io-attr-override", {"volume_path": "/data", "perm": 0}, {}),
    ("io-attr-override", {"volume_path": "/data", "perm": 0o7777, "size": 0, "nlink": 2**31 - 1}, {}),
    ("io-mistake", {"volume_path": "/models"}, {}),
    (
        "io-mistake",
        {
            "volume_path": "/models",
            "path": "/models/lora/**",
            "filling": "zero",
            "max_occurrences": 1_000_000,
            "max_length": 1 << 30,
            "methods": ["READ"],
        },
        {"containers": ["vllm"]},
    ),
    ("time-offset", {"offset": "-5m"}, {}),
    ("time-offset", {"offset": "1h30m", "clock_ids": ["CLOCK_REALTIME", "CLOCK_MONOTONIC"]}, {}),
    ("dns-error", {"patterns": ["*"]}, {}),
    ("dns-random", {"patterns": ["redis.*", "*.svc.cluster.local"]}, {"containers": ["vllm"]}),
]


def _fault(fault_type: str, params: dict[str, Any] | None, extra: dict[str, Any]) -> dict[str, Any]:
    fault: dict[str, Any] = {"name": f"f-{fault_type}", "type": fault_type, **extra}
    if params is not None:
        fault["params"] = params
    return fault


def test_cases_cover_every_chaos_mesh_type() -> None:
    covered = {case[0] for case in CASES}
    chaos_mesh_types = set(PARAMS_BY_TYPE) - TRAFFIC_SIDE_TYPES - {"gpu-memory-pressure"}
    assert chaos_mesh_types - covered == set()


@pytest.mark.parametrize(("fault_type", "params", "extra"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_renders_valid_against_crd(fault_type: str, params: dict[str, Any] | None, extra: dict[str, Any]) -> None:
    experiment = experiment_with(_fault(fault_type, params, extra))
    manifest = render_fault(experiment, experiment.spec.faults[0], "run-42")
    assert validate_chaos_object(manifest) == []
    entry = CATALOG[fault_type]
    assert manifest["kind"] == entry.kind
    assert manifest["spec"].get("action") == entry.action
    assert manifest["spec"]["duration"]
    assert manifest["spec"]["selector"]["namespaces"] == ["llm-serving"]


def test_validator_rejects_unknown_and_mistyped_fields() -> None:
    """The check above can fail: an unknown field, a wrong type and an int32 overflow are each reported."""
    experiment = experiment_with(_fault("network-delay", {"latency": "10ms"}, {}))
    manifest = render_fault(experiment, experiment.spec.faults[0], "run-42")
    manifest["spec"]["delay"]["latncy"] = "10ms"
    manifest["spec"]["gracePeriod"] = 1
    assert any("latncy" in p for p in validate_chaos_object(manifest))
    assert any("gracePeriod" in p for p in validate_chaos_object(manifest))
    manifest = render_fault(experiment, experiment.spec.faults[0], "run-42")
    manifest["spec"]["delay"]["latency"] = "1h30m"  # two units: the CRD's pattern forbids it
    assert validate_chaos_object(manifest) != []
    bandwidth = experiment_with(_fault("network-bandwidth", {"rate": "1mbps", "limit": 1, "buffer": 1}, {}))
    manifest = render_fault(bandwidth, bandwidth.spec.faults[0], "run-42")
    manifest["spec"]["bandwidth"]["limit"] = 2**31
    assert any("int32" in p for p in validate_chaos_object(manifest))


def test_value_formats() -> None:
    experiment = experiment_with(
        _fault("network-delay", {"latency": "1.5s", "jitter": "1h", "correlation": "0.00001%"}, {}),
        {"name": "replace", "type": "http-replace", "params": {"port": 80, "replace_body": "ok"}},
    )
    delay, replace = render_experiment(experiment, "r")
    assert delay["spec"]["delay"] == {"latency": "1500ms", "jitter": "1h", "correlation": "0.00001"}
    assert base64.b64decode(replace["spec"]["replace"]["body"]) == b"ok"


def test_expressions_and_partition_target_render() -> None:
    fault = {
        "name": "cut",
        "type": "network-partition",
        "selector": {"labels": {"app": "vllm"}, "expressions": [{"key": "tier", "operator": "Exists"}]},
        "params": {"target": PARTITION_TARGET},
    }
    manifest = render_experiment(experiment_with(fault), "r")[0]
    assert manifest["spec"]["selector"]["expressionSelectors"] == [{"key": "tier", "operator": "Exists"}]
    assert manifest["spec"]["target"]["selector"] == {
        "namespaces": ["llm-gateway"],
        "labelSelectors": {"app": "gateway"},
    }
    assert manifest["spec"]["direction"] == "both"
    assert validate_chaos_object(manifest) == []
