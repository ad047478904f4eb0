"""The bundle's Kubernetes items through the real kubernetes client against the loopback API server: the
pod's last terminated state, its events (fieldSelector), the previous log (RBAC-denied by default, bounded,
redacted), and what an item says when it cannot be read."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes.client
import pytest

from kfchaos.evidence.collect import Kill, Options, events, last_state, nvidia_smi, previous_log
from kfchaos.evidence.kube import ClusterKube, Unavailable
from tests.support.kubeapi import KubeApiServer, kubernetes_client

NS, POD, CONTAINER = "llm-serving", "vllm-0", "vllm"
KILL = Kill(NS, POD, CONTAINER, None, "OOMKilled")
LOG = "".join(f"INFO step {i}\n" for i in range(500)) + (
    "INFO request from client Authorization: Bearer sk-live-abcdef123456\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
)


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as api:
        api.add_pod(NS, POD, {"app": "vllm"}, containers=[CONTAINER])
        api.add_pod(NS, "other-0", {"app": "vllm"}, containers=[CONTAINER])
        api.write_log(NS, POD, CONTAINER, LOG)
        api.restart_container(NS, POD, CONTAINER, "OOMKilled", 137)
        api.write_log(NS, POD, CONTAINER, "INFO loading weights again\n")
        involved = {"kind": "Pod", "namespace": NS, "name": POD, "fieldPath": "spec.containers{vllm}"}
        api.add_event(NS, "BackOff", "Back-off restarting failed container vllm in pod vllm-0", involved, "Warning", 3)
        api.add_event(NS, "Started", "Started container vllm", involved, count=2)
        api.add_event(NS, "Killing", "Stopping container vllm", {"kind": "Pod", "namespace": NS, "name": "other-0"})
        yield api


def kube(server: KubeApiServer) -> ClusterKube:
    return ClusterKube(kubernetes_client(server.url))


def test_last_state_reads_the_oom_killed_container(server: KubeApiServer) -> None:
    item = last_state(kube(server), KILL)
    assert item.collected, item.why_not
    assert item.data["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert item.data["lastState"]["terminated"]["exitCode"] == 137
    assert item.data["restartCount"] == 1
    assert item.findings == {"host_oom_kill": True, "crash_restart": False}
    assert "reason OOMKilled, exit code 137" in item.shows


def test_events_are_the_pods_own(server: KubeApiServer) -> None:
    item = events(kube(server), NS, POD)
    assert item.collected
    assert sorted(e["reason"] for e in item.data) == ["BackOff", "Started"]  # not other-0's Killing
    assert item.findings == {"backoff_events": True}
    assert ("GET", f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3D{POD}&limit=200") in [
        (m, p) for m, p in server.requests
    ]


def test_the_fake_refuses_a_field_the_api_server_cannot_select(server: KubeApiServer) -> None:
    core = kubernetes.client.CoreV1Api(kubernetes_client(server.url))
    with pytest.raises(kubernetes.client.ApiException) as raised:
        core.list_namespaced_event(NS, field_selector="message=OOM")
    assert raised.value.status == 400 and "field label not supported: message" in str(raised.value.body)


def test_previous_log_is_denied_without_the_optional_role(server: KubeApiServer) -> None:
    server.forbid("get", "pods/log")
    with pytest.raises(Unavailable, match=r"RBAC denied: .* get pods/log .*manifests/optional/evidence-logs.yaml"):
        previous_log(kube(server), KILL, Options())


def test_previous_log_is_the_killed_containers_tail_redacted(server: KubeApiServer) -> None:
    item = previous_log(kube(server), KILL, Options(log_tail_lines=50))
    assert item.collected
    lines = item.data.splitlines()
    assert len(lines) == 50 and lines[-1].startswith("torch.OutOfMemoryError")
    assert "loading weights again" not in item.data  # the current container's log is not the previous one
    assert "sk-live-abcdef123456" not in item.data
    assert "Authorization: <redacted>" in item.data
    assert item.findings == {"cuda_oom_log": True, "engine_death_log": False}
    assert any("previous=True" in p and "tailLines=50" in p for _, p in server.requests)


def test_previous_log_is_bounded_in_bytes(server: KubeApiServer) -> None:
    item = previous_log(kube(server), KILL, Options(log_tail_lines=5000, log_limit_bytes=1000))
    assert len(item.data.encode()) <= 1001
    assert any("limitBytes=1000" in p for _, p in server.requests)


def test_a_container_that_never_restarted_has_no_previous_log(server: KubeApiServer) -> None:
    with pytest.raises(Unavailable, match='previous terminated container "vllm" in pod "other-0" not found'):
        previous_log(kube(server), Kill(NS, "other-0", CONTAINER, None, None), Options())


def test_a_pod_that_is_gone_says_so(server: KubeApiServer) -> None:
    server.remove_pod(NS, POD)
    with pytest.raises(Unavailable, match="not found"):
        last_state(kube(server), KILL)


def test_nvidia_smi_is_not_run_without_the_opt_in(server: KubeApiServer) -> None:
    item = nvidia_smi(kube(server), NS, POD, CONTAINER, Options())
    assert not item.collected and item.why_not and "not opted in" in item.why_not
    assert not any("/exec" in p for _, p in server.requests)


NVIDIA_SMI_CSV = "pid, used_memory [MiB]\n4242, 71234 MiB\n4301, 2048 MiB\n"


def test_nvidia_smi_runs_over_the_exec_websocket_when_opted_in(server: KubeApiServer) -> None:
    calls: list[tuple[str, str, str, list[str]]] = []

    def run(namespace: str, pod: str, container: str, command: list[str]) -> tuple[str, int]:
        calls.append((namespace, pod, container, command))
        return NVIDIA_SMI_CSV, 0

    server.exec_handler = run
    item = nvidia_smi(kube(server), NS, POD, CONTAINER, Options(exec_nvidia_smi=True))
    assert item.collected, item.why_not
    assert calls == [(NS, POD, CONTAINER, ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv"])]
    assert item.data["processes"] == [{"pid": "4242", "used_memory": "71234 MiB"},
                                      {"pid": "4301", "used_memory": "2048 MiB"}]  # fmt: skip
    assert item.findings == {"gpu_process_memory": True}


def test_nvidia_smi_denied_or_failing_says_why(server: KubeApiServer) -> None:
    server.exec_handler = lambda *a: ("", 127)  # not in the image
    with pytest.raises(Unavailable, match="non-zero exit code"):
        nvidia_smi(kube(server), NS, POD, CONTAINER, Options(exec_nvidia_smi=True))
    server.forbid("create", "pods/exec")
    with pytest.raises(Unavailable, match=r"RBAC denied: .* create pods/exec .*evidence-exec.yaml"):
        nvidia_smi(kube(server), NS, POD, CONTAINER, Options(exec_nvidia_smi=True))
