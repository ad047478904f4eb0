"""GPU memory pressure, the fault Chaos Mesh lacks: hold a share of a target GPU's memory for a while.

`method: pod` renders a short-lived Pod that lands on a node where a target pod runs (pod affinity on the
target selector, or `spec.nodeName` once the backend has resolved a target pod) and runs
`python -m kfchaos.faults.gpu_allocator`, which allocates the share of device memory and holds it.
It needs a GPU it can share with the target: NVIDIA device plugin with time-slicing or MPS, so that a
second pod can request `nvidia.com/gpu: 1` on a node whose GPU is already taken.
`method: exec` renders a kfchaos `GpuMemoryExec` document: the same allocator command, run inside the
target container (which then needs python and libcudart), so it is certain to hit the target's own GPU.

Both expire by themselves: the allocator exits after `--duration`, and the Pod carries
`activeDeadlineSeconds`, so the kubelet kills it even if the allocator hangs.
"""

from __future__ import annotations

import math
from typing import Any

from kfchaos.faultspec.params import GpuMemoryPressureParams
from kfchaos.image import component_image
from kfchaos.spec import Experiment, FaultBase

CONTAINER_NAME = "gpu-memory-pressure"
READY_FILE = "/tmp/kfchaos-gpu-held"
GPU_RESOURCE = "nvidia.com/gpu"
EXEC_KIND = "GpuMemoryExec"
EXEC_API_VERSION = "kfchaos.io/v1alpha1"


def allocator_command(share: float, seconds: float) -> list[str]:
    return [
        "python",
        "-m",
        "kfchaos.faults.gpu_allocator",
        "--share",
        f"{share:.6f}".rstrip("0").rstrip("."),
        "--duration",
        f"{seconds:g}",
        "--ready-file",
        READY_FILE,
    ]


def render_gpu_pod(
    experiment: Experiment, fault: FaultBase, metadata: dict[str, Any], seconds: float
) -> dict[str, Any]:
    params = fault.params
    assert isinstance(params, GpuMemoryPressureParams)
    if params.method == "exec":
        return _render_exec(experiment, fault, params, metadata, seconds)
    selector = experiment.fault_selector(fault)
    label_selector: dict[str, Any] = {}
    if selector.labels:
        label_selector["matchLabels"] = dict(selector.labels)
    if selector.expressions:
        label_selector["matchExpressions"] = [
            {"key": e.key, "operator": e.operator, **({"values": list(e.values)} if e.values else {})}
            for e in selector.expressions
        ]
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": params.image or component_image(),  # KFCHAOS_IMAGE, as every component
        "command": allocator_command(params.share, seconds),
        "resources": {"limits": {GPU_RESOURCE: 1}, "requests": {"cpu": "50m", "memory": "128Mi"}},
        # The NVIDIA container toolkit mounts libcuda.so.1 only with the compute capability; images that are not
        # CUDA images do not ask for it by themselves.
        "env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}],
        # Ready only once the memory is held: wait_injected waits for this, not merely for Running.
        "readinessProbe": {"exec": {"command": ["test", "-f", READY_FILE]}, "periodSeconds": 2},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "restartPolicy": "Never",
            # The hard expiry: the kubelet kills the pod when this runs out, whatever the allocator does.
            "activeDeadlineSeconds": max(1, math.ceil(seconds)),
            "terminationGracePeriodSeconds": 10,
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": label_selector,
                            "namespaces": [experiment.fault_namespace(fault)],
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            },
            "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [container],
        },
    }


def _render_exec(
    experiment: Experiment,
    fault: FaultBase,
    params: GpuMemoryPressureParams,
    metadata: dict[str, Any],
    seconds: float,
) -> dict[str, Any]:
    selector = experiment.fault_selector(fault)
    return {
        "apiVersion": EXEC_API_VERSION,
        "kind": EXEC_KIND,
        "metadata": metadata,
        "spec": {
            "mode": fault.mode,
            **({"value": fault.value} if fault.value is not None else {}),
            "selector": {"namespaces": [experiment.fault_namespace(fault)], "labelSelectors": dict(selector.labels)},
            "containerNames": list(fault.containers),
            # `timeout` bounds the exec even if the allocator never returns.
            "command": ["timeout", f"{math.ceil(seconds)}s", *allocator_command(params.share, seconds)],
            "duration": f"{math.ceil(seconds)}s",
        },
    }


def pin_to_node(pod: dict[str, Any], node_name: str) -> dict[str, Any]:
    """The pod with `spec.nodeName` set to the target pod's node (the affinity then is only a fallback)."""
    spec = dict(pod["spec"])
    spec["nodeName"] = node_name
    return {**pod, "spec": spec}
