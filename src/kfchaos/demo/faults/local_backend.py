"""The local fault backend: the Chaos Mesh backend's interface, acting on the embedded demo instead.

network-delay, network-loss, http-abort and http-delay become faults in the fault proxy (created
through its control API, each with its duration, so they expire by themselves); pod-kill kills the demo
server process (the supervisor restarts it, as a kubelet would). Other catalog types need a cluster and
are refused at preflight with a clear message.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfchaos.errors import KfchaosError
from kfchaos.faults.backend import TargetSweep
from kfchaos.faults.naming import check_run_id, object_name
from kfchaos.faults.safety import check_fault, fault_duration
from kfchaos.faultspec.kinds import check_known
from kfchaos.spec import Experiment, FaultBase
from kfchaos.steps.seams import fault_owner_pid

LOCAL_FAULT_TYPES = ("network-delay", "network-loss", "http-abort", "http-delay", "pod-kill")
check_known("kfchaos.demo.faults.local_backend LOCAL_FAULT_TYPES", LOCAL_FAULT_TYPES)


@dataclass
class LocalHandle:
    name: str
    fault: str
    type: str
    applied_at: float
    one_shot: bool = False
    record: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "fault": self.fault, "type": self.type, "applied_at": self.applied_at,
                "one_shot": self.one_shot, "record": self.record}  # fmt: skip


class LocalFaultBackend:
    def __init__(self, experiment: Experiment, run_id: str, control_url: str, server_state: Path) -> None:
        self.experiment = experiment
        self.run_id = run_id
        self.control_url = control_url.rstrip("/")
        self.server_state = server_state
        self.events: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ HTTP to the proxy

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.control_url}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, payload = response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, json.loads(exc.read() or b"null")
        except OSError as exc:
            self._event(method, path, None, str(exc))
            raise KfchaosError(f"fault proxy at {self.control_url} unreachable: {exc}") from None
        self._event(method, path, status)
        return status, payload

    def _event(self, verb: str, path: str, code: int | None, error: str | None = None) -> None:
        self.events.append({"time": time.time(), "verb": verb, "kind": "ProxyFault", "path": path, "code": code,
                            "error": error})  # fmt: skip

    # ------------------------------------------------------------------ FaultBackend

    def preflight(self, faults: list[FaultBase]) -> list[str]:
        notes = []
        for fault in faults:
            check_fault(self.experiment, fault)
            if fault.type not in LOCAL_FAULT_TYPES:
                raise KfchaosError(
                    f"fault {fault.name}: type {fault.type} needs a cluster; the local backend supports "
                    f"{', '.join(LOCAL_FAULT_TYPES)}"
                )
        status, _ = self._call("GET", "/faults")
        if status != 200:
            raise KfchaosError(f"fault proxy answered {status} to GET /faults")
        if not self._server_pid():
            raise KfchaosError("no demo server is running (the supervisor's state file has no pid)")
        notes.append(f"local backend: proxy {self.control_url}, server pid {self._server_pid()}")
        return notes

    def _server_pid(self) -> int | None:
        try:
            pid = json.loads(self.server_state.read_text()).get("pid")
        except (OSError, ValueError):
            return None
        return int(pid) if pid else None

    def apply(self, fault: FaultBase) -> LocalHandle:
        name = object_name(self.experiment.metadata.name, fault.name, self.run_id)
        params: Any = fault.params
        if fault.type == "pod-kill":
            pid = self._server_pid()
            if pid is None:
                raise KfchaosError("pod-kill: no demo server process to kill")
            os.kill(pid, signal.SIGKILL)
            self._event("KILL", f"pid/{pid}", 0)
            return LocalHandle(name, fault.name, fault.type, time.time(), one_shot=True, record={"pid": pid})
        body: dict[str, Any] = {
            "type": fault.type,
            "duration_s": fault_duration(self.experiment, fault),
            "labels": {"run_id": self.run_id, "experiment": self.experiment.metadata.name},
            # The proxy ends the fault if the run's owner dies before removing it (a SIGKILLed run).
            "owner_pid": fault_owner_pid(),
        }
        if fault.type == "network-delay":
            body.update(latency_s=params.latency, jitter_s=params.jitter)
        elif fault.type == "network-loss":
            body.update(share=params.loss)
        elif fault.type == "http-abort":
            body.update(code=params.code or 503, share=_share(fault))
        elif fault.type == "http-delay":
            body.update(latency_s=params.delay, share=_share(fault))
        status, payload = self._call("PUT", f"/faults/{name}", body)
        if status not in (200, 201):
            raise KfchaosError(f"fault proxy refused {fault.name}: {payload}")
        return LocalHandle(name, fault.name, fault.type, time.time(), record=payload)

    def wait_injected(self, handle: LocalHandle, timeout: float = 30.0) -> dict[str, Any]:
        if handle.one_shot:  # the SIGKILL was sent at apply time: that is when it took effect
            return {"injected": True, "targets": [f"pid/{handle.record['pid']}"], "injected_at": handle.applied_at}
        status, payload = self._call("GET", f"/faults/{handle.name}")
        if status != 200 or not payload.get("injected"):
            raise KfchaosError(f"fault {handle.fault} is not injected (proxy answered {status})")
        # The proxy applies a fault to requests from the moment it stored it (kfchaos.demo.faults.proxy, created_at).
        created = payload.get("created_at")
        return {"injected": True, "targets": ["fault-proxy"],
                "injected_at": float(created) if isinstance(created, int | float) else None}  # fmt: skip

    def handle_of(self, fault: FaultBase) -> LocalHandle:
        """The handle of a fault applied by an earlier stage's task (names are deterministic per run)."""
        name = object_name(self.experiment.metadata.name, fault.name, self.run_id)
        return LocalHandle(name, fault.name, fault.type, 0.0, one_shot=fault.type == "pod-kill")

    def is_active(self, handle: LocalHandle) -> bool:
        """The local equivalent of Chaos Mesh's AllInjected + desiredPhase Run: the proxy still holds the fault
        and says it has not expired (kfchaos.demo.faults.proxy drops a fault at created_at + duration_s, as Chaos
        Mesh stops one at creation + duration). A pod-kill is done once it was sent: it stays "applied"."""
        if handle.one_shot:
            return True
        status, payload = self._call("GET", f"/faults/{handle.name}")
        return status == 200 and isinstance(payload, dict) and bool(payload.get("injected"))

    def remove(self, handle: LocalHandle) -> None:
        if handle.one_shot:
            return
        status, _ = self._call("DELETE", f"/faults/{handle.name}")
        if status not in (200, 404):  # 404: it had expired already, which is also removed
            raise KfchaosError(f"removing {handle.fault} failed with {status}")

    def wait_recovered(self, handle: LocalHandle, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if handle.one_shot:
                pid = self._server_pid()
                if pid and pid != handle.record.get("pid"):
                    return
            elif self._call("GET", f"/faults/{handle.name}")[0] == 404:
                return
            time.sleep(0.2)
        raise KfchaosError(f"fault {handle.fault} did not recover within {timeout:g}s")

    def sweep(self, run_id: str | None = None) -> int:
        chosen = check_run_id(self.run_id if run_id is None else run_id)  # "" is refused, never "every run"
        status, payload = self._call("DELETE", "/faults?" + urllib.parse.urlencode({"run_id": chosen}))
        if status != 200:
            raise KfchaosError(f"sweep failed with {status}")
        return len(payload.get("deleted", []))

    def sweep_at_target(self, run_id: str) -> TargetSweep:
        """A takeover's sweep (kfchaos.faults.chaosmesh.ChaosMeshBackend.sweep_at_target): every fault of the run,
        as the fault proxy stands in front of one server, the target whose lock was taken over."""
        return TargetSweep(self.sweep(run_id))


def _share(fault: FaultBase) -> float:
    """HTTP faults hit a share of requests: the percent modes' value, else all."""
    if fault.mode in ("fixed-percent", "random-max-percent") and fault.value:
        return float(fault.value) / 100
    return 1.0
