"""`kfchaos run --host ... --wait`: follow a KFP run to its end, print each task as it finishes, read the
verdict from the run's audit artifact and turn it into the exit code `kfchaos verdict` gives.

Run and task states are KFP v2beta1's RuntimeState (kubeflow/pipelines backend/api/v2beta1/run.proto:
PENDING, RUNNING, SUCCEEDED, SKIPPED, FAILED, CANCELING, CANCELED, PAUSED); a run's tasks are
`run_details.task_details` (PipelineTaskDetail: task_id, display_name, state, end_time, ...). The audit
record is read through the API server's artifact endpoint
`GET /apis/v2beta1/runs/{run_id}/nodes/{node_id}/artifacts/{artifact_name}:read`, which answers
`{"data": "<base64 of the stored object>"}` (backend/src/apiserver/server/run_artifact_server.go); the node
id is the verdict task's `task_id`. A backend whose endpoint cannot serve a v2 launcher's artifacts (KFP 2.1.0
answers 404: kfchaos.kfp.objectstore says why) is read from its object store instead, when one is given
(`--artifact-store`); when neither answers the outcome is INCONCLUSIVE, never PASS.

Only a run that SUCCEEDED with a PASS verdict exits 0: a run that failed, was cancelled or timed out is
inconclusive whatever it reported, since its faults may not have been removed or its evidence completed.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kfchaos.errors import KfchaosError
from kfchaos.kfp.objectstore import ObjectStore, artifact_location

TERMINAL = {"SUCCEEDED", "SKIPPED", "FAILED", "CANCELED"}
VERDICT_TASK = "verdict-report"
AUDIT_ARTIFACT = "audit"
MAX_ARTIFACT = 16 << 20  # an audit record is kilobytes; refuse to hold an unbounded answer
EXIT_FOR = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 2}


@dataclass(frozen=True)
class ArtifactStore:
    """Where the run's launchers stored their artifacts, and the run's pipeline name (the IR's pipelineInfo)."""

    store: ObjectStore
    pipeline_root: str
    pipeline_name: str

    def audit(self, run_id: str) -> dict[str, Any]:
        bucket, key = artifact_location(self.pipeline_root, self.pipeline_name, run_id, VERDICT_TASK, AUDIT_ARTIFACT)
        return _record(self.store.read(bucket, key, MAX_ARTIFACT))


@dataclass(frozen=True)
class Followed:
    run_id: str
    state: str
    verdict: str  # PASS, FAIL, INCONCLUSIVE
    message: str

    @property
    def exit_code(self) -> int:
        return EXIT_FOR.get(self.verdict, 2)

    def summary(self) -> str:
        return f"{self.verdict}: {self.message} (run {self.run_id}, {self.state})"


def _state(value: Any) -> str:
    return str(value or "RUNTIME_STATE_UNSPECIFIED").upper()


def _tasks(run: Any) -> list[Any]:
    details = getattr(run, "run_details", None)
    return list(getattr(details, "task_details", None) or [])


def follow(
    client: Any,
    run_id: str,
    *,
    poll: float = 10.0,
    timeout: float = 12 * 3600.0,
    out: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    artifacts: ArtifactStore | None = None,
) -> Followed:
    """Poll the run until it ends (or `timeout`), printing each task once, when it reaches a final state."""
    deadline = clock() + timeout
    printed: set[str] = set()
    while True:
        run = client.get_run(run_id)
        for task in sorted(_tasks(run), key=lambda t: (str(getattr(t, "end_time", "") or ""), str(t.task_id))):
            state = _state(task.state)
            if state in TERMINAL and task.task_id not in printed:
                printed.add(task.task_id)
                out(f"task {task.display_name}: {state}")
        state = _state(run.state)
        if state in TERMINAL:
            return conclude(client, run, state, artifacts)
        if clock() >= deadline:
            return Followed(run_id, state, "INCONCLUSIVE", f"still {state} after {timeout:g}s; stopped waiting")
        sleep(poll)


def verdict_task(run: Any) -> Any | None:
    """The run's verdict task, when it succeeded (its audit artifact is then the run's record)."""
    return next((t for t in _tasks(run) if t.display_name == VERDICT_TASK and _state(t.state) == "SUCCEEDED"), None)


def run_state(run: Any) -> str:
    return _state(run.state)


def conclude(client: Any, run: Any, state: str, artifacts: ArtifactStore | None = None) -> Followed:
    run_id = str(run.run_id)
    task = verdict_task(run)
    if task is None:
        return Followed(run_id, state, "INCONCLUSIVE", f"the run ended {state} before its verdict")
    try:
        record = audit_record(client, run_id, str(task.task_id), artifacts)
        verdict = record["verdict"]
        status, reasons = str(verdict["status"]), [str(r) for r in verdict.get("reasons") or []]
    except (KfchaosError, KeyError, TypeError) as exc:
        return Followed(run_id, state, "INCONCLUSIVE", f"the verdict could not be read: {exc}")
    if status not in EXIT_FOR:
        return Followed(run_id, state, "INCONCLUSIVE", f"the audit record holds an unknown verdict {status!r}")
    message = "; ".join(reasons) or "all checks passed"
    if state != "SUCCEEDED" and status != "FAIL":
        # The verdict ran but the run did not succeed (e.g. removing faults failed): not trustworthy as PASS.
        return Followed(run_id, state, "INCONCLUSIVE", f"verdict {status} but the run ended {state}: {message}")
    return Followed(run_id, state, status, message)


def audit_record(client: Any, run_id: str, node_id: str, artifacts: ArtifactStore | None) -> dict[str, Any]:
    """The audit record through the API server, else (KFP 2.1.0) from the object store when one is given."""
    try:
        return read_audit(client, run_id, node_id)
    except KfchaosError as api_error:
        if artifacts is None:
            raise KfchaosError(
                f"{api_error}; a backend whose API cannot serve v2 artifacts (KFP 2.1.0) is read from its object "
                "store: give --artifact-store"
            ) from None
        try:
            return artifacts.audit(run_id)
        except KfchaosError as store_error:
            raise KfchaosError(f"{api_error}; from the object store: {store_error}") from None


def read_audit(client: Any, run_id: str, node_id: str) -> dict[str, Any]:
    """The verdict task's audit record through the API server, with the client's own credentials."""
    api = client._run_api.api_client  # kfp_server_api 2.x has no method for this HTTP-only endpoint
    try:
        response = api.call_api(
            "/apis/v2beta1/runs/{run_id}/nodes/{node_id}/artifacts/{artifact_name}:read",
            "GET",
            path_params={"run_id": run_id, "node_id": node_id, "artifact_name": AUDIT_ARTIFACT},
            header_params={"Accept": "application/json"},
            auth_settings=["Bearer"],
            _preload_content=False,
            _request_timeout=60,
        )
    except Exception as exc:
        status = getattr(exc, "status", None)
        raise KfchaosError(f"reading the audit artifact failed (HTTP {status or type(exc).__name__})") from None
    raw = response[0] if isinstance(response, tuple) else response
    body = raw.read(MAX_ARTIFACT + 1)
    if len(body) > MAX_ARTIFACT:
        raise KfchaosError(f"the audit artifact answer exceeds {MAX_ARTIFACT} bytes")
    try:
        data = base64.b64decode(json.loads(body)["data"], validate=True)
    except (ValueError, KeyError, TypeError):
        raise KfchaosError('the artifact endpoint did not answer {"data": base64}') from None
    return _record(data)


def _record(data: bytes) -> dict[str, Any]:
    """The JSON record: stored as is by the v2 launcher, or a gzipped tar holding one file (Argo artifacts)."""
    if data[:2] == b"\x1f\x8b":
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
                member = next((m for m in archive.getmembers() if m.isfile()), None)
                if member is None or member.size > MAX_ARTIFACT:
                    raise KfchaosError("the audit artifact archive holds no readable file")
                handle = archive.extractfile(member)
                data = handle.read(MAX_ARTIFACT) if handle else b""
        except (tarfile.TarError, gzip.BadGzipFile, EOFError):
            raise KfchaosError("the audit artifact is a broken archive") from None
    try:
        record = json.loads(data)
    except ValueError:
        raise KfchaosError("the audit artifact is not JSON") from None
    if not isinstance(record, dict):
        raise KfchaosError("the audit artifact is not a kfchaos audit record")
    return record
