"""Experiment faults -> Chaos Mesh manifests (`chaos-mesh.org/v1alpha1`), with the CRDs' exact field names.

`render_fault` makes one object for one cluster-side fault; `render_experiment` makes all of them in the
order of the experiment. Both run the safety guards first (kfchaos.faults.safety), so a manifest that
comes out of here has passed them. Traffic-side faults (long-context-burst) create no object and are skipped.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from kfchaos.faults.catalog import API_VERSION, CATALOG
from kfchaos.faults.naming import ANNOTATION_FAULT_TYPE, LABEL_FAULT, object_name, run_labels
from kfchaos.faults.safety import FaultInputError, check_fault, fault_duration, fault_path
from kfchaos.faultspec import admission
from kfchaos.faultspec import params as p
from kfchaos.faultspec.kinds import KINDS, TRAFFIC_SIDE_TYPES, check_covers
from kfchaos.spec import Experiment, FaultBase, Selector
from kfchaos.units import format_duration

Manifest = dict[str, Any]


def render_experiment(
    experiment: Experiment, run_id: str = "dry-run", pipeline_version: str | None = None
) -> list[Manifest]:
    """One manifest per cluster-side fault, in experiment order."""
    return [
        render_fault(experiment, fault, run_id, pipeline_version)
        for fault in experiment.spec.faults
        if fault.type not in TRAFFIC_SIDE_TYPES
    ]


def render_fault(
    experiment: Experiment, fault: FaultBase, run_id: str, pipeline_version: str | None = None
) -> Manifest:
    """The object for `fault` in run `run_id`. `pipeline_version` defaults to the experiment's version."""
    if fault.type in TRAFFIC_SIDE_TYPES:
        raise ValueError(f"fault {fault.name!r} ({fault.type}) is performed by the load generator, not the cluster")
    check_fault(experiment, fault)
    if fault.type == "container-kill" and not fault.containers:
        # Chaos Mesh's webhook rejects container-kill without containerNames; say so before the cluster does.
        raise FaultInputError(
            "container-kill needs containers (the names of the containers to kill)",
            (*fault_path(experiment, fault), "containers"),
        )
    metadata = object_metadata(experiment, fault, run_id, pipeline_version)
    seconds = fault_duration(experiment, fault)
    if fault.type == "gpu-memory-pressure":
        from kfchaos.faults.gpu import render_gpu_pod

        return render_gpu_pod(experiment, fault, metadata, seconds)
    entry = CATALOG[fault.type]
    spec: dict[str, Any] = {}
    if entry.action is not None:
        spec["action"] = entry.action
    spec["mode"] = fault.mode
    if fault.value is not None:
        spec["value"] = fault.value
    spec["selector"] = pod_selector(experiment.fault_namespace(fault), experiment.fault_selector(fault))
    spec.update(_SPEC_BUILDERS[fault.type](fault, fault.params))
    if fault.containers and entry.kind != "NetworkChaos" and entry.kind != "HTTPChaos":
        spec["containerNames"] = list(fault.containers)
    # Never "0s": a sub-millisecond duration would round to it, and a fault must have a positive lifetime.
    spec["duration"] = format_duration(max(seconds, 0.001))
    manifest = {"apiVersion": API_VERSION, "kind": entry.kind, "metadata": metadata, "spec": spec}
    # Whatever the params models let through, the object must be one Chaos Mesh's webhook admits
    # (kfchaos.faultspec.admission, read from its Go validators): validate refuses it rather than the cluster.
    refused = admission.webhook_problems(manifest)
    if refused:
        raise FaultInputError(
            "Chaos Mesh's admission webhook would refuse this fault: " + "; ".join(refused),
            (*fault_path(experiment, fault), "params"),
        )
    return manifest


def object_metadata(
    experiment: Experiment, fault: FaultBase, run_id: str, pipeline_version: str | None
) -> dict[str, Any]:
    name = experiment.metadata.name
    labels = run_labels(name, run_id, pipeline_version or experiment.metadata.version)
    labels[LABEL_FAULT] = fault.name
    return {
        "name": object_name(name, fault.name, run_id),
        "namespace": experiment.fault_namespace(fault),
        "labels": labels,
        "annotations": {ANNOTATION_FAULT_TYPE: fault.type},
    }


def pod_selector(namespace: str, selector: Selector) -> dict[str, Any]:
    """Chaos Mesh's selector: always pinned to one namespace, so a fault never leaks into another."""
    out: dict[str, Any] = {"namespaces": [namespace]}
    if selector.labels:
        out["labelSelectors"] = dict(selector.labels)
    if selector.expressions:
        out["expressionSelectors"] = [
            {"key": e.key, "operator": e.operator, **({"values": list(e.values)} if e.values else {})}
            for e in selector.expressions
        ]
    return out


# ---------------------------------------------------------------- value formats


def single_unit_duration(seconds: float) -> str:
    """A Go duration with one unit (`200ms`, `1.5s`): NetworkChaos latency/jitter allow only that form."""
    for unit, size in (("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        count = seconds / size
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}{unit}"
    if seconds >= 1:
        return f"{_decimal(seconds)}s"
    if seconds >= 1e-3:
        return f"{_decimal(seconds * 1e3)}ms"
    return f"{round(seconds * 1e9)}ns"


def percent_string(fraction: float) -> str:
    """`25` for 25 %: netem fields are percentages written as decimal strings, never exponent notation."""
    return _decimal(fraction * 100)


def _decimal(number: float) -> str:
    return f"{number:.6f}".rstrip("0").rstrip(".") or "0"


# ---------------------------------------------------------------- per-type spec fields


def _pod_kill(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.PodKillParams)
    return {"gracePeriod": round(params.grace_period)}


def _none(fault: FaultBase, params: Any) -> dict[str, Any]:
    return {}


def _network_common(params: p._NetworkCommon) -> dict[str, Any]:
    out: dict[str, Any] = {"direction": params.direction}
    if params.target is not None:
        out["target"] = {
            "mode": "all",
            "selector": {"namespaces": [params.target.namespace], "labelSelectors": dict(params.target.labels)},
        }
    if params.external_targets:
        out["externalTargets"] = list(params.external_targets)
    return out


def _network_delay(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.NetworkDelayParams)
    delay: dict[str, Any] = {"latency": single_unit_duration(params.latency)}
    if params.jitter:
        delay["jitter"] = single_unit_duration(params.jitter)
    delay["correlation"] = percent_string(params.correlation)
    return {**_network_common(params), "delay": delay}


def _network_share(action: str) -> Callable[[FaultBase, Any], dict[str, Any]]:
    """loss, duplicate and corrupt: one share of packets plus its correlation, under a key named after the action."""

    def render_action(fault: FaultBase, params: Any) -> dict[str, Any]:
        share = {action: percent_string(getattr(params, action)), "correlation": percent_string(params.correlation)}
        return {**_network_common(params), action: share}

    return render_action


def _network_bandwidth(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.NetworkBandwidthParams)
    bandwidth = {"rate": params.rate, "limit": params.limit, "buffer": params.buffer}
    return {**_network_common(params), "bandwidth": bandwidth}


def _network_partition(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.NetworkPartitionParams)
    return _network_common(params)


def _stress_memory(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.StressMemoryParams)
    memory = {"workers": params.workers, "size": params.size, "oomScoreAdj": params.oom_score_adj}
    return {"stressors": {"memory": memory}}


def _stress_cpu(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.StressCpuParams)
    return {"stressors": {"cpu": {"workers": params.workers, "load": params.load}}}


def _http_common(params: p._HttpCommon) -> dict[str, Any]:
    out: dict[str, Any] = {"target": params.target, "port": params.port, "path": params.path}
    if params.method is not None:
        out["method"] = params.method
    if params.code is not None:
        out["code"] = params.code
    return out


def _http_abort(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.HttpAbortParams)
    return {**_http_common(params), "abort": True}


def _http_delay(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.HttpDelayParams)
    return {**_http_common(params), "delay": format_duration(params.delay)}


def _http_replace(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.HttpReplaceParams)
    replace: dict[str, Any] = {}
    if params.replace_code is not None:
        replace["code"] = params.replace_code
    if params.replace_body is not None:
        # The CRD declares body as format: byte, i.e. base64 in JSON.
        replace["body"] = base64.b64encode(params.replace_body.encode()).decode()
    if params.replace_headers:
        replace["headers"] = dict(params.replace_headers)
    return {**_http_common(params), "replace": replace}


def _io_common(params: p._IoCommon) -> dict[str, Any]:
    out: dict[str, Any] = {"volumePath": params.volume_path, "percent": params.percent}
    if params.path is not None:
        out["path"] = params.path
    if params.methods:
        out["methods"] = list(params.methods)
    return out


def _io_latency(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.IoLatencyParams)
    return {**_io_common(params), "delay": format_duration(params.delay)}


def _io_fault(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.IoFaultParams)
    return {**_io_common(params), "errno": params.errno}


def _io_attr_override(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.IoAttrOverrideParams)
    attr = {k: v for k, v in (("perm", params.perm), ("size", params.size), ("nlink", params.nlink)) if v is not None}
    return {**_io_common(params), "attr": attr}


def _io_mistake(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.IoMistakeParams)
    mistake = {"filling": params.filling, "maxOccurrences": params.max_occurrences, "maxLength": params.max_length}
    return {**_io_common(params), "mistake": mistake}


def _time_offset(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.TimeOffsetParams)
    return {"timeOffset": params.offset, "clockIds": list(params.clock_ids)}


def _dns(fault: FaultBase, params: Any) -> dict[str, Any]:
    assert isinstance(params, p.DnsParams)
    return {"patterns": list(params.patterns)}


_SPEC_BUILDERS: dict[str, Callable[[FaultBase, Any], dict[str, Any]]] = {
    "pod-kill": _pod_kill,
    "pod-failure": _none,
    "container-kill": _none,
    "network-delay": _network_delay,
    "network-loss": _network_share("loss"),
    "network-duplicate": _network_share("duplicate"),
    "network-corrupt": _network_share("corrupt"),
    "network-bandwidth": _network_bandwidth,
    "network-partition": _network_partition,
    "stress-memory": _stress_memory,
    "stress-cpu": _stress_cpu,
    "http-abort": _http_abort,
    "http-delay": _http_delay,
    "http-replace": _http_replace,
    "io-latency": _io_latency,
    "io-fault": _io_fault,
    "io-attr-override": _io_attr_override,
    "io-mistake": _io_mistake,
    "time-offset": _time_offset,
    "dns-error": _dns,
    "dns-random": _dns,
}
check_covers("kfchaos.faults.render _SPEC_BUILDERS", _SPEC_BUILDERS,
             (kind.name for kind in KINDS if kind.side == "chaos-mesh"))  # fmt: skip
