"""Experiments built in tests: a valid base with one fault swapped in, loaded through the real loader."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from kfchaos.spec import Experiment
from kfchaos.validate import parse_experiment

BASE: dict[str, Any] = {
    "apiVersion": "kfchaos.io/v1alpha1",
    "kind": "Experiment",
    "metadata": {"name": "render-test", "version": "1.2.3", "owner": "tests"},
    "spec": {
        "target": {
            "namespace": "llm-serving",
            "selector": {"labels": {"app.kubernetes.io/name": "vllm"}},
            "endpoint": "http://vllm.llm-serving.svc:8000",
        },
        "traffic": {"synthetic": {"rate": 10}, "stage_duration": "10m"},
        "baseline": {"file": "baselines/x.yaml"},
        "safety": {"max_pod_percent": "100%", "max_fault_duration": "2h"},
    },
}


def experiment_with(*faults: dict[str, Any], **spec_overrides: Any) -> Experiment:
    data = copy.deepcopy(BASE)
    data["spec"]["faults"] = list(faults)
    for key, value in spec_overrides.items():
        data["spec"][key] = value
    return parse_experiment(yaml.safe_dump(data), "test.yaml")


def unchecked_experiment(*faults: dict[str, Any], **spec_overrides: Any) -> Experiment:
    """Built in code without the loader's context, so the loader's own safety checks do not run:
    what a pipeline component could do, and what the render-time guards must still catch."""
    data = copy.deepcopy(BASE)
    data["spec"]["faults"] = list(faults)
    data["spec"].update(spec_overrides)
    return Experiment.model_validate(data)


def with_fault_fields(experiment: Experiment, **fields: Any) -> Experiment:
    """The experiment with fields of its first fault replaced without validation (model_copy does not
    validate): the only way to get past the loader's own checks, and so to show the render guards hold."""
    fault = experiment.spec.faults[0].model_copy(update=fields)
    spec = experiment.spec.model_copy(update={"faults": [fault, *experiment.spec.faults[1:]]})
    return experiment.model_copy(update={"spec": spec})
