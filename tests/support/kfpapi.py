"""A loopback KFP v2beta1 REST server: the paths the real `kfp.Client` calls, backed by dicts in memory.

It is a stand-in for the KFP API server, not a fake of our code: tests drive it with the unpatched `kfp.Client`
over HTTP on 127.0.0.1. Implemented: healthz; pipelines (list with filter, get, delete, upload, upload_version,
versions list/get/delete); experiments (create, list with filter, get); runs (create, get, list);
recurring runs (create, get, list, enable, disable, delete); the artifact read endpoint. Every request is
recorded in `requests` so tests can assert what the client sent.

Runs progress as the backend reports them (backend/api/v2beta1/run.proto): `state` is a RuntimeState
(PENDING, RUNNING, then SUCCEEDED / FAILED / CANCELED), `run_details.task_details` lists PipelineTaskDetail
objects (task_id, display_name, state, create/start/end_time, pod_name), `state_history` records each change
and `finished_at` is set at the end. Tests script a run with `plan` (the tasks in the order they finish and
their states) and `final_state`; each GET of the run advances it by one task, so no clock is involved.
`artifacts` holds (task display name, artifact name) -> stored bytes (`run_artifacts` the same for one run), served by
`GET /apis/v2beta1/runs/{run_id}/nodes/{node_id}/artifacts/{name}:read` as `{"data": base64}`, or 404 with
`{"error_message", "error_details"}` (backend/src/apiserver/server/run_artifact_server.go).
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import default as email_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

PREFIX = "/apis/v2beta1"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]  # names lower-cased


@dataclass
class KfpState:
    pipelines: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)  # version id -> version
    experiments: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    recurring: dict[str, dict[str, Any]] = field(default_factory=dict)


class ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _matches(item: dict[str, Any], raw_filter: str | None) -> bool:
    if not raw_filter:
        return True
    spec = json.loads(raw_filter)
    for predicate in spec.get("predicates", []):
        key = predicate.get("key")
        want = predicate.get("string_value", predicate.get("stringValue"))
        op = predicate.get("operation", predicate.get("op"))
        if op not in ("EQUALS", 1):
            raise ApiError(400, f"filter operation {op} not implemented by the loopback server")
        if item.get(key) != want:
            return False
    return True


class KfpApiServer:
    """Start with `with KfpApiServer() as api:`; `api.url` is the host for kfp.Client."""

    def __init__(self, tag_name: str = "2.15.0", multi_user: bool = False) -> None:
        # What the API server's healthz reports about itself: its release tag and mode (the fields
        # kubeflow/pipelines frontend/server/handlers/healthz.ts reads from it: commit_sha, tag_name,
        # multi_user, pipeline_store).
        self.tag_name = tag_name
        self.multi_user = multi_user
        self.state = KfpState()
        self.plan: list[tuple[str, str]] = []  # (task display name, final task state), in finishing order
        self.final_state = "SUCCEEDED"
        self.artifacts: dict[tuple[str, str], bytes] = {}
        # (run id, task display name, artifact name) -> bytes: one run's own artifact, before `artifacts`.
        self.run_artifacts: dict[tuple[str, str, str], bytes] = {}
        self.requests: list[Recorded] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                split = urlsplit(self.path)
                query = parse_qs(split.query)
                try:
                    with server._lock:
                        code, payload = server.handle(
                            method,
                            split.path,
                            query,
                            body,
                            self.headers.get("Content-Type", ""),
                            {k.lower(): v for k, v in self.headers.items()},
                        )
                except ApiError as exc:
                    code, payload = exc.code, {"error": str(exc), "code": exc.code, "message": str(exc)}
                except Exception as exc:  # a bug here must reach the test as a 500, not a dropped connection
                    code, payload = 500, {"error": repr(exc), "code": 500, "message": repr(exc)}
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> KfpApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    # ------------------------------------------------------------------ helpers

    def _id(self, kind: str) -> str:
        return f"{kind}-{next(self._ids):04d}"

    @staticmethod
    def _upload(body: bytes, content_type: str) -> bytes:
        message = BytesParser(policy=email_policy).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
        )
        for part in message.iter_parts():
            if part.get_param("name", header="content-disposition") == "uploadfile":
                data: bytes = part.get_payload(decode=True)
                return data
        raise ApiError(400, "upload needs a multipart field uploadfile")

    def _new_version(self, pipeline_id: str, name: str, package: bytes) -> dict[str, Any]:
        if any(v["pipeline_id"] == pipeline_id and v["display_name"] == name for v in self.state.versions.values()):
            raise ApiError(409, f"pipeline version {name!r} already exists")
        version_id = self._id("version")
        version = {
            "pipeline_id": pipeline_id,
            "pipeline_version_id": version_id,
            "display_name": name,
            "name": name,
            "created_at": _now(),
            "pipeline_spec": next(yaml.safe_load_all(package.decode())),
        }
        self.state.versions[version_id] = version
        return version

    def _list(self, items: list[dict[str, Any]], key: str, query: dict[str, list[str]]) -> dict[str, Any]:
        raw_filter = query.get("filter", [None])[0]
        found = [i for i in items if _matches(i, raw_filter)]
        return {key: found, "total_size": len(found)} if found else {"total_size": 0}

    # ------------------------------------------------------------------ routing

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes, content_type: str, headers: Any
    ) -> tuple[int, Any]:
        parsed: Any = None
        if body and content_type.startswith("application/json"):
            parsed = json.loads(body)
        self.requests.append(Recorded(method, path, query, parsed, headers))
        if path in (f"{PREFIX}/healthz", "/apis/v1beta1/healthz") and method == "GET":
            return 200, {
                "commit_sha": "0" * 40,
                "tag_name": self.tag_name,
                "multi_user": self.multi_user,
                "pipeline_store": "database",
            }
        if not path.startswith(PREFIX):
            raise ApiError(404, f"unknown path {path}")
        parts = path[len(PREFIX) :].strip("/").split("/")
        s = self.state
        first = lambda name: query.get(name, [None])[0]  # noqa: E731

        # pipelines and their versions
        if parts == ["pipelines", "upload"] and method == "POST":
            name = first("name") or first("display_name")
            if not name:
                raise ApiError(400, "pipeline name is required")
            if any(p["display_name"] == name for p in s.pipelines.values()):
                raise ApiError(409, f"pipeline {name!r} already exists")
            package = self._upload(body, content_type)
            pipeline_id = self._id("pipeline")
            s.pipelines[pipeline_id] = {
                "pipeline_id": pipeline_id,
                "display_name": name,
                "name": name,
                "description": first("description") or "",
                "created_at": _now(),
            }
            # The real backend's first-upload quirk: the first version is named after the pipeline.
            self._new_version(pipeline_id, name, package)
            return 200, s.pipelines[pipeline_id]
        if parts == ["pipelines", "upload_version"] and method == "POST":
            pipeline_id = first("pipelineid")
            if pipeline_id not in s.pipelines:
                raise ApiError(404, f"pipeline {pipeline_id} not found")
            name = first("name") or first("display_name")
            if not name:
                raise ApiError(400, "version name is required")
            return 200, self._new_version(pipeline_id, name, self._upload(body, content_type))
        if parts == ["pipelines"] and method == "GET":
            return 200, self._list(list(s.pipelines.values()), "pipelines", query)
        if len(parts) >= 2 and parts[0] == "pipelines":
            pipeline_id = parts[1]
            if pipeline_id not in s.pipelines:
                raise ApiError(404, f"pipeline {pipeline_id} not found")
            if len(parts) == 2 and method == "GET":
                return 200, s.pipelines[pipeline_id]
            if len(parts) == 3 and parts[2] == "versions" and method == "GET":
                versions = [v for v in s.versions.values() if v["pipeline_id"] == pipeline_id]
                return 200, self._list(versions, "pipeline_versions", query)
            if len(parts) == 4 and parts[2] == "versions":
                version = s.versions.get(parts[3])
                if version is None or version["pipeline_id"] != pipeline_id:
                    raise ApiError(404, f"pipeline version {parts[3]} not found")
                if method == "GET":
                    return 200, version
                if method == "DELETE":
                    del s.versions[parts[3]]
                    return 200, {}

        # experiments
        if parts == ["experiments"] and method == "POST":
            name = parsed.get("display_name")
            if any(e["display_name"] == name for e in s.experiments.values()):
                raise ApiError(409, f"experiment {name!r} already exists")
            experiment_id = self._id("experiment")
            s.experiments[experiment_id] = {
                "experiment_id": experiment_id,
                "display_name": name,
                "description": parsed.get("description") or "",
                "namespace": parsed.get("namespace") or "",
                "storage_state": "AVAILABLE",
                "created_at": _now(),
            }
            return 200, s.experiments[experiment_id]
        if parts == ["experiments"] and method == "GET":
            return 200, self._list(list(s.experiments.values()), "experiments", query)
        if len(parts) == 2 and parts[0] == "experiments" and method == "GET":
            if parts[1] not in s.experiments:
                raise ApiError(404, f"experiment {parts[1]} not found")
            return 200, s.experiments[parts[1]]

        # runs
        if parts == ["runs"] and method == "POST":
            self._check_reference(parsed)
            run_id = self._id("run")
            s.runs[run_id] = {
                **parsed,
                "run_id": run_id,
                "state": "PENDING",
                "created_at": _now(),
                "state_history": [{"update_time": _now(), "state": "PENDING"}],
                "run_details": {"task_details": []},
            }
            return 200, s.runs[run_id]
        if parts == ["runs"] and method == "GET":
            # ListRunsRequest.experiment_id (backend/api/v2beta1/run.proto): the runs of one experiment only.
            experiment = query.get("experiment_id", [None])[0]
            items = [r for r in s.runs.values() if not experiment or r.get("experiment_id") == experiment]
            return 200, self._list(items, "runs", query)
        if len(parts) == 2 and parts[0] == "runs" and method == "GET":
            if parts[1] not in s.runs:
                raise ApiError(404, f"run {parts[1]} not found")
            self._advance(s.runs[parts[1]])
            return 200, s.runs[parts[1]]
        if len(parts) == 6 and parts[0] == "runs" and parts[2] == "nodes" and parts[4] == "artifacts":
            return self._read_artifact(parts[1], parts[3], parts[5].removesuffix(":read"))

        # recurring runs
        if parts == ["recurringruns"] and method == "POST":
            self._check_reference(parsed)
            recurring_id = self._id("recurring")
            mode = parsed.get("mode") or "ENABLE"
            s.recurring[recurring_id] = {
                **parsed,
                "recurring_run_id": recurring_id,
                "mode": mode,
                "status": "ENABLED" if mode == "ENABLE" else "DISABLED",
                "created_at": _now(),
                "updated_at": _now(),
            }
            return 200, s.recurring[recurring_id]
        if parts == ["recurringruns"] and method == "GET":
            items = list(s.recurring.values())
            experiment_id = first("experiment_id")
            if experiment_id:
                items = [r for r in items if r.get("experiment_id") == experiment_id]
            return 200, self._list(items, "recurringRuns", query)
        if len(parts) == 2 and parts[0] == "recurringruns":
            recurring_id, _, action = parts[1].partition(":")
            if recurring_id not in s.recurring:
                raise ApiError(404, f"recurring run {recurring_id} not found")
            item = s.recurring[recurring_id]
            if method == "GET" and not action:
                return 200, item
            if method == "DELETE" and not action:
                del s.recurring[recurring_id]
                return 200, {}
            if method == "POST" and action in ("enable", "disable"):
                item["mode"] = "ENABLE" if action == "enable" else "DISABLE"
                item["status"] = "ENABLED" if action == "enable" else "DISABLED"
                item["updated_at"] = _now()
                return 200, {}
        raise ApiError(404, f"{method} {path} is not implemented by the loopback KFP server")

    def _set_state(self, run: dict[str, Any], state: str) -> None:
        run["state"] = state
        run["state_history"].append({"update_time": _now(), "state": state})

    def _advance(self, run: dict[str, Any]) -> None:
        """One step of the scripted run: start it, finish the next task, or end it."""
        if run["state"] in ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED"):
            return
        if run["state"] == "PENDING":
            self._set_state(run, "RUNNING")
            return
        tasks = run["run_details"]["task_details"]
        if len(tasks) < len(self.plan):
            name, state = self.plan[len(tasks)]
            index = len(tasks) + 1
            tasks.append(
                {
                    "run_id": run["run_id"],
                    "task_id": f"{run['run_id']}-node-{index}",
                    "display_name": name,
                    "create_time": _now(),
                    "start_time": _now(),
                    "end_time": _now(),
                    "state": state,
                    "pod_name": f"{run['run_id']}-{name}-{index}",
                    "state_history": [{"update_time": _now(), "state": state}],
                }
            )
            return
        self._set_state(run, self.final_state)
        run["finished_at"] = _now()

    def _read_artifact(self, run_id: str, node_id: str, name: str) -> tuple[int, Any]:
        run = self.state.runs.get(run_id)
        task = next((t for t in (run or {}).get("run_details", {}).get("task_details", []) if t["task_id"] == node_id),
                    None)  # fmt: skip
        data = None
        if task:
            data = self.run_artifacts.get(
                (run_id, task["display_name"], name), self.artifacts.get((task["display_name"], name))
            )
        if data is None:
            message = f"Failed to read artifact: artifact {name} of node {node_id} in run {run_id} not found"
            return 404, {"error_message": message, "error_details": message}
        return 200, {"data": base64.b64encode(data).decode()}

    def _check_reference(self, body: dict[str, Any]) -> None:
        reference = body.get("pipeline_version_reference")
        if reference:
            version = self.state.versions.get(reference.get("pipeline_version_id", ""))
            if version is None or version["pipeline_id"] != reference.get("pipeline_id"):
                raise ApiError(404, f"pipeline version {reference} not found")
        elif not body.get("pipeline_spec"):
            raise ApiError(400, "a run needs pipeline_version_reference or pipeline_spec")
        if body.get("experiment_id") and body["experiment_id"] not in self.state.experiments:
            raise ApiError(404, f"experiment {body['experiment_id']} not found")
