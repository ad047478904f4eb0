"""The target's Lease on the API server: coordination.k8s.io/v1 `leases` in the target's namespace, read with get and
written with create and update (PUT with the resourceVersion read: 409 Conflict when another writer came first, as
client-go's LeaseLock.Update relies on: tools/leaderelection/resourcelock/leaselock.go). The run identity's Role
grants exactly these three verbs on leases in each target namespace (manifests/target-namespace/role.yaml).

Answers are read raw (no typed model: a Lease's MicroTime fields and kfchaos's annotations are parsed by
kfchaos.lease.record) and bounded (kfchaos.netsafe.AnswerLimit): a Lease is a few KiB; the API server holds an
object's annotations to 256 KiB in all.
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

from kfchaos import netsafe
from kfchaos.errors import KfchaosError
from kfchaos.kubeconnect import api_error_message
from kfchaos.lease.queue import Conflict, LeaseUnavailable

MAX_LEASE_BYTES = 1 << 20


class LeaseForbidden(KfchaosError):
    """The run identity may not make this call on leases (RBAC): a setup problem, not worth a retry."""


class KubeLeaseStore:
    def __init__(self, api_client: kubernetes.client.ApiClient, namespace: str, name: str, timeout: float = 10.0):
        self.api = kubernetes.client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.timeout = timeout

    @property
    def where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def get(self) -> dict[str, Any] | None:
        try:
            return self._call("get", lambda kw: self.api.read_namespaced_lease(self.name, self.namespace, **kw))
        except _NotFound:
            return None

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._call("create", lambda kw: self.api.create_namespaced_lease(self.namespace, obj, **kw))

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._call("update", lambda kw: self.api.replace_namespaced_lease(self.name, self.namespace, obj, **kw))

    def _call(self, verb: str, call: Any) -> dict[str, Any]:
        # A (connect, read) pair: the client drops a float timeout given alone (kubernetes/client/rest.py).
        kw = {"_preload_content": False, "_request_timeout": (self.timeout, self.timeout)}
        try:
            with netsafe.AnswerLimit(MAX_LEASE_BYTES):
                answer = call(kw)
                data = answer.data
        except ApiException as exc:
            raise self._error(verb, exc) from None
        except netsafe.AnswerTooLarge as exc:
            raise KfchaosError(f"{verb} {self.where}: {exc}: not an answer the API server gives") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise LeaseUnavailable(f"{verb} {self.where}: the Kubernetes API did not answer ({exc})") from None
        try:
            parsed = json.loads(data or b"{}")
        except (ValueError, RecursionError):
            raise LeaseUnavailable(f"{verb} {self.where}: the answer is not JSON") from None
        if not isinstance(parsed, dict):
            raise LeaseUnavailable(f"{verb} {self.where}: the answer is not a JSON object")
        return parsed

    def _error(self, verb: str, exc: ApiException) -> Exception:
        message = api_error_message(exc)
        if exc.status == 404 and verb == "get":
            return _NotFound()
        if exc.status == 409:
            return Conflict(f"{verb} {self.where}: {message}")
        if exc.status == 403:
            return LeaseForbidden(
                f"{verb} leases.coordination.k8s.io in namespace {self.namespace!r} was refused ({message}): the run "
                "identity needs get, create and update on leases there (manifests/target-namespace/role.yaml; "
                "`kfchaos doctor` lists what it lacks)"
            )
        if exc.status in (429, 500, 502, 503, 504) or not exc.status:
            return LeaseUnavailable(f"{verb} {self.where}: {exc.status} {message}")
        return KfchaosError(f"{verb} {self.where} failed with {exc.status}: {message}")


class _NotFound(Exception):
    pass
