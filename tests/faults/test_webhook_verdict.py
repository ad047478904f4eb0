"""kfchaos.faultspec.admission.verdict: Chaos Mesh's validating webhook as read from its Go validators (go-units
v0.5.0 sizes, Go durations, workers never checked, container-kill's containerNames), every fault type kfchaos
renders admitted, and kfchaos's own stricter rules saying that they are its own."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kfchaos.errors import SpecError
from kfchaos.faults.catalog import CATALOG
from kfchaos.faults.render import render_experiment
from kfchaos.faultspec import admission
from tests.contract.scenarios import minimal_fault
from tests.faults.experiments import experiment_with

BASE = {
    "apiVersion": "chaos-mesh.org/v1alpha1",
    "kind": "StressChaos",
    "metadata": {"name": "s", "namespace": "llm-serving"},
    "spec": {
        "mode": "all",
        "selector": {"namespaces": ["llm-serving"], "labelSelectors": {"app": "vllm"}},
        "stressors": {"memory": {"workers": 1, "size": "256MB"}},
        "duration": "10m",
    },
}


def _with(**changes: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(BASE)
    for path, value in changes.items():
        holder = manifest
        keys = path.split("__")
        for key in keys[:-1]:
            holder = holder[key]
        holder[keys[-1]] = value
    return manifest


@pytest.mark.parametrize(
    "size,admitted",
    [("512Mi", False), ("512MiB", True), ("1g", True), ("512", True), ("5 kb", True), ("1KiBs", False),
     ("80%", True), ("80.5%", False), ("101%", False), ("-5MB", False), ("1.5GB", True)],
)  # fmt: skip
def test_memory_sizes_as_go_units_v050(size: str, admitted: bool) -> None:
    assert admission.verdict(_with(spec__stressors__memory__size=size)).admitted is admitted


@pytest.mark.parametrize("workers,admitted", [(0, True), (-1, True), (8192, True), (8193, False)])
def test_workers_are_checked_only_by_the_crd(workers: int, admitted: bool) -> None:
    verdict = admission.verdict(_with(spec__stressors__memory__workers=workers))
    assert verdict.admitted is admitted, verdict
    if not admitted:
        assert verdict.reasons[0].startswith("schema:")


@pytest.mark.parametrize("duration,admitted", [("90s", True), ("1h30m", True), ("", True), ("-5m", True),
                                               ("1h 2m", False), ("1d", False), ("5", False)])  # fmt: skip
def test_duration_is_a_go_duration(duration: str, admitted: bool) -> None:
    assert admission.verdict(_with(spec__duration=duration)).admitted is admitted


def test_container_kill_needs_container_names() -> None:
    manifest = _with(kind="PodChaos", spec__action="container-kill")
    del manifest["spec"]["stressors"]
    verdict = admission.verdict(manifest)
    assert not verdict.admitted and "containerNames" in str(verdict)
    manifest["spec"]["containerNames"] = ["vllm"]
    assert admission.verdict(manifest).admitted


def test_time_offset_must_parse() -> None:
    manifest = _with(kind="TimeChaos", spec__timeOffset="5 minutes")
    del manifest["spec"]["stressors"]
    assert "timeOffset" in str(admission.verdict(manifest))
    manifest["spec"]["timeOffset"] = "-5m"
    assert admission.verdict(manifest).admitted


@pytest.mark.parametrize("fault_type", sorted(t for t, e in CATALOG.items() if e.kind != "Pod"))
def test_every_rendered_fault_type_is_admitted(fault_type: str) -> None:
    (manifest,) = render_experiment(experiment_with(minimal_fault(fault_type)))
    assert admission.verdict(manifest).admitted, admission.verdict(manifest)


def test_kfchaos_stricter_size_rule_says_it_is_its_own() -> None:
    with pytest.raises(SpecError) as caught:
        experiment_with({"name": "m", "type": "stress-memory", "params": {"size": "1g"}})
    assert "kfchaos's own rule" in str(caught.value)


# Found by the real API server and Chaos Mesh webhooks (tests/cluster/test_contract_real.py, the fuzz corpus):
# both were refused here and admitted there.
@pytest.mark.parametrize("duration", ["1d", "5", "1h 2m", "9999999999h"])
def test_time_chaos_duration_is_not_checked_by_its_webhook(duration: str) -> None:
    manifest = _with(kind="TimeChaos", spec__timeOffset="-5m", spec__duration=duration)
    del manifest["spec"]["stressors"]
    assert admission.verdict(manifest).admitted, admission.verdict(manifest)


@pytest.mark.parametrize("field", ["jitter", "correlation"])
def test_network_delay_empty_fields_get_the_mutating_webhooks_defaults(field: str) -> None:
    manifest = _with(kind="NetworkChaos", spec__action="delay", spec__delay={"latency": "10ms", field: ""})
    del manifest["spec"]["stressors"]
    assert admission.verdict(manifest).admitted, admission.verdict(manifest)
    assert admission.mutated(manifest)["spec"]["delay"] == {"latency": "10ms", "jitter": "0ms", "correlation": "0"}
    manifest["spec"]["delay"][field] = "x"
    assert not admission.verdict(manifest).admitted


@pytest.mark.parametrize("workers", [0, 65, 8192])
def test_kfchaos_workers_limit_says_it_is_its_own(workers: int) -> None:
    """The real webhooks admit workers 0 and 8192 (tests/cluster/test_admission_agreement.py)."""
    with pytest.raises(SpecError) as caught:
        experiment_with({"name": "c", "type": "stress-cpu", "params": {"workers": workers}})
    assert "kfchaos's own rule" in str(caught.value)
    manifest = _with(kind="StressChaos", spec__stressors={"cpu": {"workers": workers}})
    assert admission.verdict(manifest).admitted, "the webhook does not check workers"
