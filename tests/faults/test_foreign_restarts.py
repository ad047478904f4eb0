"""The foreign-interference watch's reading of a target container's restarts (kfchaos.faults.foreign): a restart no
fault of this run explains makes the stage INCONCLUSIVE, except a kill for memory and the container's restarts after
it, which are the OOM check's to judge. Seen on the real node: vLLM OOM-killed under a burst, then its restart
failing its start (exit 1), read as foreign, turned the FAIL that names the kill into INCONCLUSIVE."""

from __future__ import annotations

from typing import Any

from kfchaos.faults.foreign import ForeignWatch


class Pods:
    """A backend whose pod list is what the test last set; no chaos objects."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []

    def list_objects(self, plural: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.pods if plural == "pods" else []


def pod(restarts: int, reason: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
    last = {"terminated": {"reason": reason, "exitCode": exit_code}} if reason else {}
    status = {"name": "vllm", "restartCount": restarts, "lastState": last}
    return {
        "metadata": {"name": "demo-llm-1", "namespace": "llm-serving", "uid": "u1", "labels": {"app": "vllm"}},
        "status": {"phase": "Running", "containerStatuses": [status]},
    }


def watch(backend: Pods) -> ForeignWatch:
    return ForeignWatch(backend, "run-1", "llm-serving", "app=vllm", own=[])


def looks(*states: dict[str, Any]) -> list[str]:
    backend = Pods()
    seen = watch(backend)
    for state in states:
        backend.pods = [state]
        seen.poll()
    return seen.reasons()


def test_a_restart_no_fault_explains_is_foreign_interference() -> None:
    (reason,) = looks(pod(1, "Error", 1), pod(2, "Error", 137))
    assert "restarted during this stage (Error, exit 137)" in reason


def test_a_restart_before_the_stage_is_not_the_stages() -> None:
    assert looks(pod(1, "Error", 1), pod(1, "Error", 1)) == []


def test_a_kill_for_memory_is_left_to_the_oom_check() -> None:
    assert looks(pod(0), pod(1, "OOMKilled", 0)) == []


def test_the_servers_failed_start_after_its_kill_is_the_kills_aftermath_not_foreign() -> None:
    # The real node's sequence: a restart before the run, the kill (OOMKilled, exit 0), the restarted engine failing
    # its start (Error, exit 1).
    assert looks(pod(1, "Error", 1), pod(2, "OOMKilled", 0), pod(3, "Error", 1)) == []


def test_another_containers_kill_does_not_excuse_this_ones_restart() -> None:
    backend = Pods()
    seen = watch(backend)
    other = pod(0)
    other["metadata"] = {**other["metadata"], "uid": "u2", "name": "demo-llm-2"}
    killed = pod(1, "OOMKilled", 0)
    killed["metadata"] = other["metadata"]
    backend.pods = [pod(0), other]
    seen.poll()
    backend.pods = [pod(1, "Error", 1), killed]
    seen.poll()
    (reason,) = seen.reasons()
    assert "demo-llm-1 restarted during this stage (Error, exit 1)" in reason
