"""What the Kubernetes API would say about the demo's one pod, read from the supervisor's state file: the
evidence bundle's KubeReader (kfchaos.evidence.kube) under the local fault backend.

- pod: status.containerStatuses[vllm] with restartCount, state.running.startedAt and lastState.terminated
  {reason, exitCode, startedAt, finishedAt} (staging/src/k8s.io/api/core/v1/types.go), as the kubelet sets
  them from the runtime (reasons OOMKilled / Error / Completed: containerd internal/cri/server).
- events: the supervisor's container events for the pod (involvedObject the pod, fieldPath
  spec.containers{vllm}, as the kubelet's container references are: pkg/kubelet/container/ref.go).
- previous log: the previous container's log file, as `kubectl logs --previous` (one previous container);
  none yet is the kubelet's 400 "previous terminated container ... not found" (pkg/kubelet/kubelet_pods.go).
- exec: the demo has no GPU and no nvidia-smi.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kfchaos.demo.server.pod import DEMO_CONTAINER, DEMO_NAMESPACE, DEMO_POD
from kfchaos.evidence.kube import Unavailable


def _rfc3339(epoch: object) -> str | None:
    if not isinstance(epoch, int | float):
        return None
    return datetime.fromtimestamp(float(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class DemoKube:
    def __init__(self, state_file: Path) -> None:
        self.state_file = state_file
        self.source = "demo supervisor (its state file stands in for the pod status, events and logs)"

    def _state(self, namespace: str, pod: str) -> dict[str, Any]:
        if (namespace, pod) != (DEMO_NAMESPACE, DEMO_POD):
            raise Unavailable(f'not found: pods "{pod}" not found in namespace {namespace} (the demo has one pod)')
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError) as exc:
            raise Unavailable(f"the demo supervisor's state file is unreadable: {exc}") from None
        if not isinstance(state, dict):
            raise Unavailable("the demo supervisor's state file is not a JSON object")
        return state

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        state = self._state(namespace, name)
        status: dict[str, Any] = {
            "name": DEMO_CONTAINER,
            "restartCount": state.get("restarts", 0),
            "ready": bool(state.get("pid")),
        }
        status["state"] = (
            {"running": {"startedAt": _rfc3339(state.get("started_at"))}} if state.get("pid") else {"waiting": {}}
        )
        if state.get("last_terminated_reason"):
            status["lastState"] = {
                "terminated": {
                    "reason": state["last_terminated_reason"],
                    "exitCode": state.get("last_exit_code"),
                    "startedAt": _rfc3339(state.get("last_started_at")),
                    "finishedAt": _rfc3339(state.get("last_finished_at")),
                }
            }
        return {
            "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name},
            "status": {"containerStatuses": [status]},
        }

    def pods(self, namespace: str, label_selector: str) -> list[str]:
        return [DEMO_POD] if namespace == DEMO_NAMESPACE else []

    def events(self, namespace: str, pod: str) -> list[dict[str, Any]]:
        state = self._state(namespace, pod)
        involved = {
            "kind": "Pod",
            "namespace": namespace,
            "name": pod,
            "fieldPath": f"spec.containers{{{DEMO_CONTAINER}}}",
        }
        return [
            {
                "type": e.get("type"),
                "reason": e.get("reason"),
                "message": e.get("message"),
                "count": e.get("count"),
                "firstTimestamp": _rfc3339(e.get("first")),
                "lastTimestamp": _rfc3339(e.get("last")),
                "involvedObject": involved,
                "source": {"component": "kubelet"},
            }
            for e in state.get("events") or []
            if isinstance(e, dict)
        ]

    def previous_log(self, namespace: str, pod: str, container: str, tail_lines: int, limit_bytes: int) -> str:
        state = self._state(namespace, pod)
        path = state.get("previous_log")
        if not path:
            raise Unavailable(
                f'the API server refused: previous terminated container "{container}" in pod "{pod}" not found'
            )
        try:
            with Path(str(path)).open("rb") as handle:
                size = Path(str(path)).stat().st_size
                handle.seek(max(0, size - limit_bytes))
                text = handle.read(limit_bytes).decode("utf-8", errors="replace")
        except OSError as exc:
            raise Unavailable(f"the previous container's log is unreadable: {exc.strerror or exc}") from None
        return "\n".join(text.splitlines()[-tail_lines:]) if tail_lines else ""

    def exec(self, namespace: str, pod: str, container: str, command: list[str], timeout: float) -> str:
        raise Unavailable("the demo server has no GPU and no nvidia-smi to exec")
