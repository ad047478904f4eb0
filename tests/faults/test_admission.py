"""Chaos Mesh's admission rules and pod counts: refused at `kfchaos validate` time, denied by the loopback
API server's webhooks (kfchaos.faultspec.admission's rules, which tests/cluster checks against Chaos Mesh's real
webhooks) on dry runs as on creates, and told apart from an RBAC 403 by the message; the safety cap checked
against Chaos Mesh's rounding and the pods preflight counts; the other side of a network fault selected and
checked too."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kfchaos.errors import SpecError
from kfchaos.faults.backend import AdmissionDenied, BackendError, InjectionTimeout, PermissionDenied
from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.faults.render import render_fault
from kfchaos.faults.safety import FaultSafetyError
from kfchaos.faultspec import admission
from tests.faults.conftest import FAST_RETRY
from tests.faults.experiments import experiment_with
from tests.support.kubeapi import KubeApiServer, kubernetes_client
from tests.support.rbac import service_account_groups, service_account_user

TARGET = {"namespace": "gateway", "labels": {"app": "envoy"}}
DELAY = {"name": "delay", "type": "network-delay", "mode": "all", "params": {"latency": "100ms"}}

# (fault as written, field the loader names): each is a value Chaos Mesh's webhook refuses.
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({**DELAY, "mode": "fixed-percent", "value": "12.5"}, "spec.faults[0]"),
    ({**DELAY, "mode": "fixed", "value": "1.0"}, "spec.faults[0]"),
    ({**DELAY, "params": {"latency": "1ms", "direction": "both"}}, "params"),
    ({**DELAY, "params": {"latency": "1ms", "direction": "from", "external_targets": ["10.0.0.1"]}}, "params"),
    (
        {
            "name": "bw",
            "type": "network-bandwidth",
            "mode": "all",
            "params": {"rate": "1.5mbps", "limit": 100, "buffer": 100},
        },
        "params.rate",
    ),
    ({"name": "mem", "type": "stress-memory", "params": {"size": "80.5%"}}, "params.size"),
    ({"name": "h", "type": "http-abort", "params": {"port": 80, "method": "FETCH"}}, "params"),
    ({"name": "h", "type": "http-abort", "params": {"port": 80, "method": "get"}}, "params"),
]


@pytest.mark.parametrize("fault,field", REFUSED)
def test_validate_refuses_what_the_webhook_refuses(fault: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        experiment_with(fault)
    assert field in str(caught.value)


# The same values in rendered objects, as a pipeline component built in code could send them: the loopback
# server's webhook model denies each, on the dry run already.
def _variants() -> list[tuple[str, dict[str, Any], Any]]:
    def set_value(m: dict[str, Any]) -> None:
        m["spec"]["mode"], m["spec"]["value"] = "fixed-percent", "12.5"

    def set_direction(m: dict[str, Any]) -> None:
        m["spec"]["direction"] = "both"

    def set_rate(m: dict[str, Any]) -> None:
        m["spec"]["bandwidth"]["rate"] = "1.5mbps"

    def set_size(m: dict[str, Any]) -> None:
        m["spec"]["stressors"]["memory"]["size"] = "80.5%"

    def set_method(m: dict[str, Any]) -> None:
        m["spec"]["method"] = "FETCH"

    bandwidth = {"name": "bw", "type": "network-bandwidth", "mode": "all",
                 "params": {"rate": "1mbps", "limit": 100, "buffer": 100}}  # fmt: skip
    return [
        ("value", DELAY, set_value),
        ("direction", DELAY, set_direction),
        ("rate", bandwidth, set_rate),
        ("size", {"name": "mem", "type": "stress-memory", "params": {"size": "80%"}}, set_size),
        ("method", {"name": "h", "type": "http-abort", "params": {"port": 80, "method": "GET"}}, set_method),
    ]


@pytest.mark.parametrize("label,fault,spoil", _variants(), ids=[v[0] for v in _variants()])
def test_the_loopback_webhook_denies_on_dry_run_and_it_is_no_rbac_error(
    server: KubeApiServer, backend: ChaosMeshBackend, label: str, fault: dict[str, Any], spoil: Any
) -> None:
    manifest = render_fault(experiment_with(fault), fault_of(experiment_with(fault)), "run-adm")
    assert backend.preflight([manifest]).dry_run  # the valid one is admitted
    bad = copy.deepcopy(manifest)
    spoil(bad)
    with pytest.raises(AdmissionDenied) as caught:
        backend.preflight([bad])
    text = str(caught.value)
    assert 'admission webhook "v' in text and "denied the request" in text
    assert "not RBAC" in text and "rbac rule" not in text.lower()
    assert server.chaos_objects() == []


def fault_of(experiment: Any) -> Any:
    return experiment.spec.faults[0]


def test_an_rbac_403_still_reads_as_the_missing_rule(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    experiment = experiment_with(DELAY)
    server.forbid("create", "networkchaos")
    with pytest.raises(PermissionDenied) as caught:
        backend.preflight([render_fault(experiment, fault_of(experiment), "run-rbac")])
    assert "add the RBAC rule" in str(caught.value) or "apiGroups" in str(caught.value)


# ---------------------------------------------------------------- how many pods are hit


@pytest.mark.parametrize(
    "mode,value,count,expected",
    [
        ("fixed-percent", "50", 3, (2, 2)),  # ceil, not floor
        ("fixed-percent", "1", 3, (1, 1)),
        ("fixed-percent", "100", 3, (3, 3)),
        ("fixed", "5", 3, (3, 3)),
        ("random-max-percent", "50", 3, (0, 2)),
        ("one", None, 3, (1, 1)),
        ("all", None, 3, (3, 3)),
    ],
)
def test_pods_hit_follows_chaos_mesh(mode: str, value: str | None, count: int, expected: tuple[int, int]) -> None:
    assert admission.pods_hit(mode, value, count) == expected


def capped(fault: dict[str, Any], cap: str = "50%") -> Any:
    return experiment_with(fault, safety={"max_pod_percent": cap, "max_fault_duration": "2h"})


@pytest.mark.parametrize("mode,value", [("fixed-percent", "50"), ("fixed", "2"), ("random-max-percent", "50")], ids=str)
def test_the_cap_is_checked_against_chaos_meshs_rounding_at_preflight(
    server: KubeApiServer, mode: str, value: str
) -> None:
    experiment = capped({**DELAY, "mode": mode, "value": value})  # validate passes: 50 % <= 50 %
    backend = ChaosMeshBackend(kubernetes_client(server.url), retry=FAST_RETRY, poll_interval=0.02,
                               experiment=experiment, run_id="run-cap")  # fmt: skip
    with pytest.raises(FaultSafetyError) as caught:
        backend.preflight(list(experiment.spec.faults))
    assert "hits 2 of the 3 matching pods (67%" in str(caught.value)
    assert server.chaos_objects() == []
    server.add_pod("llm-serving", "vllm-3", {"app.kubernetes.io/name": "vllm"})  # 2 of 4 is 50 %
    assert backend.preflight(list(experiment.spec.faults)).matching_pods


def test_the_loopback_controller_rounds_up(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    experiment = experiment_with({**DELAY, "mode": "fixed-percent", "value": "50"})
    handle = backend.apply(render_fault(experiment, fault_of(experiment), "run-ceil"))
    assert len(backend.wait_injected(handle, timeout=5).targets) == 2  # of 3


def test_random_max_percent_drawing_nothing_is_not_injected() -> None:
    with KubeApiServer(inject_delay=0.01, random_percent=lambda maximum, name: 0) as server:
        for index in range(3):
            server.add_pod("llm-serving", f"vllm-{index}", {"app.kubernetes.io/name": "vllm"})
        backend = ChaosMeshBackend(kubernetes_client(server.url), retry=FAST_RETRY, poll_interval=0.02)
        experiment = experiment_with({**DELAY, "mode": "random-max-percent", "value": "50"})
        handle = backend.apply(render_fault(experiment, fault_of(experiment), "run-zero"))
        with pytest.raises(InjectionTimeout):
            backend.wait_injected(handle, timeout=0.3)
        backend.sweep("run-zero", ["llm-serving"], timeout=5)
        assert server.chaos_objects() == []


# ---------------------------------------------------------------- the other side of a network fault


def two_sided(direction: str = "both") -> Any:
    return experiment_with({**DELAY, "params": {"latency": "10ms", "direction": direction, "target": TARGET}})


def test_preflight_needs_running_pods_on_the_other_side(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    experiment = two_sided()
    manifest = render_fault(experiment, fault_of(experiment), "run-side")
    with pytest.raises(BackendError, match=r"its target \(the other side\)"):
        backend.preflight([manifest])
    server.add_pod("gateway", "envoy-0", {"app": "envoy"}, node="cpu-0")
    assert backend.preflight([manifest]).dry_run


def test_vauth_needs_create_in_the_target_namespace_too(server: KubeApiServer) -> None:
    """Chaos Mesh's security mode (vauth.kb.io) checks create on the kind in every affected namespace."""
    user = service_account_user("kubeflow", "runner")
    server.user, server.groups = user, tuple(service_account_groups("kubeflow"))
    server.rbac = [role_and_binding(space, user) for space in ("llm-serving",)]
    server.rbac = [o for pair in server.rbac for o in pair]
    server.add_pod("gateway", "envoy-0", {"app": "envoy"}, node="cpu-0")
    backend = ChaosMeshBackend(kubernetes_client(server.url), retry=FAST_RETRY, poll_interval=0.02)
    experiment = two_sided()
    manifest = render_fault(experiment, fault_of(experiment), "run-auth")
    with pytest.raises(AdmissionDenied, match=f"vauth.kb.io.*{user} is forbidden on namespace gateway"):
        backend.preflight([manifest])
    server.rbac += list(role_and_binding("gateway", user))
    assert backend.preflight([manifest]).dry_run


def role_and_binding(namespace: str, user: str) -> tuple[dict[str, Any], dict[str, Any]]:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "chaos", "namespace": namespace},
        "rules": [{"apiGroups": ["chaos-mesh.org"], "resources": ["*"], "verbs": ["*"]},
                  {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    }  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "chaos", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "chaos"},
        "subjects": [{"kind": "User", "name": user}],
    }
    return role, binding


def test_namespace_filter_on_the_target_namespace_fails_preflight(
    server: KubeApiServer, backend: ChaosMeshBackend
) -> None:
    server.add_pod("gateway", "envoy-0", {"app": "envoy"}, node="cpu-0")
    env = [{"name": "ENABLE_FILTER_NAMESPACE", "value": "true"}]
    server.add_object("deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "chaos-controller-manager", "namespace": "chaos-mesh",
                     "labels": {"app.kubernetes.io/component": "controller-manager"}},
        "spec": {"template": {"spec": {"containers": [{"name": "m", "image": "x", "env": env}]}}},
    })  # fmt: skip
    for space in ("llm-serving", "gateway"):
        annotations = {"chaos-mesh.org/inject": "enabled"} if space == "llm-serving" else {}
        server.add_object("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": space, "annotations": annotations}})  # fmt: skip
    experiment = two_sided()
    with pytest.raises(BackendError, match=r"namespace gateway lacks the annotation chaos-mesh\.org/inject=enabled"):
        backend.preflight([render_fault(experiment, fault_of(experiment), "run-filter")])


def test_untolerated_gpu_taint_fails_preflight_before_injecting(
    server: KubeApiServer, backend: ChaosMeshBackend
) -> None:
    taints = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    for index in range(3):
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"gpu-node-{index}"},
            "spec": {"taints": taints},
        }
        server.add_object("nodes", node)
    experiment = experiment_with(DELAY)
    manifest = render_fault(experiment, fault_of(experiment), "run-taint")
    with pytest.raises(BackendError, match="cannot find daemonIP on node gpu-node-0"):
        backend.preflight([manifest])
    kill = experiment_with({"name": "kill", "type": "pod-kill"})
    assert backend.preflight([render_fault(kill, fault_of(kill), "run-taint")]).dry_run  # pod-kill needs no daemon
    server.daemon_tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert backend.preflight([manifest]).dry_run
    assert server.chaos_objects() == []


@pytest.mark.parametrize("direction,refused", [("both", True), ("to", False)])
def test_chaos_daemon_is_needed_on_the_other_sides_nodes_for_from_and_both(
    server: KubeApiServer, backend: ChaosMeshBackend, direction: str, refused: bool
) -> None:
    taints = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    server.add_object(
        "nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gw-0"}, "spec": {"taints": taints}}
    )
    server.add_pod("gateway", "envoy-0", {"app": "envoy"}, node="gw-0")
    experiment = two_sided(direction)
    manifest = render_fault(experiment, fault_of(experiment), "run-gw")
    if refused:
        with pytest.raises(BackendError, match="cannot find daemonIP on node gw-0"):
            backend.preflight([manifest])
    else:
        assert backend.preflight([manifest]).dry_run
