"""The Kubernetes side of the bundle: the pod's status (containerStatuses[].lastState.terminated), its events,
the killed container's previous log and, opt-in, a command in the serving pod -- through the real API
(kubernetes client) or, in the embedded demo, from the supervisor (kfchaos.demo.faults.kubeview).

The calls and what the API server answers (kubernetes/kubernetes):
- GET /api/v1/namespaces/{ns}/pods/{pod}: the Pod; lastState.terminated holds reason, exitCode, startedAt,
  finishedAt of the previous container (staging/src/k8s.io/api/core/v1/types.go ContainerStateTerminated).
- GET /api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name={pod}: core/v1 events of the pod
  (the selectable fields are pkg/apis/core/v1/conversion.go AddFieldLabelConversionsForEvent); the kubelet's
  reasons are pkg/kubelet/events/event.go (Killing, BackOff, Started, Created, ...).
- GET .../pods/{pod}/log?container=&previous=true&tailLines=&limitBytes=: text/plain, the previous container's
  log; 400 "previous terminated container ... not found" when there is none (pkg/kubelet/kubelet_pods.go
  validateContainerLogStatus). Needs `get pods/log`, deliberately not granted by manifests/ (model logs can
  hold prompts): manifests/optional/evidence-logs.yaml grants it.
- pods/exec (websocket, v4.channel.k8s.io): `create pods/exec`, manifests/optional/evidence-exec.yaml, and the
  experiment's spec.evidence.exec_nvidia_smi (default off).
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from kfchaos.errors import KfchaosError

TIMEOUT = 10.0  # seconds per API call
EVENT_LIMIT = 200  # events listed per pod (the API server pages with `limit`)


class Unavailable(KfchaosError):
    """The evidence cannot be read; the message says why (RBAC denied, pod gone, no previous container)."""


class KubeReader(Protocol):
    source: str

    def pod(self, namespace: str, name: str) -> dict[str, Any]: ...
    def pods(self, namespace: str, label_selector: str) -> list[str]: ...
    def events(self, namespace: str, pod: str) -> list[dict[str, Any]]: ...
    def previous_log(self, namespace: str, pod: str, container: str, tail_lines: int, limit_bytes: int) -> str: ...
    def exec(self, namespace: str, pod: str, container: str, command: list[str], timeout: float) -> str: ...


_HANDSHAKE = re.compile(r"Handshake status (\d{3})")


def explain(exc: Exception, verb: str, resource: str, namespace: str, grant: str = "") -> str:
    """Why a call failed, in the words an operator acts on."""
    status = getattr(exc, "status", None)
    reason = str(getattr(exc, "reason", "") or exc)
    if status == 0:  # the websocket client reports a refused upgrade as status 0 with the handshake status
        found = _HANDSHAKE.search(reason)
        status = int(found.group(1)) if found else None
    body = getattr(exc, "body", None)
    message = ""
    if body:
        try:
            message = str(json.loads(body).get("message", ""))
        except (ValueError, AttributeError):
            message = str(body)[:300]
    if status == 403:
        hint = f"; {grant}" if grant else ""
        return f"RBAC denied: the run's identity may not {verb} {resource} in namespace {namespace}{hint}"
    if status == 404:
        return f"not found: {message or reason} (the pod may be gone)"
    if status == 400:
        return f"the API server refused: {message or reason}"
    if status is None:
        return f"API server unreachable: {reason[:300]}"
    return f"API error {status}: {(message or reason)[:300]}"


class ClusterKube:
    """The real API through a kubernetes ApiClient (in-cluster config or kubeconfig, or one given)."""

    def __init__(self, api_client: Any) -> None:
        import kubernetes.client

        self.api_client = api_client
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.source = f"Kubernetes API {api_client.configuration.host}"

    @classmethod
    def from_environment(cls) -> ClusterKube | None:
        try:
            from kubernetes.config.config_exception import ConfigException

            from kfchaos import kubeconnect
        except ImportError:
            return None
        try:
            return cls(kubeconnect.api_client())
        except (ConfigException, OSError, TypeError, ValueError):
            return None

    def _json(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # Untyped JSON: the typed models refuse fields a newer API server adds; we read a few keys.
        response = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
        body = json.loads(response.data or b"{}")
        return body if isinstance(body, dict) else {}

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return self._json(self.core.read_namespaced_pod, name, namespace)
        except Exception as exc:  # ApiException, urllib3 errors, bad JSON
            raise Unavailable(explain(exc, "get", "pods", namespace)) from None

    def pods(self, namespace: str, label_selector: str) -> list[str]:
        try:
            body = self._json(self.core.list_namespaced_pod, namespace, label_selector=label_selector, limit=100)
        except Exception as exc:
            raise Unavailable(explain(exc, "list", "pods", namespace)) from None
        items = body.get("items")
        if not isinstance(items, list):
            return []
        return [
            str(p["metadata"]["name"]) for p in items if isinstance(p, dict) and (p.get("metadata") or {}).get("name")
        ]

    def events(self, namespace: str, pod: str) -> list[dict[str, Any]]:
        try:
            body = self._json(
                self.core.list_namespaced_event,
                namespace,
                field_selector=f"involvedObject.name={pod}",
                limit=EVENT_LIMIT,
            )
        except Exception as exc:
            raise Unavailable(explain(exc, "list", "events", namespace)) from None
        items = body.get("items")
        return [e for e in items if isinstance(e, dict)] if isinstance(items, list) else []

    def previous_log(self, namespace: str, pod: str, container: str, tail_lines: int, limit_bytes: int) -> str:
        try:
            response = self.core.read_namespaced_pod_log(
                pod,
                namespace,
                container=container,
                previous=True,
                tail_lines=tail_lines,
                limit_bytes=limit_bytes,
                _preload_content=False,
                _request_timeout=TIMEOUT,
            )
            raw: bytes = response.data[:limit_bytes]
        except Exception as exc:
            grant = "model logs may hold prompts, so manifests/ grants it only in manifests/optional/evidence-logs.yaml"
            raise Unavailable(explain(exc, "get", "pods/log", namespace, grant)) from None
        return raw.decode("utf-8", errors="replace")

    def exec(self, namespace: str, pod: str, container: str, command: list[str], timeout: float) -> str:
        from kubernetes.stream import stream
        from kubernetes.stream.ws_client import ERROR_CHANNEL

        try:
            client = stream(
                self.core.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                container=container or None,
                command=command,
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
                _preload_content=False,
            )
            client.run_forever(timeout=timeout)
            out = str(client.read_stdout(timeout=0) or "") if client.peek_stdout() else ""
            error = client.read_channel(ERROR_CHANNEL)
            client.close()
        except Exception as exc:
            grant = "manifests/optional/evidence-exec.yaml grants it"
            raise Unavailable(explain(exc, "create", "pods/exec", namespace, grant)) from None
        status = _exec_status(error)
        if status is not None:
            raise Unavailable(f"{' '.join(command[:1])} in {pod}/{container} failed: {status}")
        return out


def _exec_status(error: str) -> str | None:
    """The v4 error channel carries a metav1.Status: Success, or Failure with the reason (exit code)."""
    if not error:
        return None
    try:
        status = json.loads(error)
    except ValueError:
        return error[:300]
    if status.get("status") == "Success":
        return None
    return str(status.get("message") or status.get("reason") or "exec failed")[:300]
