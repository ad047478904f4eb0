"""A loopback Kubernetes API server for tests: real HTTP on 127.0.0.1, driven by the real kubernetes client.

It stores objects and serves the REST paths kfchaos calls: CRDs (apiextensions.k8s.io/v1, the real Chaos
Mesh CRDs vendored in src/kfchaos/data/chaos-mesh/crds/), namespaced and cluster-wide custom objects of
chaos-mesh.org/v1alpha1 (create with dryRun=All, get, list with labelSelector, merge-patch, delete), pods
(create, get, list, delete), events (list, with fieldSelector and limit), the pods/log subresource
(previous, tailLines, limitBytes), pods/exec over a websocket (`exec_handler` answers the command) and
containers that restart (`restart_container`: restartCount and
lastState.terminated, the current log becoming the previous one), and coordination.k8s.io/v1 leases (get, list,
create, update with the API server's optimistic concurrency: `_serve_leases`). Created chaos objects are validated
against their CRD's schema with unknown fields as errors, as the API server does under fieldValidation=Strict.

It also plays the Chaos Mesh controller, computed lazily from clocks so no background thread is needed:
`inject_delay` seconds after creation the controller selects its targets *once* and keeps the records
(`status.experiment.containerRecords`: `ns/pod` for pod kinds, `ns/pod/container` for container kinds,
Containers[0] without containerNames), `Selected`/`AllInjected` turn True and stay True on the old records
whatever happens to the pods later; the `chaos-mesh/records` finalizer is added after the create (never in
its response, never on a dry run); a deleted object stays Terminating until every record has recovered to
"Not Injected" (`finalizer_delay` seconds after the delete, never while `stall_recovery` holds it) or the
annotation `chaos-mesh.chaos-mesh.org/cleanFinalizer: forced` is set while no Recover fails (a stalled object,
and one whose record never injected, stays until its finalizer is removed); an object whose `spec.duration` ran
out is recovered (AllRecovered, desiredPhase Stop). Created pods turn Running and ready after `inject_delay`.

For `kfchaos doctor` it serves namespaces, nodes, secrets, configmaps, serviceaccounts, deployments and
daemonsets (get, list;
stored with `add_object`), and answers authorization.k8s.io/v1 SubjectAccessReview and SelfSubjectAccessReview
as the real API does (see `_access_review`), deciding with the RBAC objects in `rbac` (tests/support/rbac.py).

It also plays the rest of Chaos Mesh and Kubernetes that decides whether a fault can land (each cited where
modelled): the validating webhooks v<kind>.kb.io (kfchaos.faultspec.admission, checked against the real ones by
tests/cluster) and vauth.kb.io, also on
dry runs; the selector's pod count (ceil for fixed-percent, a draw for random-max-percent); the chaos-daemon
DaemonSet placed by node taints and the chart's tolerations; the NamespaceLifecycle plugin for a namespace
being deleted (`delete_namespace`); the kubelet rejecting a pinned pod without a free nvidia.com/gpu; and a
server clock (`clock_offset`) for timestamps and the Date header.

And it fails on request: `fail(status, ...)` injects 409/429/500/503/... responses (optionally after the
request took effect, as when a response is lost), `forbid(verb, plural)` answers 403, and `installed`
chooses which CRDs exist.

    with KubeApiServer(inject_delay=0.2) as server:
        api = kubernetes_client(server.url)
        ...
        assert server.objects("networkchaos") == []
"""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import itertools
import json
import math
import re
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes.client

from kfchaos.faultspec.admission import mutated, webhook_problems
from kfchaos.faultspec.crdschema import CHAOS_GROUP, CHAOS_VERSION, CRD_DIR, load_crds, validate_chaos_object

CHAOS_FINALIZER = "chaos-mesh/records"
# controllers/common/finalizers/controller.go AnnotationCleanFinalizer / AnnotationCleanFinalizerForced
CLEAN_FINALIZER_ANNOTATION = "chaos-mesh.chaos-mesh.org/cleanFinalizer"
ONE_SHOT_ACTIONS = {"pod-kill", "container-kill"}

# ---------------------------------------------------------------- label selectors


def _split_selector(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def label_selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Kubernetes label selector syntax: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`."""
    if not selector:
        return True
    for term in _split_selector(selector):
        set_match = re.match(r"^([^\s!=]+)\s+(in|notin)\s+\((.*)\)$", term)
        if set_match:
            key, op, raw = set_match.groups()
            values = {v.strip() for v in raw.split(",")}
            if (op == "in") != (labels.get(key) in values) or (op == "in" and key not in labels):
                return False
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def _chaos_selector_matches(selector: dict[str, Any], namespace: str, labels: dict[str, str]) -> bool:
    if selector.get("namespaces") and namespace not in selector["namespaces"]:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("labelSelectors") or {}).items()):
        return False
    for expression in selector.get("expressionSelectors") or []:
        key, op, values = expression["key"], expression["operator"], set(expression.get("values") or [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True


# ---------------------------------------------------------------- the server


@dataclass
class FailureRule:
    """Answer matching requests with `status` instead of serving them (or after serving, if after_commit)."""

    status: int
    method: str | None = None
    path_contains: str | None = None
    times: int = 1  # how many matching requests fail; -1 for all of them
    after_commit: bool = False  # the request takes effect, then the response is an error (a lost reply)
    retry_after: int | None = None
    hits: int = 0
    query_contains: str | None = None  # e.g. "continue=": only a list's later pages; "watch=": only watches
    message: str | None = None  # the Status message (default: "injected failure <status>")

    def matches(self, method: str, path: str, query: str = "") -> bool:
        if self.times >= 0 and self.hits >= self.times:
            return False
        if self.method is not None and self.method != method:
            return False
        if self.query_contains is not None and self.query_contains not in query:
            return False
        return self.path_contains is None or self.path_contains in path


# Kinds whose Apply does not go through chaos-daemon: pod-kill and pod-failure call the API server only
# (controllers/chaosimpl/podchaos/podkill/impl.go, podfailure/impl.go).
_NO_DAEMON = {("PodChaos", "pod-kill"), ("PodChaos", "pod-failure")}
MAX_EVENTS = 100  # events kept per record (pkg/config/controller.go MaxEvents, default 100)


# Kinds whose Apply first writes a per-pod object (PodNetworkChaos, PodIOChaos, PodHttpChaos) that chaos-daemon
# syncs, and waits in "Not Injected/Wait" for it (controllers/chaosimpl/networkchaos/trafficcontrol/impl.go,
# networkchaos/partition/impl.go, iochaos/impl.go, httpchaos/impl.go: `waitForApplySync`); a failed sync keeps the
# record there. The others' Apply returns "Not Injected" with its error (e.g. stresschaos/impl.go).
_WAITING_KINDS = {"NetworkChaos", "IOChaos", "HTTPChaos"}


def _failed_apply_phase(kind: str) -> str:
    return "Not Injected/Wait" if kind in _WAITING_KINDS else "Not Injected"


def _never_injected(record: dict[str, Any]) -> bool:
    """A record whose Apply never succeeded and is retried, stopped or not (what the fake makes for a target
    without chaos-daemon)."""
    return str(record.get("phase", "")).startswith("Not Injected/") and not record.get("injectedCount")


def _failed_apply(message: str, stamp: str) -> dict[str, str]:
    return {"type": "Failed", "operation": "Apply", "message": message, "timestamp": stamp}


@dataclass
class _Stored:
    body: dict[str, Any]
    created: float  # monotonic
    deleting: float | None = None
    # A chaos object's records, made once when the controller first selects (None until then), and the
    # error its Recover keeps returning when the fault cannot be undone (`stall_recovery`).
    records: list[dict[str, Any]] | None = None
    stalled: str | None = None


_CLUSTER_SCOPED = {"namespaces", "nodes"}
_READ_ONLY = {"secrets", "configmaps", "serviceaccounts", "deployments", "daemonsets"}
_STORED_KINDS = {
    "namespaces": ("v1", "Namespace"),
    "nodes": ("v1", "Node"),
    "secrets": ("v1", "Secret"),
    "configmaps": ("v1", "ConfigMap"),
    "serviceaccounts": ("v1", "ServiceAccount"),
    "deployments": ("apps/v1", "Deployment"),
    "daemonsets": ("apps/v1", "DaemonSet"),
}
_VERB_OF_METHOD = {"GET": "get", "POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}
_REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "AlreadyExists",
    410: "Expired",  # metav1.StatusReasonExpired: an expired list continue token or watch resourceVersion
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


@dataclass
class KubeApiServer:
    """A threaded loopback API server. Use as a context manager; settings may be changed while it runs."""

    inject_delay: float = 0.0
    finalizer_delay: float = 0.0
    installed: Iterable[str] | None = None  # CRD plurals present; None: every CRD in crd_dir
    crd_dir: Path = CRD_DIR
    validate: bool = True
    requests: list[tuple[str, str]] = field(default_factory=list)
    # RBAC objects (Role, ClusterRole, RoleBinding, ClusterRoleBinding) access reviews are decided by, and the
    # identity the requests come as (for SelfSubjectAccessReview): kubeadm's admin is in system:masters.
    rbac: list[dict[str, Any]] = field(default_factory=list)
    user: str = "kubernetes-admin"
    groups: tuple[str, ...] = ("system:masters", "system:authenticated")
    # Chaos Mesh's admission webhooks: the validating ones per kind (`webhooks`) and vauth.kb.io, on in the
    # Helm chart's default controllerManager.securityMode (`security_mode`); see _admission.
    webhooks: bool = True
    security_mode: bool = True
    # random-max-percent draws a percentage in [0, max] (pkg/selector/generic/mode.go); a test fixes the draw
    # as a function of (max, object name), default: the max.
    random_percent: Any = None
    # Chaos Mesh's chaos-daemon DaemonSet (helm/chaos-mesh/templates/chaos-daemon-daemonset.yaml) with the
    # chart's tolerations (`chaosDaemon.tolerations`, [] by default): the server plays the DaemonSet
    # controller, keeping one Running daemon pod in `chaos_namespace` on every node (stored nodes and the
    # nodes of added pods) whose NoSchedule/NoExecute taints it tolerates.
    chaos_daemon: bool = True
    daemon_tolerations: list[dict[str, Any]] = field(default_factory=list)
    chaos_namespace: str = "chaos-mesh"
    # The server's clock minus the local one (seconds): creationTimestamp, deletionTimestamp and the HTTP
    # Date header (Go's net/http sets it on every response) come from the server's clock.
    clock_offset: float = 0.0
    # pods/exec: (namespace, pod, container, command) -> (stdout, exit code), or None for "not found" (the
    # command is not in the image); unset, every exec answers exit code 126.
    exec_handler: Any = None

    def __post_init__(self) -> None:
        self._crds = load_crds(self.crd_dir)
        self.installed = set(self._crds if self.installed is None else self.installed)
        self._store: dict[tuple[str, str, str], _Stored] = {}
        self._events: list[dict[str, Any]] = []
        self._logs: dict[tuple[str, str, str], dict[str, str | None]] = {}
        self._rules: list[FailureRule] = []
        self._forbidden: set[tuple[str, str]] = set()
        self._denials: list[list[Any]] = []
        self._terminating: set[str] = set()
        self._floods: dict[tuple[str, str], int] = {}
        self._lock = threading.RLock()
        self._versions = itertools.count(1000)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> KubeApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        handler = functools.partial(_Handler, self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="kubeapi", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    # ------------------------------------------------------------ test controls

    def fail(
        self,
        status: int,
        method: str | None = None,
        path_contains: str | None = None,
        times: int = 1,
        after_commit: bool = False,
        retry_after: int | None = None,
        query_contains: str | None = None,
        message: str | None = None,
    ) -> FailureRule:
        rule = FailureRule(status, method, path_contains, times, after_commit, retry_after)
        rule.query_contains, rule.message = query_contains, message
        with self._lock:
            self._rules.append(rule)
        return rule

    def flood_records(self, namespace: str, name: str, count: int) -> None:
        """Serve the chaos object `namespace/name` (in gets and lists) with `count` containerRecords, streamed as they
        are written, never held: what no real API server can hold (etcd stores at most 1.5 MiB a value by default)
        but a broken or hostile one, or a proxy, can send; the conditions stay as the controller made them."""
        with self._lock:
            self._floods[(namespace, name)] = count

    def clear_failures(self) -> None:
        with self._lock:
            self._rules.clear()
            self._forbidden.clear()
            self._denials.clear()

    def deny_admission(self, plural: str, message: str, times: int = -1) -> None:
        """A webhook refuses creating `plural` (also on dry runs), as a changed webhook or one deployed after
        the dry run would: 403 'admission webhook "v<plural>.kb.io" denied the request: <message>'."""
        with self._lock:
            self._denials.append([plural, message, times])

    def forbid(self, verb: str, plural: str) -> None:
        """403 for `verb` (get, list, create, delete, patch) on `plural`, like a missing RBAC rule."""
        with self._lock:
            self._forbidden.add((verb, plural))

    def add_pod(
        self,
        namespace: str,
        name: str,
        labels: dict[str, str],
        node: str = "gpu-node-1",
        phase: str = "Running",
        containers: Iterable[str] = ("main",),
    ) -> dict[str, Any]:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {"nodeName": node, "containers": [{"name": c, "image": "example"} for c in containers]},
            "status": {"phase": phase},
        }
        with self._lock:
            self._stamp(pod)
            self._store[("pods", namespace, name)] = _Stored(pod, time.monotonic() - self.inject_delay)
        return pod

    def add_object(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        """Store a namespace, node, secret, configmap, deployment or daemonset as given (namespace from its
        metadata; cluster-scoped kinds have none)."""
        meta = body.setdefault("metadata", {})
        namespace = "" if plural in _CLUSTER_SCOPED else meta.get("namespace", "default")
        with self._lock:
            self._stamp(body)
            self._store[(plural, namespace, meta["name"])] = _Stored(body, time.monotonic() - self.inject_delay)
        return body

    def delete_namespace(self, namespace: str) -> None:
        """`kubectl delete namespace`: the namespace turns Terminating, the namespace controller deletes its
        content (chaos objects wait for their finalizers), then the namespace is gone. While Terminating,
        creates there get 403 from the NamespaceLifecycle admission plugin; once gone, 404 namespaces "X" not
        found (kubernetes plugin/pkg/admission/namespace/lifecycle/admission.go)."""
        with self._lock:
            self._terminating.add(namespace)
            for key, stored in list(self._live()):
                if key[1] == namespace and key[0] != "namespaces":
                    self._delete(key, stored)

    def _namespace_phase(self, namespace: str) -> str | None:
        """Terminating, Gone, or None (active or never modelled)."""
        if namespace not in self._terminating:
            return None
        if any(key[1] == namespace for key, _ in self._live()):
            return "Terminating"
        return "Gone"

    def remove_pod(self, namespace: str, name: str) -> None:
        """The pod is gone at once (deleted, evicted, never scheduled)."""
        with self._lock:
            self._store.pop(("pods", namespace, name), None)

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Live objects of `plural` (objects with a pending finalizer included), with their current status."""
        with self._lock:
            return [
                self._view(key, stored)
                for key, stored in self._live()
                if key[0] == plural and (namespace is None or key[1] == namespace)
            ]

    def chaos_objects(self) -> list[dict[str, Any]]:
        """Every live chaos-mesh.org object, any kind, any namespace."""
        with self._lock:
            return [self._view(key, stored) for key, stored in self._live() if key[0] in self._crds]

    def add_event(
        self,
        namespace: str,
        reason: str,
        message: str,
        involved: dict[str, Any],
        type_: str = "Normal",
        count: int = 1,
        source: str = "",
    ) -> None:
        with self._lock:
            self._events.append(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"{involved.get('name', 'x')}.{uuid.uuid4().hex[:8]}", "namespace": namespace},
                    "involvedObject": involved,
                    "reason": reason,
                    "message": message,
                    "type": type_,
                    "count": count,
                    "source": {"component": source} if source else {},
                    "firstTimestamp": _now(),
                    "lastTimestamp": _now(),
                }
            )

    def write_log(self, namespace: str, pod: str, container: str, text: str) -> None:
        """The running container writes `text` to its log (what `kubectl logs` returns)."""
        with self._lock:
            logs = self._logs.setdefault((namespace, pod, container), {"current": "", "previous": None})
            logs["current"] = (logs["current"] or "") + text

    def restart_container(self, namespace: str, pod: str, container: str, reason: str, exit_code: int) -> None:
        """The container ended (reason OOMKilled, Error or Completed: the runtime's, containerd
        internal/cri/server) and the kubelet started it again: restartCount + 1, lastState.terminated set,
        state running anew (pkg/kubelet/kubelet_pods.go convertToAPIContainerStatuses), and the ended
        container's log is now the one previous log the kubelet keeps (`kubectl logs --previous`)."""
        with self._lock:
            stored = self._store[("pods", namespace, pod)]
            status = stored.body.setdefault("status", {})
            statuses = status.setdefault("containerStatuses", [])
            found = next((c for c in statuses if c["name"] == container), None)
            if found is None:
                found = {"name": container, "image": "example", "imageID": "", "ready": True, "restartCount": 0,
                         "state": {"running": {"startedAt": _now()}}}  # fmt: skip
                statuses.append(found)
            started = (found.get("state", {}).get("running") or {}).get("startedAt") or _now()
            found["lastState"] = {
                "terminated": {
                    "reason": reason,
                    "exitCode": exit_code,
                    "startedAt": started,
                    "finishedAt": _now(),
                    "containerID": f"containerd://{uuid.uuid4().hex}",
                }
            }
            found["restartCount"] = int(found.get("restartCount", 0)) + 1
            found["state"] = {"running": {"startedAt": _now()}}
            logs = self._logs.setdefault((namespace, pod, container), {"current": "", "previous": None})
            logs["previous"], logs["current"] = logs["current"], ""

    # ------------------------------------------------------------ storage and the controller

    def _stamp(self, body: dict[str, Any]) -> None:
        meta = body.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now(self.clock_offset))
        meta["resourceVersion"] = str(next(self._versions))
        meta.setdefault("generation", 1)

    def _live(self) -> Iterator[tuple[tuple[str, str, str], _Stored]]:
        for key, stored in list(self._store.items()):
            if stored.deleting is not None and self._finalized(key, stored):
                del self._store[key]  # the finalizer ran
                continue
            yield key, stored

    def _finalized(self, key: tuple[str, str, str], stored: _Stored) -> bool:
        """Whether a deleted object's finalizers are gone. Chaos Mesh's CleanReconciler
        (chaos-mesh/chaos-mesh controllers/common/finalizers/controller.go) drops `chaos-mesh/records` when
        every record's phase is "Not Injected", or at once when the annotation
        `chaos-mesh.chaos-mesh.org/cleanFinalizer` is `forced` and no Recover fails; without the finalizer the
        API server removes the object. Recovery takes `finalizer_delay` seconds here, and never completes while
        stalled."""
        assert stored.deleting is not None
        if key[0] not in self._crds:
            return time.monotonic() - stored.deleting >= self.finalizer_delay
        meta = stored.body["metadata"]
        if CHAOS_FINALIZER not in (meta.get("finalizers") or []):
            return True
        if stored.stalled is not None or any(_never_injected(r) for r in stored.records or []):
            # The records step requeues after a failed Recover and the pipeline stops there, before the clean
            # step that reads `forced` (controllers/common/pipeline/pipeline.go, records/controller.go
            # needRetry), after a failed Recover as after a failed Apply of a never-injected record; the real
            # controller keeps such an object (tests/cluster/test_contract_real.py, tests/cluster/node/
            # test_faults_node.py's netem case).
            return False
        if (meta.get("annotations") or {}).get(CLEAN_FINALIZER_ANNOTATION) == "forced":
            return True
        return time.monotonic() - stored.deleting >= self.finalizer_delay

    def _view(self, key: tuple[str, str, str], stored: _Stored) -> dict[str, Any]:
        body = copy.deepcopy(stored.body)
        age = time.monotonic() - stored.created
        if key[0] == "pods":
            if body.get("status", {}).get("phase") in (None, "Pending") and age >= self.inject_delay:
                containers = body["spec"].get("containers", [])
                body["status"] = {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [
                        {
                            "name": c["name"],
                            "image": c.get("image", ""),
                            "imageID": "",
                            "ready": True,
                            "restartCount": 0,
                        }
                        for c in containers
                    ],
                }
            return body
        if key[0] in self._crds:
            self._reconcile(stored, age)
            body = copy.deepcopy(stored.body)
            body["status"] = self._chaos_status(stored, age)
            flood = self._floods.get((key[1], key[2]))
            if flood is not None and body["status"]["experiment"]["containerRecords"]:
                body["status"]["experiment"]["containerRecords"] = Flood(key[1], flood)
        return body

    def _reconcile(self, stored: _Stored, age: float) -> None:
        """What Chaos Mesh's controllers have done by now to the stored object (played lazily, on reads).

        InitReconciler (controllers/common/finalizers/controller.go) adds `chaos-mesh/records` after the
        object was created: it is in no create response and never on a dry run. The records controller
        (controllers/common/records/controller.go) selects targets only `if records == nil` ("TODO: dynamic
        upgrade the records when some of these pods/containers stopped"): once selected, the records are kept
        whatever happens to the pods, and pods that appear later are never injected."""
        meta = stored.body["metadata"]
        if stored.deleting is None and CHAOS_FINALIZER not in (meta.get("finalizers") or []):
            meta["finalizers"] = [*(meta.get("finalizers") or []), CHAOS_FINALIZER]
        if stored.records is not None or stored.deleting is not None or age < self.inject_delay:
            return
        spec = stored.body.get("spec", {})
        pods = [
            p.body
            for (plural, ns, _), p in self._store.items()
            if plural == "pods"
            and p.deleting is None
            and _chaos_selector_matches(spec.get("selector", {}), ns, p.body["metadata"].get("labels", {}))
        ]
        pods = pods[: _selected_count(spec.get("mode"), spec.get("value"), len(pods), stored.body, self.random_percent)]
        if not pods:
            return  # "no target has been selected": records stay nil (upstream retries on the next reconcile)
        stamp = _now(self.clock_offset)
        # Apply for every kind but pod-kill and pod-failure goes through the chaos-daemon on the pod's node, and
        # fails where none runs ("cannot find daemonIP on node X": controllers/utils/chaosdaemon/chaosdaemon.go
        # FindDaemonIP); the record keeps a Failed Apply event per attempt (controllers/common/records/controller.go).
        daemons = {k[2].removeprefix("chaos-daemon-") for k in self._store if self._is_daemon_pod(k)}
        via_daemon = (stored.body.get("kind"), spec.get("action")) not in _NO_DAEMON
        undaemoned = {
            target: node
            for p in pods
            if via_daemon and (node := str((p.get("spec") or {}).get("nodeName") or "")) not in daemons
            for target in _target_ids(stored.body, p)
        }
        ids = [target for p in pods for target in _target_ids(stored.body, p)]
        if stored.body.get("kind") == "PodChaos" and spec.get("action") == "pod-kill":
            # controllers/chaosimpl/podchaos/podkill/impl.go Apply deletes the pod (grace period from the spec)
            # and records it Injected; its controller, not Chaos Mesh, may bring a replacement.
            for pod in pods:
                self._store.pop(("pods", pod["metadata"]["namespace"], pod["metadata"]["name"]), None)
        stored.records = [
            {
                "id": target,
                "selectorKey": ".",
                "phase": "Injected",
                "injectedCount": 1,
                "recoveredCount": 0,
                "events": [{"type": "Succeeded", "operation": "Apply", "timestamp": stamp}],
            }
            if target not in undaemoned
            else {
                "id": target,
                "selectorKey": ".",
                "phase": _failed_apply_phase(str(stored.body.get("kind"))),
                "injectedCount": 0,
                "recoveredCount": 0,
                "events": [_failed_apply(f"cannot find daemonIP on node {undaemoned[target]}", stamp)],
            }
            for target in ids
        ]

    def stall_recovery(self, namespace: str, name: str, message: str = "rpc error: chaos-daemon unreachable") -> None:
        """A controller hook: the fault's Recover keeps failing (upstream, chaos-daemon unreachable or the node
        gone makes the kind's Recover return an error; the record stays Injected with a Failed Recover event:
        controllers/common/records/controller.go). The object then stays Terminating after a delete."""
        with self._lock:
            for (plural, ns, n), stored in self._store.items():
                if plural in self._crds and ns == namespace and n == name:
                    stored.stalled = message

    def _chaos_status(self, stored: _Stored, age: float) -> dict[str, Any]:
        body = stored.body
        spec = body.get("spec", {})
        deleting = stored.deleting is not None
        one_shot = body.get("kind") == "PodChaos" and spec.get("action") in ONE_SHOT_ACTIONS
        expired = duration_exceeded(spec, age, one_shot)
        stopped = expired or deleting
        for record in stored.records or []:
            # Upstream requeues a failed Apply at once and retries without end: one more attempt per read here.
            failed = record["events"][-1] if record["events"] else {}
            if record["phase"].startswith("Not Injected") and failed.get("type") == "Failed":
                record["events"] = [*record["events"], _failed_apply(failed["message"], _now())][-MAX_EVENTS:]
        records = copy.deepcopy(stored.records or [])
        if stopped and not (one_shot and not deleting):
            # desiredPhase Stop: each record is recovered (Recover -> "Not Injected"), unless stalled. A record
            # never injected ("Not Injected/..."; its failing Apply retried above) is applied again, not recovered
            # (controllers/common/records/controller.go), so it stays as it is while its cause lasts.
            recovering = deleting and not expired and time.monotonic() - (stored.deleting or 0) < self.finalizer_delay
            for record in records:
                if _never_injected(record):
                    continue
                if stored.stalled is not None:
                    record["events"].append(
                        {"type": "Failed", "operation": "Recover", "message": stored.stalled, "timestamp": _now()}
                    )
                elif not recovering:
                    record["phase"] = "Not Injected"
                    record["recoveredCount"] = 1
                    record["events"].append({"type": "Succeeded", "operation": "Recover", "timestamp": _now()})
        injected = bool(records) and all(r["phase"] == "Injected" for r in records)
        recovered = stopped and all(r["phase"] == "Not Injected" for r in records)

        def condition(kind: str, ok: bool) -> dict[str, str]:
            return {"type": kind, "status": "True" if ok else "False"}

        return {
            "conditions": [
                condition("Selected", bool(records)),
                condition("AllInjected", injected),
                condition("AllRecovered", recovered),
                condition("Paused", False),
            ],
            "experiment": {"desiredPhase": "Stop" if stopped else "Run", "containerRecords": records},
        }

    # ------------------------------------------------------------ request handling

    def handle(self, method: str, raw_path: str, body: bytes, content_type: str) -> tuple[int, dict[str, Any] | str]:
        parts = urlsplit(raw_path)
        path, query = parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()}
        with self._lock:
            self._sync_daemons()
            self.requests.append((method, raw_path))
            rule = next((r for r in self._rules if r.matches(method, path, parts.query)), None)
            if rule is not None:
                rule.hits += 1
                if not rule.after_commit:
                    return self._failure(rule)
            sub = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/(log)", path)
            if sub is not None:
                namespace, name, _ = sub.groups()
                if ("get", "pods/log") in self._forbidden:
                    return 403, _status(
                        403,
                        f'pods "{name}" is forbidden: User "system:serviceaccount:kubeflow:runner" cannot get '
                        f'resource "pods/log" in API group "" in the namespace "{namespace}"',
                    )
                return self._pod_log(namespace, name, query)
            route = self._route(path)
            if route is None:
                code, out = 404, _status(404, f"the server could not find the requested resource ({path})")
            else:
                plural, namespace, name = route
                verb = _VERB_OF_METHOD.get(method, method.lower())
                if verb == "get" and name is None:
                    verb = "list"
                if (verb, plural) in self._forbidden:
                    code, out = (
                        403,
                        _status(
                            403,
                            f'{plural}.{CHAOS_GROUP} is forbidden: User "system:serviceaccount:kubeflow:runner" '
                            f'cannot {verb} resource "{plural}" in API group "{CHAOS_GROUP}" in the namespace '
                            f'"{namespace}"',
                        ),
                    )
                else:
                    code, out = self._serve(method, plural, namespace, name, query, body, content_type)
            if rule is not None:  # after_commit: the request took effect but the caller sees an error
                return self._failure(rule)
            return code, out

    def _failure(self, rule: FailureRule) -> tuple[int, dict[str, Any]]:
        out = _status(rule.status, rule.message or f"injected failure {rule.status}")
        if rule.retry_after is not None:
            out["details"] = {"retryAfterSeconds": rule.retry_after}
        return rule.status, out

    def _route(self, path: str) -> tuple[str, str | None, str | None] | None:
        """(plural, namespace, name) for a resource path, or None for paths this server does not serve."""
        crd = re.fullmatch(r"/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions(?:/([^/]+))?", path)
        if crd:
            return "customresourcedefinitions", None, crd.group(1)
        chaos = re.fullmatch(
            rf"/apis/{re.escape(CHAOS_GROUP)}/{CHAOS_VERSION}(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?", path
        )
        if chaos:
            namespace, plural, name = chaos.groups()
            if plural not in self._crds or plural not in (self.installed or set()):
                return None
            return plural, namespace, name
        core = re.fullmatch(
            r"/api/v1(?:/namespaces/([^/]+))?/(pods|events|secrets|configmaps|serviceaccounts)(?:/([^/]+))?", path
        )
        if core:
            namespace, plural, name = core.groups()
            return plural, namespace, name
        apps = re.fullmatch(r"/apis/apps/v1(?:/namespaces/([^/]+))?/(deployments|daemonsets)(?:/([^/]+))?", path)
        if apps:
            namespace, plural, name = apps.groups()
            return plural, namespace, name
        cluster = re.fullmatch(r"/api/v1/(namespaces|nodes)(?:/([^/]+))?", path)
        if cluster:
            return cluster.group(1), None, cluster.group(2)
        lease = re.fullmatch(r"/apis/coordination\.k8s\.io/v1(?:/namespaces/([^/]+))?/leases(?:/([^/]+))?", path)
        if lease:
            return "leases", lease.group(1), lease.group(2)
        review = re.fullmatch(r"/apis/authorization\.k8s\.io/v1/(subjectaccessreviews|selfsubjectaccessreviews)", path)
        if review:
            return review.group(1), None, None
        return None

    def _serve(
        self,
        method: str,
        plural: str,
        namespace: str | None,
        name: str | None,
        query: dict[str, str],
        raw: bytes,
        content_type: str,
    ) -> tuple[int, dict[str, Any]]:
        if plural == "customresourcedefinitions":
            return self._serve_crds(method, name)
        if plural in ("subjectaccessreviews", "selfsubjectaccessreviews"):
            return self._access_review(plural, method, raw)
        if plural in _CLUSTER_SCOPED or plural in _READ_ONLY:
            return self._serve_stored(method, plural, namespace, name, query)
        if plural == "events":
            return self._list_events(namespace, query)
        if plural == "leases":
            return self._serve_leases(method, namespace, name, raw)
        if name is None and method == "GET":
            # In key order (namespace, name), as etcd ranges over /registry/<resource>/<namespace>/<name>
            # (k8s.io/apiserver pkg/storage/etcd3/store.go GetList); `limit` cuts a page, whose `continue` token
            # names the key the next page starts after (encodeContinue there; opaque to clients).
            keys = sorted(
                key
                for key, stored in self._live()
                if key[0] == plural
                and (namespace is None or key[1] == namespace)
                and label_selector_matches(query.get("labelSelector"), stored.body["metadata"].get("labels", {}))
            )
            meta: dict[str, Any] = {"resourceVersion": "1"}
            if query.get("continue"):
                after = _continue_key(query["continue"])
                if after is None:
                    return 400, _status(400, "continue key is not valid: the token is not one this server gave")
                keys = [key for key in keys if (key[1], key[2]) > after]
            limit = int(query.get("limit") or 0)
            if limit and len(keys) > limit:
                keys = keys[:limit]
                meta["continue"] = _continue_token(keys[-1][1], keys[-1][2])
            live = dict(self._live())
            items = [self._view(key, live[key]) for key in keys]
            kind = "PodList" if plural == "pods" else self._crds[plural]["spec"]["names"]["listKind"]
            api_version = "v1" if plural == "pods" else f"{CHAOS_GROUP}/{CHAOS_VERSION}"
            return 200, {"apiVersion": api_version, "kind": kind, "metadata": meta, "items": items}
        if namespace is None:
            return 405, _status(405, "cluster-scoped access to a namespaced resource")
        if name is None and method == "POST":
            return self._create(plural, namespace, raw, dry_run=query.get("dryRun") == "All")
        assert name is not None
        key = (plural, namespace, name)
        stored = dict(self._live()).get(key)
        if stored is None:
            return 404, _status(404, f'{plural}.{CHAOS_GROUP} "{name}" not found', name=name, kind=plural)
        if method == "GET":
            return 200, self._view(key, stored)
        if method == "DELETE":
            return self._delete(key, stored)
        if method == "PATCH":
            if "merge-patch" not in content_type:
                return 415, _status(415, f"unsupported patch type {content_type}")
            _merge(stored.body, json.loads(raw or b"{}"))
            self._stamp(stored.body)
            return 200, self._view(key, stored)
        return 405, _status(405, f"method {method} not allowed")

    def _list_events(self, namespace: str | None, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """core/v1 events: fieldSelector over the fields the API server makes selectable for Event
        (kubernetes/kubernetes pkg/apis/core/v1/conversion.go AddFieldLabelConversionsForEvent; another field
        is a 400 "field label not supported"), `=`/`==`/`!=` terms joined by commas, and `limit` (the rest is
        behind metadata.continue, staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go ListMeta)."""
        terms = []
        for term in filter(None, (query.get("fieldSelector") or "").split(",")):
            found = re.fullmatch(r"([^!=]+)(==|=|!=)(.*)", term)
            if not found or found.group(1) not in _EVENT_FIELDS:
                label = found.group(1) if found else term
                return 400, _status(400, f"field label not supported: {label}")
            terms.append(found.groups())
        items = []
        for event in self._events:
            if namespace is not None and event["metadata"]["namespace"] != namespace:
                continue
            fields = _event_fields(event)
            if all((fields.get(k, "") == v) == (op != "!=") for k, op, v in terms):
                items.append(copy.deepcopy(event))
        meta: dict[str, Any] = {"resourceVersion": "1"}
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            items, meta["continue"] = items[:limit], "more"
        return 200, {"apiVersion": "v1", "kind": "EventList", "metadata": meta, "items": items}

    def _pod_log(self, namespace: str, name: str, query: dict[str, str]) -> tuple[int, dict[str, Any] | str]:
        """GET pods/{name}/log: text/plain. The container is required when the pod has several (400 "a
        container name must be specified"); previous=true reads the one previous container's log, 400
        `previous terminated container "c" in pod "p" not found` when there is none
        (pkg/kubelet/kubelet_pods.go validateContainerLogStatus); tailLines keeps the last lines, then
        limitBytes cuts the answer (staging/src/k8s.io/api/core/v1/types.go PodLogOptions)."""
        stored = dict(self._live()).get(("pods", namespace, name))
        if stored is None:
            return 404, _status(404, f'pods "{name}" not found', name=name, kind="pods")
        containers = [c["name"] for c in stored.body["spec"].get("containers", [])]
        container = query.get("container") or (containers[0] if len(containers) == 1 else "")
        if not container:
            return 400, _status(400, f"a container name must be specified for pod {name}, choose one of: {containers}")
        if container not in containers:
            return 400, _status(400, f"container {container} is not valid for pod {name}")
        logs = self._logs.get((namespace, name, container), {"current": "", "previous": None})
        previous = _query_bool(query.get("previous"))
        text = logs["previous"] if previous else logs["current"]
        if text is None:
            return 400, _status(400, f'previous terminated container "{container}" in pod "{name}" not found')
        if query.get("tailLines"):
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(query["tailLines"]) :]) if int(query["tailLines"]) else ""
        if query.get("limitBytes"):
            text = text.encode()[: int(query["limitBytes"])].decode(errors="ignore")
        return 200, text

    def _serve_stored(
        self, method: str, plural: str, namespace: str | None, name: str | None, query: dict[str, str]
    ) -> tuple[int, dict[str, Any]]:
        """get and list of the objects added with add_object (read only here: kfchaos never writes them)."""
        api_version, kind = _STORED_KINDS[plural]
        if method != "GET":
            return 405, _status(405, f"{plural} are read only in the loopback server")
        scope = "" if plural in _CLUSTER_SCOPED else namespace
        if name is None:
            items = [
                copy.deepcopy(stored.body)
                for (p, ns, _), stored in self._live()
                if p == plural
                and (scope is None or ns == scope)
                and label_selector_matches(query.get("labelSelector"), stored.body["metadata"].get("labels", {}))
            ]
            return 200, {"apiVersion": api_version, "kind": f"{kind}List", "metadata": {}, "items": items}
        stored = dict(self._live()).get((plural, scope or "", name))
        if stored is None:
            group = api_version.split("/")[0] if "/" in api_version else ""
            what = f"{plural}.{group}" if group else plural
            return 404, _status(404, f'{what} "{name}" not found', name=name, kind=plural)
        return 200, copy.deepcopy(stored.body)

    def _access_review(self, plural: str, method: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        """authorization.k8s.io/v1 access reviews (kubernetes.io/docs/reference/access-authn-authz/authorization/
        "Checking API access"; pkg/registry/authorization/subjectaccessreview/rest.go): POST only, nothing is
        stored, the answer is the request with `status` filled in. A SubjectAccessReview needs `user` or
        `groups` (else 422, as the REST storage's validation answers); a SelfSubjectAccessReview is decided
        for the requesting identity. RBAC never denies, it only does not allow: status.allowed false with an
        empty reason (and no `denied`) when no rule allows, as the RBAC authorizer's NoOpinion reads."""
        from tests.support.rbac import Attributes, RbacAuthorizer

        if method != "POST":
            return 405, _status(405, f"{plural} support only create")
        try:
            review = json.loads(raw or b"{}")
        except ValueError:
            return 400, _status(400, "request body is not JSON")
        spec = review.get("spec") or {}
        attributes = spec.get("resourceAttributes")
        if attributes is None:
            return 422, _status(422, "spec.resourceAttributes: Required value (nonResourceAttributes not served)")
        if plural == "subjectaccessreviews":
            user, groups = spec.get("user") or "", spec.get("groups") or []
            if not user and not groups:
                return 422, _status(
                    422, 'spec.user: Invalid value: "": at least one of user or group must be specified'
                )
        else:
            user, groups = self.user, list(self.groups)  # SelfSubjectAccessReviewSpec has no user fields
        attrs = Attributes(
            verb=attributes.get("verb", ""),
            group=attributes.get("group", ""),
            resource=attributes.get("resource", ""),
            namespace=attributes.get("namespace", ""),
            name=attributes.get("name", ""),
            subresource=attributes.get("subresource", ""),
        )
        if "system:masters" in groups:
            # The cluster-admin ClusterRoleBinding every cluster has (bootstrap policy) binds system:masters.
            allowed, reason = (
                True,
                (
                    'RBAC: allowed by ClusterRoleBinding "cluster-admin" of ClusterRole "cluster-admin" '
                    'to Group "system:masters"'
                ),
            )
        else:
            allowed, reason = RbacAuthorizer(self.rbac).authorize(user, groups, attrs)
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        kind = "SubjectAccessReview" if plural == "subjectaccessreviews" else "SelfSubjectAccessReview"
        return 201, {
            "kind": kind,
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }

    def _serve_leases(
        self, method: str, namespace: str | None, name: str | None, raw: bytes
    ) -> tuple[int, dict[str, Any]]:
        """coordination.k8s.io/v1 leases as the API server keeps them (kubernetes v1.35): get, list, create, update
        (PUT) and delete. An update must carry the resourceVersion it read: none is 422 "must be specified for an
        update" (leases do not allow unconditional updates: pkg/registry/coordination/lease/strategy.go
        AllowUnconditionalUpdate false), another than the stored one is 409 Conflict "the object has been
        modified" (k8s.io/apiserver pkg/registry/generic/registry/store.go Update, OptimisticLockErrorMsg);
        a create of an existing name is 409 AlreadyExists; leaseDurationSeconds <= 0 and leaseTransitions < 0
        are 422 (pkg/apis/coordination/validation/validation.go ValidateLeaseSpec)."""
        what = "leases.coordination.k8s.io"
        if method == "GET" and name is None:
            items = [self._view(key, stored) for key, stored in self._live()
                     if key[0] == "leases" and namespace in (None, key[1])]  # fmt: skip
            return 200, {"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList", "metadata": {}, "items": items}
        if namespace is None:
            return 405, _status(405, "cluster-scoped access to a namespaced resource")
        if method == "GET":
            stored = dict(self._live()).get(("leases", namespace, name or ""))
            if stored is None:
                return 404, _status(404, f'{what} "{name}" not found', name=name, kind="leases")
            return 200, copy.deepcopy(stored.body)
        if method == "DELETE":
            if self._store.pop(("leases", namespace, name or ""), None) is None:
                return 404, _status(404, f'{what} "{name}" not found', name=name, kind="leases")
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}}
        if method not in ("POST", "PUT"):
            return 405, _status(405, f"method {method} not allowed")
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, _status(400, "request body is not JSON")
        meta = body.setdefault("metadata", {})
        if method == "PUT" and meta.get("name") != name:
            return 400, _status(400, "the name of the object does not match the name on the URL")
        name = meta.get("name")
        if not name:
            return 422, _status(422, "metadata.name: Required value")
        if meta.setdefault("namespace", namespace) != namespace:
            return 400, _status(400, "the namespace of the object does not match the namespace of the request")
        spec = body.get("spec") or {}
        duration, transitions = spec.get("leaseDurationSeconds"), spec.get("leaseTransitions")
        if isinstance(duration, int) and duration <= 0:
            return 422, _status(422, f'Lease.coordination.k8s.io "{name}" is invalid: spec.leaseDurationSeconds: '
                                f"Invalid value: {duration}: must be greater than 0")  # fmt: skip
        if isinstance(transitions, int) and transitions < 0:
            return 422, _status(422, f'Lease.coordination.k8s.io "{name}" is invalid: spec.leaseTransitions: '
                                f"Invalid value: {transitions}: must be greater than or equal to 0")  # fmt: skip
        key = ("leases", namespace, name)
        stored = dict(self._live()).get(key)
        if method == "POST":
            if stored is not None:
                return 409, _status(409, f'{what} "{name}" already exists', name=name, kind="leases")
            meta.pop("resourceVersion", None)
            self._stamp(body)
            self._store[key] = _Stored(body, time.monotonic())
            return 201, copy.deepcopy(body)
        if stored is None:
            return 404, _status(404, f'{what} "{name}" not found', name=name, kind="leases")
        version = meta.get("resourceVersion")
        if not version:
            return 422, _status(422, f'leases.coordination.k8s.io "{name}" is invalid: metadata.resourceVersion: '
                                "Invalid value: 0x0: must be specified for an update")  # fmt: skip
        if version != stored.body["metadata"]["resourceVersion"]:
            conflict = _status(409, f'Operation cannot be fulfilled on {what} "{name}": the object has been '
                               "modified; please apply your changes to the latest version and try again",
                               name=name, kind="leases")  # fmt: skip
            conflict["reason"] = "Conflict"
            return 409, conflict
        for kept in ("uid", "creationTimestamp", "generation"):
            meta[kept] = stored.body["metadata"].get(kept)
        # Nothing changed: the API server writes nothing and the resourceVersion stays (as the real one answered in
        # tests/cluster/test_lease_contract_real.py).
        if body == stored.body:
            return 200, copy.deepcopy(stored.body)
        self._stamp(body)
        stored.body = body
        return 200, copy.deepcopy(body)

    def _serve_crds(self, method: str, name: str | None) -> tuple[int, dict[str, Any]]:
        if method != "GET":
            return 405, _status(405, "read only")
        present = {f"{p}.{CHAOS_GROUP}": c for p, c in self._crds.items() if p in (self.installed or set())}
        if name is None:
            return 200, {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinitionList",
                "metadata": {},
                "items": list(present.values()),
            }
        if name not in present:
            return 404, _status(404, f'customresourcedefinitions.apiextensions.k8s.io "{name}" not found', name=name)
        return 200, present[name]

    def _create(self, plural: str, namespace: str, raw: bytes, dry_run: bool) -> tuple[int, dict[str, Any]]:
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, _status(400, "request body is not JSON")
        meta = body.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            return 422, _status(422, "metadata.name: Required value")
        if meta.setdefault("namespace", namespace) != namespace:
            return 400, _status(400, "the namespace of the object does not match the namespace of the request")
        if plural in self._crds and self.validate:
            body = mutated(body)  # m<kind>.kb.io's defaults, before the schema check (as the API server orders it)
            meta = body["metadata"]
            problems = validate_chaos_object(body, self.crd_dir)
            if problems:
                return 422, _status(422, f"{body.get('kind')} {name!r} is invalid: " + "; ".join(problems))
        phase = self._namespace_phase(namespace)
        if phase == "Gone":
            return 404, _status(404, f'namespaces "{namespace}" not found', name=namespace, kind="namespaces")
        if phase == "Terminating":
            group = CHAOS_GROUP if plural in self._crds else ""
            message = (
                f'{plural}{"." + group if group else ""} "{name}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated"
            )
            out = _status(403, message, name=name, kind=plural)
            out["details"]["causes"] = [{"type": "NamespaceTerminating", "message": f"namespace {namespace} is "
                                         "being terminated", "field": "metadata.namespace"}]  # fmt: skip
            return 403, out
        if plural in self._crds:
            denial = self._admission(plural, namespace, body)
            if denial is not None:
                return 403, denial
        key = (plural, namespace, name)
        if key in dict(self._live()):
            return 409, _status(409, f'{plural}.{CHAOS_GROUP} "{name}" already exists', name=name, kind=plural)
        self._stamp(body)
        if plural == "pods":
            body.setdefault("status", {"phase": "Pending"})
            if body["spec"].get("nodeName"):
                rejection = self._kubelet_admission(body)
                if rejection is not None:
                    body["status"] = rejection
            body["spec"].setdefault("nodeName", self._node_for(body))
        if dry_run:
            return 201, body
        self._store[key] = _Stored(body, time.monotonic())
        involved = {"kind": body.get("kind"), "name": name, "namespace": namespace, "uid": meta["uid"]}
        self.add_event(namespace, "Created", f"{body.get('kind')} {name} created", involved)
        if plural in self._crds:
            # The object as stored, before any controller saw it: no finalizer, no records yet.
            return 201, copy.deepcopy(body)
        return 201, self._view(key, self._store[key])

    def _is_daemon_pod(self, key: tuple[str, str, str]) -> bool:
        return key[0] == "pods" and key[1] == self.chaos_namespace and key[2].startswith("chaos-daemon-")

    def _sync_daemons(self) -> None:
        """The DaemonSet controller's part for chaos-daemon (kubernetes pkg/controller/daemon: a node gets a
        daemon pod when the pod tolerates the node's NoSchedule/NoExecute taints; the controller itself adds
        tolerations for node.kubernetes.io/* conditions, util/daemonset_util.go)."""
        labels = {"app.kubernetes.io/component": "chaos-daemon", "app.kubernetes.io/name": "chaos-mesh"}
        daemon_key = ("daemonsets", self.chaos_namespace, "chaos-daemon")
        if not self.chaos_daemon:
            for key in [k for k in self._store if k == daemon_key or self._is_daemon_pod(k)]:
                del self._store[key]
            return
        containers = [{"name": "chaos-daemon", "image": "ghcr.io/chaos-mesh/chaos-daemon:v2.7.2"}]
        template = {
            "metadata": {"labels": labels},
            "spec": {"tolerations": copy.deepcopy(self.daemon_tolerations), "containers": containers},
        }
        current = self._store.get(daemon_key)
        if current is None or current.body["spec"]["template"] != template:
            body = {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "chaos-daemon", "namespace": self.chaos_namespace, "labels": dict(labels)},
                "spec": {"selector": {"matchLabels": dict(labels)}, "template": template},
            }
            self._stamp(body)
            self._store[daemon_key] = _Stored(body, time.monotonic() - self.inject_delay)
        nodes: dict[str, list[dict[str, Any]]] = {}
        for (plural, _, name), stored in self._store.items():
            if plural == "nodes":
                nodes[name] = (stored.body.get("spec") or {}).get("taints") or []
        for key, stored in list(self._store.items()):
            if key[0] == "pods" and not self._is_daemon_pod(key):
                nodes.setdefault(str((stored.body.get("spec") or {}).get("nodeName") or ""), [])
        nodes.pop("", None)
        for node, taints in nodes.items():
            key = ("pods", self.chaos_namespace, f"chaos-daemon-{node}")
            fits = all(
                t.get("effect") not in ("NoSchedule", "NoExecute")
                or str(t.get("key", "")).startswith("node.kubernetes.io/")
                or _tolerated(self.daemon_tolerations, t)
                for t in taints
            )
            if fits and key not in self._store:
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": key[2], "namespace": key[1], "labels": dict(labels)},
                    "spec": {"nodeName": node, "containers": template["spec"]["containers"]},
                    "status": {"phase": "Running"},
                }
                self._stamp(pod)
                self._store[key] = _Stored(pod, time.monotonic() - self.inject_delay)
            elif not fits:
                self._store.pop(key, None)

    def _admission(self, plural: str, namespace: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """Chaos Mesh's validating webhooks, which the API server calls on create and on dryRun=All alike
        (webhooks with sideEffects None; helm/chaos-mesh/templates/validating-admission-webhooks.yaml):
        v<plural>.kb.io refuses what kfchaos.faultspec.admission.webhook_problems says it refuses (the rules
        tests/cluster/test_contract_real.py and test_admission_agreement.py check against Chaos Mesh's real
        webhooks; this fake no longer keeps a model of its own), vauth.kb.io checks the requester
        may create the kind in every namespace the object selects, its `target` included
        (pkg/webhook/validate_auth.go, affected_namespaces.go). controller-runtime answers a refusal with
        admission.Denied (code 403, reason Forbidden; pkg/webhook/admission/response.go) and the API server
        prefixes 'admission webhook "NAME" denied the request: ' (k8s.io/apiserver
        pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr)."""
        for denial in self._denials:
            if denial[0] == plural and denial[2] != 0:
                denial[2] -= 1
                return _denied(f"v{plural}.kb.io", denial[1])
        if self.webhooks:
            problems = webhook_problems(body)
            if problems:
                text = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
                return _denied(f"v{plural}.kb.io", text)
        if self.security_mode and "system:masters" not in self.groups:
            from tests.support.rbac import Attributes, RbacAuthorizer

            for space in sorted(_affected_namespaces(body, namespace)):
                attrs = Attributes(verb="create", group=CHAOS_GROUP, resource=plural, namespace=space)
                allowed, _ = RbacAuthorizer(self.rbac).authorize(self.user, list(self.groups), attrs)
                if not allowed:
                    return _denied("vauth.kb.io", f"{self.user} is forbidden on namespace {space}")
        return None

    def _kubelet_admission(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """A pod created with spec.nodeName skips the scheduler; the kubelet checks extended resources itself
        and rejects the pod (phase Failed, reason OutOf<resource>, kubernetes pkg/kubelet/lifecycle/predicate.go
        InsufficientResourceError: "Node didn't have enough resource: %s, requested: %d, used: %d, capacity:
        %d"). Modelled for nvidia.com/gpu against the node's status.allocatable, when the node is stored."""
        node = self._store.get(("nodes", "", pod["spec"]["nodeName"]))
        allocatable = ((node.body.get("status") or {}).get("allocatable") or {}) if node else {}
        if GPU not in allocatable:
            return None
        requested = _gpus(pod)
        used = sum(
            _gpus(stored.body)
            for key, stored in self._store.items()
            if key[0] == "pods"
            and (stored.body.get("spec") or {}).get("nodeName") == pod["spec"]["nodeName"]
            and (stored.body.get("status") or {}).get("phase") not in ("Failed", "Succeeded")
        )
        capacity = int(allocatable[GPU])
        if requested == 0 or requested + used <= capacity:
            return None
        return {
            "phase": "Failed",
            "reason": f"OutOf{GPU}",
            "message": f"Pod was rejected: Node didn't have enough resource: {GPU}, requested: {requested}, "
            f"used: {used}, capacity: {capacity}",
        }

    def _node_for(self, pod: dict[str, Any]) -> str:
        """The scheduler's part for a pod with pod affinity: the node of a matching pod."""
        terms = (
            pod["spec"]
            .get("affinity", {})
            .get("podAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", [])
        )
        for term in terms:
            match = term.get("labelSelector", {}).get("matchLabels", {})
            for (plural, ns, _), stored in self._store.items():
                labels = stored.body["metadata"].get("labels", {})
                if (
                    plural == "pods"
                    and ns in term.get("namespaces", [ns])
                    and all(labels.get(k) == v for k, v in match.items())
                ):
                    return str(stored.body["spec"].get("nodeName", "node-1"))
        return "node-1"

    def _delete(self, key: tuple[str, str, str], stored: _Stored) -> tuple[int, dict[str, Any]]:
        if stored.deleting is None:
            stored.deleting = time.monotonic()
            stored.body["metadata"]["deletionTimestamp"] = _now(self.clock_offset)
            self._stamp(stored.body)
        if key[0] == "pods" or self._finalized(key, stored):
            del self._store[key]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": key[2]}}
        return 200, self._view(key, stored)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body in one segment, no Nagle: otherwise delayed ACKs cost ~40 ms per request.
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def __init__(self, server_state: KubeApiServer, *args: Any) -> None:
        self.state = server_state
        super().__init__(*args)

    def date_time_string(self, timestamp: float | None = None) -> str:
        return super().date_time_string(time.time() + self.state.clock_offset if timestamp is None else timestamp)

    def _dispatch(self) -> None:
        if re.fullmatch(r"/api/v1/namespaces/[^/]+/pods/[^/]+/exec", urlsplit(self.path).path):
            self._exec()
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        code, body = self.state.handle(self.command, self.path, raw, self.headers.get("Content-Type", ""))
        floods: list[Flood] = []

        def placeholder(value: object) -> str:
            if not isinstance(value, Flood):
                raise TypeError(f"{type(value).__name__} is not JSON")
            floods.append(value)
            return f"\x00flood{len(floods) - 1}\x00"

        payload = body.encode() if isinstance(body, str) else json.dumps(body, default=placeholder).encode()
        pieces: list[bytes | Flood] = [payload]
        for index, flood in enumerate(floods):  # each flood's placeholder string becomes its streamed records
            head, tail = pieces.pop().split(json.dumps(f"\x00flood{index}\x00").encode(), 1)
            pieces += [head, flood, tail]
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(sum(len(p) for p in pieces)))
        retry_after = (
            (body.get("details") or {}).get("retryAfterSeconds") if code == 429 and isinstance(body, dict) else None
        )
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.end_headers()
        try:
            for piece in pieces:
                for chunk in piece.chunks() if isinstance(piece, Flood) else [piece]:
                    self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client stopped reading: a bounded one does

    do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _dispatch

    def _exec(self) -> None:
        """pods/{pod}/exec over a websocket, as the kubernetes client's stream() speaks it: RBAC `create` on
        pods/exec (also for the websocket GET), the upgrade answered with the v4.channel.k8s.io subprotocol
        (staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go), each message a binary frame
        whose first byte is the channel (1 stdout, 3 error: staging/src/k8s.io/apiserver/pkg/util/wsstream/
        conn.go), the error channel carrying a metav1.Status: Success, or Failure with reason NonZeroExitCode
        and an ExitCode cause (kubelet cri/streaming/remotecommand/exec.go ServeExec); then a close frame."""
        import base64
        import hashlib

        parts = urlsplit(self.path)
        namespace, pod = parts.path.split("/")[4], parts.path.split("/")[6]
        query = parse_qs(parts.query)
        with self.state._lock:
            self.state.requests.append((self.command, self.path))
            denied = ("create", "pods/exec") in self.state._forbidden
            known = ("pods", namespace, pod) in dict(self.state._live())
        if denied or not known:
            code = 403 if denied else 404
            body = json.dumps(_status(code, f'pods "{pod}" is forbidden' if denied else f'pods "{pod}" not found'))
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())
            return
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        handler = self.state.exec_handler
        container = (query.get("container") or [""])[0]
        answer = handler(namespace, pod, container, query.get("command", [])) if handler else ("", 126)
        stdout, exit_code = answer if answer is not None else ("", 127)
        if stdout:
            self._frame(0x2, b"\x01" + stdout.encode())
        status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        if exit_code:
            status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                      "message": f"command terminated with non-zero exit code: exit status {exit_code}",
                      "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]}}  # fmt: skip
        self._frame(0x2, b"\x03" + json.dumps(status).encode())
        self._frame(0x8, (1000).to_bytes(2, "big"))
        self.close_connection = True

    def _frame(self, opcode: int, payload: bytes) -> None:
        """One unmasked server frame (RFC 6455 section 5.2)."""
        size = len(payload)
        head = bytes([0x80 | opcode])
        if size < 126:
            head += bytes([size])
        elif size < 1 << 16:
            head += bytes([126]) + size.to_bytes(2, "big")
        else:
            head += bytes([127]) + size.to_bytes(8, "big")
        self.wfile.write(head + payload)
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass


class Flood:
    """`count` containerRecords of pods `<namespace>/flood-NNNNNNN`, each Injected with one Apply event, as JSON written
    a chunk at a time (a fixed width each, so the length is known before the first byte)."""

    CHUNK = 4096

    def __init__(self, namespace: str, count: int) -> None:
        self.namespace = namespace
        self.count = count
        self._stamp = _now()

    def _record(self, index: int) -> bytes:
        return (
            f'{{"id":"{self.namespace}/flood-{index:07d}","selectorKey":".","phase":"Injected","injectedCount":1,'
            f'"recoveredCount":0,"events":[{{"type":"Succeeded","operation":"Apply","timestamp":"{self._stamp}"}}]}}'
        ).encode()

    def __len__(self) -> int:
        return 2 + self.count * len(self._record(0)) + max(0, self.count - 1)

    def chunks(self) -> Iterator[bytes]:
        yield b"["
        for start in range(0, self.count, self.CHUNK):
            records = b",".join(self._record(i) for i in range(start, min(self.count, start + self.CHUNK)))
            yield (b"," if start else b"") + records
        yield b"]"


def _continue_token(namespace: str, name: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"v": "meta.k8s.io/v1", "start": [namespace, name]}).encode()).decode()


def _continue_key(token: str) -> tuple[str, str] | None:
    try:
        start = json.loads(base64.urlsafe_b64decode(token.encode()))["start"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    return (str(start[0]), str(start[1])) if isinstance(start, list) and len(start) == 2 else None


def _status(code: int, message: str, name: str | None = None, kind: str | None = None) -> dict[str, Any]:
    details = {k: v for k, v in (("name", name), ("kind", kind)) if v is not None}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": _REASONS.get(code, "Unknown"),
        "details": details,
        "code": code,
    }


def _query_bool(value: str | None) -> bool:
    """A boolean query parameter as the API server reads it: absent, "0" and "false" (any case) are false,
    anything else true -- the Python client sends "True" (apimachinery pkg/runtime/conversion.go
    Convert_Slice_string_To_bool)."""
    return value is not None and value != "0" and value.lower() != "false"


_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
    "metadata.namespace",
    "metadata.name",
)


def _event_fields(event: dict[str, Any]) -> dict[str, str]:
    """An Event's selectable fields (pkg/registry/core/event/strategy.go ToSelectableFields)."""
    involved = event.get("involvedObject") or {}
    out = {f"involvedObject.{k}": str(involved.get(k, "")) for k in
           ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")}  # fmt: skip
    out.update(
        {
            "reason": str(event.get("reason", "")),
            "reportingComponent": str(event.get("reportingComponent", "")),
            "source": str((event.get("source") or {}).get("component", "")),
            "type": str(event.get("type", "")),
            "metadata.namespace": str(event["metadata"].get("namespace", "")),
            "metadata.name": str(event["metadata"].get("name", "")),
        }
    )
    return out


GPU = "nvidia.com/gpu"


def _gpus(pod: dict[str, Any]) -> int:
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0))
        for c in (pod.get("spec") or {}).get("containers") or []
    )


def _tolerated(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """k8s.io/api core/v1 toleration.go ToleratesTaint."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if not t.get("key") and t.get("operator") == "Exists":
            return True
        if t.get("key") == taint.get("key") and (
            t.get("operator") == "Exists" or (t.get("value") or "") == (taint.get("value") or "")
        ):
            return True
    return False


def _denied(webhook: str, message: str) -> dict[str, Any]:
    out = _status(403, f'admission webhook "{webhook}" denied the request: {message}')
    return out


def _affected_namespaces(body: dict[str, Any], namespace: str) -> set[str]:
    """Namespaces of every PodSelector in the object: spec (selector) and spec.target (its selector), each
    defaulted to the object's namespace by the mutating webhook (api/v1alpha1/common_webhook.go Default)."""
    spec = body.get("spec") or {}
    spaces: set[str] = set()
    for holder in (spec, spec.get("target")):
        if isinstance(holder, dict) and isinstance(holder.get("selector"), dict):
            spaces.update(holder["selector"].get("namespaces") or [namespace])
    return spaces


def _selected_count(mode: Any, value: Any, count: int, body: dict[str, Any], draw: Any) -> int:
    """How many of `count` matching pods Chaos Mesh picks (pkg/selector/generic/mode.go FilterObjectsByMode,
    master: math.Ceil, "at least one object should be selected"); random-max-percent draws its percentage
    from [0, max], so it can pick none."""
    if count == 0:
        return 0
    if mode == "one":
        return 1
    if mode == "fixed":
        return min(int(value), count)
    if mode == "fixed-percent":
        return math.ceil(count * int(value) / 100)
    if mode == "random-max-percent":
        maximum = int(value)
        percent = maximum if draw is None else int(draw(maximum, body["metadata"]["name"]))
        return math.ceil(count * percent / 100)
    return count


# Kinds whose selector is a ContainerSelector (api/v1alpha1/*_types.go GetSelectorSpecs): their records are
# `ns/pod/container` (pkg/selector/container/selector.go Container.Id); the others' are `ns/pod`.
CONTAINER_KINDS = {"StressChaos", "IOChaos", "TimeChaos", "DNSChaos"}


def _target_ids(chaos: dict[str, Any], pod: dict[str, Any]) -> list[str]:
    """The record ids Chaos Mesh makes for one selected pod. A ContainerSelector without containerNames takes
    `pod.Spec.Containers[0]`; with them, every container of the pod whose name is listed
    (pkg/selector/container/selector.go SelectImpl.Select)."""
    spec = chaos.get("spec") or {}
    base = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    kind, action = chaos.get("kind"), spec.get("action")
    if kind not in CONTAINER_KINDS and not (kind == "PodChaos" and action == "container-kill"):
        return [base]
    containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    wanted = spec.get("containerNames") or []
    if not wanted:
        return [f"{base}/{containers[0]}"] if containers else []
    return [f"{base}/{c}" for c in containers if c in wanted]


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _now(offset: float = 0.0) -> str:
    return datetime.fromtimestamp(time.time() + offset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration_exceeded(spec: dict[str, Any], age: float, one_shot: bool) -> bool:
    """Whether Chaos Mesh has stopped the object for its duration. Upstream (chaos-mesh/chaos-mesh): the
    generated `DurationExceeded(now)` of every kind (cmd/chaos-builder template -> api/v1alpha1
    zz_generated.chaosmesh.go) is true once creationTimestamp + spec.duration is before now, and the
    desired-phase controller (controllers/common/desiredphase/controller.go, CalcDesiredPhase) then sets
    status.experiment.desiredPhase to Stop, after which the records are recovered and AllInjected turns False
    (controllers/common/condition/controller.go). A one-shot kind (pod-kill, container-kill) is checked
    before the duration and always stays Run. `age` runs from the object's creation, as upstream's does."""
    duration = _go_seconds(spec.get("duration"))
    return duration is not None and age >= duration and not one_shot


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _go_seconds(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    return sum(float(n) * _GO_UNITS[u] for n, u in parts) if parts else None


def kubernetes_client(url: str) -> kubernetes.client.ApiClient:
    """A real kubernetes ApiClient pointed at `url` (no credentials: the loopback server has no auth)."""
    configuration = kubernetes.client.Configuration()
    configuration.host = url
    return kubernetes.client.ApiClient(configuration)
