"""The Chaos Mesh backend: rendered manifests -> chaos-mesh.org objects through the Kubernetes API.

Every call goes through `_call`, which retries 429/5xx/connection errors with backoff, turns a 403 into
the RBAC rule that is missing, and records an `ApiEvent` in `self.events` for the audit record.
Objects are found again by their deterministic names (apply is idempotent) and by the run label (sweep),
so a step that crashed, was killed or retried leaves nothing behind that the exit handler cannot find.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config
import urllib3
from kubernetes.client.exceptions import ApiException

from kfchaos import kubeconnect, netsafe
from kfchaos.faults import clustercheck
from kfchaos.faults.backend import (
    RECORDS_FINALIZER,
    STUCK_REMEDY,
    AdmissionDenied,
    ApiEvent,
    BackendError,
    ChaosMeshNotInstalled,
    FaultHandle,
    InjectionFailed,
    InjectionReport,
    InjectionTimeout,
    LeftNeverInjected,
    Manifest,
    NamespaceGone,
    PermissionDenied,
    PreflightReport,
    RecoveryTimeout,
    StuckTerminating,
    TargetsGone,
)
from kfchaos.faults.catalog import CATALOG, GROUP, PLURALS, VERSION
from kfchaos.faults.gpu import EXEC_KIND, pin_to_node
from kfchaos.faults.naming import LABEL_MANAGED_BY, LABEL_RUN_ID, MANAGED_BY, run_selector
from kfchaos.faults.records import (
    apply_failures,
    never_injected,
    parse_records,
    raw_records,
    selects_containers,
    stale_reason,
    stamp,
    wrong_container,
)
from kfchaos.faults.render import render_fault
from kfchaos.faults.retry import RETRYABLE_STATUS, RetryPolicy
from kfchaos.faults.safety import check_pod_share
from kfchaos.faultspec.kinds import TRAFFIC_SIDE_TYPES
from kfchaos.spec import Experiment, FaultBase
from kfchaos.units import parse_duration

T = TypeVar("T")
_ONE_SHOT = {(e.kind, e.action) for e in CATALOG.values() if e.one_shot}
HOST_ENV = "KFCHAOS_KUBE_HOST"  # an explicit API URL for pipeline steps; else in-cluster config
CONTEXT_ENV = "KFCHAOS_KUBE_CONTEXT"
INJECT_TIMEOUT_ENV = "KFCHAOS_INJECT_TIMEOUT"  # e.g. 2m: how long a step waits for Selected + AllInjected
RECOVER_TIMEOUT_ENV = "KFCHAOS_RECOVER_TIMEOUT"
DEFAULT_INJECT_TIMEOUT = 120.0
DEFAULT_RECOVER_TIMEOUT = 300.0
# Failed Apply attempts in a row on one record before wait_injected calls the fault failed. Chaos Mesh retries a
# failed Apply at once and without end (controllers/common/records/controller.go: `needRetry`, Requeue with the
# controller's rate limiter, "TODO: add backoff and retry mechanism"), so three in a row take well under a second
# and a single transient error (a conflict) does not end the wait.
DEFAULT_APPLY_FAILURE_LIMIT = 3
# The most one answer may hold. The API server takes no request body above 3 MiB (k8s.io/apiserver pkg/server/
# config.go, MaxRequestBodyBytes) and etcd stores no value above 1.5 MiB by default (--max-request-bytes), so no object
# it serves comes near 4 MiB (a chaos object's status is written by Chaos Mesh's controller through the same API); a
# larger answer is not the API server's, and is refused unread (kfchaos.netsafe.AnswerLimit) instead of being held and
# decoded into objects many times its size.
MAX_OBJECT_BYTES = 4 << 20
# Lists come in pages of this many objects, each answer under MAX_PAGE_BYTES (1 MiB an object on average; a chaos
# object, its records and their events included, is a few KB to a few hundred).
LIST_PAGE = 16
MAX_PAGE_BYTES = 16 << 20
# More objects than this in one list (a run's faults, a selector's pods) is not a list kfchaos asked for.
MAX_LISTED = 10_000
# A page answered 410 Gone (its continue token expired: k8s.io/apiserver pkg/storage/etcd3/errors.go,
# continueExpired) restarts the list from its first page, this many times at most. client-go's pager falls back to
# one unpaged list instead (k8s.io/client-go tools/pager/pager.go, FullListIfExpired), which is unbounded.
MAX_RELISTS = 3


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c.get("type", ""): c.get("status", "") for c in (obj.get("status") or {}).get("conditions") or []}


def label_selector(selector: dict[str, Any]) -> str:
    """A Chaos Mesh selector's labels as a Kubernetes label selector string."""
    terms = [f"{k}={v}" for k, v in sorted((selector.get("labelSelectors") or {}).items())]
    for expression in selector.get("expressionSelectors") or []:
        key, op, values = expression["key"], expression["operator"], expression.get("values") or []
        terms.append(
            {
                "In": f"{key} in ({','.join(values)})",
                "NotIn": f"{key} notin ({','.join(values)})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }[op]
        )
    return ",".join(terms)


class ChaosMeshBackend:
    """`FaultBackend` on `kubernetes.client.CustomObjectsApi` (chaos objects) and `CoreV1Api` (pods)."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        retry: RetryPolicy | None = None,
        poll_interval: float = 1.0,
        request_timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        experiment: Experiment | None = None,
        run_id: str | None = None,
        pipeline_version: str | None = None,
        inject_timeout: float = DEFAULT_INJECT_TIMEOUT,
        recover_timeout: float = DEFAULT_RECOVER_TIMEOUT,
        placement_checks: bool = True,
        apply_failure_limit: int = DEFAULT_APPLY_FAILURE_LIMIT,
    ) -> None:
        self.api_client = api_client
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.extensions = kubernetes.client.ApiextensionsV1Api(api_client)
        self.retry = retry or RetryPolicy()
        self.poll_interval = poll_interval
        self.request_timeout = request_timeout
        self._sleep = sleep
        # Bound to an experiment run, the backend also takes faults (rendered here) instead of manifests,
        # and sweeps the namespaces that experiment touches.
        self.experiment = experiment
        self.run_id = run_id
        self.pipeline_version = pipeline_version
        self.inject_timeout = inject_timeout
        self.recover_timeout = recover_timeout
        self.apply_failure_limit = max(1, apply_failure_limit)
        self.events: list[ApiEvent] = []
        # Preflight's reads outside the target namespace (chaos-daemon pods, nodes, the controller's
        # Deployment, namespaces; kfchaos.faults.clustercheck): best effort, noted as unchecked when the
        # identity may not read them (manifests/ does not grant them; `kfchaos doctor` runs them in full).
        self.placement_checks = placement_checks
        self._deadline: float | None = None  # monotonic; set while a call with a whole-call deadline runs

    @classmethod
    def from_config(
        cls, host: str | None = None, kubeconfig: str | None = None, context: str | None = None, **options: Any
    ) -> ChaosMeshBackend:
        """An explicit host (no credentials; for a proxy such as `kubectl proxy`), a kubeconfig (file and/or
        context), or else in-cluster config (a pipeline step's service account), falling back to ~/.kube/config."""
        if host is not None or kubeconfig is not None or context is not None:
            return cls(kubeconnect.api_client(kubeconfig, context, host), **options)
        try:
            return cls(kubeconnect.api_client(), **options)
        except (kubernetes.config.ConfigException, OSError) as exc:
            raise BackendError(
                f"no cluster access: not in a pod and no usable kubeconfig ({exc}); give --host or --kubeconfig"
            ) from None

    @classmethod
    def from_environment(cls, experiment: Experiment, run_id: str, **options: Any) -> ChaosMeshBackend:
        """For pipeline steps: $KFCHAOS_KUBE_HOST, else $KUBECONFIG (+ $KFCHAOS_KUBE_CONTEXT), else in-cluster;
        wait timeouts from $KFCHAOS_INJECT_TIMEOUT and $KFCHAOS_RECOVER_TIMEOUT (durations such as 2m)."""
        for env, key in ((INJECT_TIMEOUT_ENV, "inject_timeout"), (RECOVER_TIMEOUT_ENV, "recover_timeout")):
            if os.environ.get(env):
                try:
                    options.setdefault(key, parse_duration(os.environ[env]))
                except ValueError as exc:
                    raise BackendError(f"${env}: {exc}") from None
        return cls.from_config(
            host=os.environ.get(HOST_ENV) or None,
            kubeconfig=os.environ.get("KUBECONFIG") or None,
            context=os.environ.get(CONTEXT_ENV) or None,
            experiment=experiment,
            run_id=run_id,
            **options,
        )

    def manifest_of(self, item: Manifest | FaultBase) -> Manifest:
        """A manifest as given, or the rendering of an experiment fault for the bound run."""
        if isinstance(item, dict):
            return item
        if self.experiment is None or self.run_id is None:
            raise BackendError("this backend has no experiment run bound; pass rendered manifests")
        return render_fault(self.experiment, item, self.run_id, self.pipeline_version)

    def experiment_namespaces(self) -> list[str] | None:
        """Every namespace the bound experiment's faults create objects in; None when no experiment is bound."""
        if self.experiment is None:
            return None
        spaces = {self.experiment.spec.target.namespace}
        spaces.update(
            self.experiment.fault_namespace(f) for f in self.experiment.spec.faults if f.type not in TRAFFIC_SIDE_TYPES
        )
        return sorted(spaces)

    # ------------------------------------------------------------ calls, retries, audit

    def _call(
        self,
        verb: str,
        resource: str,
        group: str,
        namespace: str | None,
        name: str | None,
        call: Callable[[], T],
        dry_run: bool = False,
        ok_statuses: tuple[int, ...] = (),
        max_bytes: int = MAX_OBJECT_BYTES,
    ) -> T | ApiException:
        """Run one API call with retries, each answer read up to `max_bytes` (a larger one is refused unread, and
        not retried). Returns the result, or the ApiException when its status is in `ok_statuses` (404 on delete,
        409 on create: answers, not failures)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                with netsafe.AnswerLimit(max_bytes):
                    result = call()
            except netsafe.AnswerTooLarge as exc:
                self._record(verb, resource, namespace, name, 0, None, attempt, dry_run, type(exc).__name__)
                raise BackendError(
                    f"{verb} {resource} {namespace or ''}/{name or ''}: {exc}: not an answer the Kubernetes API "
                    "server gives (it serves no object that large)"
                ) from None
            except ApiException as exc:
                self._record(verb, resource, namespace, name, exc.status or 0, None, attempt, dry_run, exc.reason)
                if exc.status in ok_statuses:
                    return exc
                if _namespace_gone(exc, verb):
                    raise NamespaceGone(
                        f"{verb} {resource} {namespace or ''}/{name or ''}: namespace {namespace!r} is being deleted "
                        f"or is gone ({_message(exc)}); nothing can be injected there (not an RBAC problem)"
                    ) from None
                if exc.status == 403 and _is_admission_denial(_message(exc)):
                    raise AdmissionDenied(verb, resource, namespace, name, _message(exc)) from None
                if exc.status == 403:
                    raise PermissionDenied(verb, resource, group, namespace, _message(exc)) from None
                if exc.status in RETRYABLE_STATUS and attempt < self.retry.attempts and self._time_left():
                    self._sleep(self._capped(self.retry.delay(attempt, _retry_after(exc))))
                    continue
                raise BackendError(
                    f"{verb} {resource} {namespace or ''}/{name or ''} failed with {exc.status} {exc.reason} "
                    f"after {attempt} attempt(s): {_message(exc)}"
                ) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                self._record(verb, resource, namespace, name, 0, None, attempt, dry_run, type(exc).__name__)
                if attempt < self.retry.attempts and self._time_left():
                    self._sleep(self._capped(self.retry.delay(attempt)))
                    continue
                raise BackendError(
                    f"{verb} {resource}: the Kubernetes API did not answer after {attempt} attempts ({exc})"
                ) from None
            except (ValueError, RecursionError) as exc:  # decoding an answer that is not the API's (not UTF-8,
                # not JSON, nested too deep, no items: kubernetes/client/api_client.py `deserialize`)
                self._record(verb, resource, namespace, name, 0, None, attempt, dry_run, type(exc).__name__)
                raise BackendError(
                    f"{verb} {resource}: the Kubernetes API's answer is not one ({type(exc).__name__})"
                ) from None
            self._record(verb, resource, namespace, name, 201 if verb == "create" else 200, result, attempt, dry_run)
            return result

    def _time_left(self) -> bool:
        return self._deadline is None or time.monotonic() < self._deadline

    def _capped(self, delay: float) -> float:
        return delay if self._deadline is None else max(0.0, min(delay, self._deadline - time.monotonic()))

    def _record(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        name: str | None,
        code: int,
        result: Any,
        attempt: int,
        dry_run: bool,
        error: str | None = None,
    ) -> None:
        meta = result.get("metadata", {}) if isinstance(result, dict) else {}
        self.events.append(
            ApiEvent(
                time=_now(),
                verb=verb,
                kind=resource,
                namespace=namespace,
                name=name,
                code=code,
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
                attempt=attempt,
                dry_run=dry_run,
                error=error,
            )
        )

    def _kw(self) -> dict[str, Any]:
        """The per-request timeout, cut to what is left of a whole-call deadline. As a (connect, read) pair: the
        kubernetes client (kubernetes/client/rest.py RESTClientObject.request) honours a single number only
        when it is an int and silently drops a float, which left requests without any timeout."""
        timeout = self.request_timeout
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise BackendError("the call's deadline passed before the Kubernetes API answered")
            timeout = min(timeout, left)
        return {"_request_timeout": (timeout, timeout)}

    def _raw_kw(self) -> dict[str, Any]:
        return {**self._kw(), "_preload_content": False}

    # ------------------------------------------------------------ generic object access (chaos kinds and pods)

    def _create(self, manifest: Manifest, dry_run: bool = False) -> dict[str, Any] | ApiException:
        plural, group = _plural_group(manifest)
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        extra = {"dry_run": "All"} if dry_run else {}
        if plural == "pods":

            def call() -> dict[str, Any]:
                body = self.core.create_namespaced_pod(namespace, manifest, **extra, **self._kw())
                return dict(self.api_client.sanitize_for_serialization(body))

        else:

            def call() -> dict[str, Any]:
                return dict(
                    self.custom.create_namespaced_custom_object(
                        GROUP, VERSION, namespace, plural, manifest, **extra, **self._kw()
                    )
                )

        return self._call("create", plural, group, namespace, name, call, dry_run=dry_run, ok_statuses=(409,))

    def _get(self, handle: FaultHandle) -> dict[str, Any] | None:
        if handle.plural == "pods":

            def call() -> dict[str, Any]:
                pod = self.core.read_namespaced_pod(handle.name, handle.namespace, **self._kw())
                return dict(self.api_client.sanitize_for_serialization(pod))

        else:

            def call() -> dict[str, Any]:
                return dict(
                    self.custom.get_namespaced_custom_object(
                        handle.group, handle.version, handle.namespace, handle.plural, handle.name, **self._kw()
                    )
                )

        result = self._call("get", handle.plural, handle.group, handle.namespace, handle.name, call, ok_statuses=(404,))
        return None if isinstance(result, ApiException) else result

    def _delete(self, plural: str, namespace: str, name: str) -> bool:
        """Delete; False when it was already gone."""
        group = "" if plural == "pods" else GROUP
        if plural == "pods":

            def call() -> Any:
                return self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0, **self._kw())

        else:

            def call() -> Any:
                return self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, name, **self._kw()
                )

        return not isinstance(
            self._call("delete", plural, group, namespace, name, call, ok_statuses=(404,)), ApiException
        )

    def _list(self, plural: str, namespace: str | None, selector: str) -> list[dict[str, Any]] | None:
        """Objects of `plural` matching `selector`, in one namespace or all; None if the kind is not served. Read in
        pages (LIST_PAGE objects, each answer under MAX_PAGE_BYTES); a page answered 410 Gone restarts the list
        (MAX_RELISTS times at most); more than MAX_LISTED objects is refused: memory and time stay bounded whatever
        the server sends. kfchaos opens no watch: every wait polls (its calls bounded by deadlines), so an expired
        watch cannot strand it."""
        group = "" if plural == "pods" else GROUP
        items: list[dict[str, Any]] = []
        token: str | None = None
        relists = 0
        while True:
            result = self._call(
                "list",
                plural,
                group,
                namespace,
                None,
                lambda token=token: self._page(plural, namespace, selector, token),  # type: ignore[misc]
                ok_statuses=(404, 410),
                max_bytes=MAX_PAGE_BYTES,
            )
            if isinstance(result, ApiException) and result.status == 404:
                return None
            if isinstance(result, ApiException):  # 410 Gone: the list's snapshot expired between two pages
                relists += 1
                if relists > MAX_RELISTS:
                    raise BackendError(
                        f"list {plural} {namespace or '(all namespaces)'}: answered 410 Gone {relists} times "
                        f"({_message(result)}); the list was restarted {MAX_RELISTS} times and never completed"
                    )
                items, token = [], None
                continue
            page, token = result
            items += page
            if len(items) > MAX_LISTED:
                raise BackendError(
                    f"list {plural} {namespace or '(all namespaces)'} {selector!r}: more than {MAX_LISTED} objects; "
                    "not a list kfchaos reads"
                )
            if not token:
                return items

    def list_objects(self, plural: str, namespace: str, selector: str = "") -> list[dict[str, Any]] | None:
        """Objects of a chaos kind or pods in one namespace (paged and bounded as `_list`); None if not served."""
        return self._list(plural, namespace, selector)

    def _page(
        self, plural: str, namespace: str | None, selector: str, token: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of a list: its objects and the token of the next page (None: the last)."""
        paging: dict[str, Any] = {"label_selector": selector, "limit": LIST_PAGE}
        if token:
            paging["_continue"] = token
        if plural == "pods":
            # Raw JSON, not the typed V1PodList: the client's model raises ValueError on a list without
            # `items` (kubernetes/client/models/v1_pod_list.py), which a proxy or a broken server can send.
            pods = (
                self.core.list_namespaced_pod(namespace, **paging, **self._raw_kw())
                if namespace
                else self.core.list_pod_for_all_namespaces(**paging, **self._raw_kw())
            )
            listed = _list_answer(pods.data)
        elif namespace:
            custom = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, **paging, **self._kw()
            )
            listed = _list_answer(custom)
        else:
            listed = _list_answer(
                self.custom.list_cluster_custom_object(GROUP, VERSION, plural, **paging, **self._kw())
            )
        following = (listed.get("metadata") or {}).get("continue")
        return _items(listed), following if isinstance(following, str) and following else None

    # ------------------------------------------------------------ FaultBackend

    def preflight(self, items: Sequence[Manifest | FaultBase]) -> PreflightReport:
        """Chaos Mesh installed, every target selector matches a running pod, every object passes a dry run."""
        manifests = [self.manifest_of(item) for item in items]
        report = PreflightReport()
        for plural in sorted({_plural_group(m)[0] for m in manifests if m["kind"] in PLURALS}):
            crd = f"{plural}.{GROUP}"
            result = self._call(
                "get",
                "customresourcedefinitions",
                "apiextensions.k8s.io",
                None,
                crd,
                lambda crd=crd: self.extensions.read_custom_resource_definition(crd, **self._kw()),  # type: ignore[misc]
                ok_statuses=(404,),
            )
            if isinstance(result, ApiException):
                raise ChaosMeshNotInstalled(
                    f"Chaos Mesh is not installed in this cluster: CustomResourceDefinition {crd} not found. "
                    "Install Chaos Mesh (helm chart chaos-mesh/chaos-mesh) before running this experiment"
                )
            report.crds.append(crd)
        for item, manifest in zip(items, manifests, strict=True):
            name = manifest["metadata"]["name"]
            pods = self._running_targets(manifest)
            if not pods:
                namespace, selector = _target_of(manifest)
                raise BackendError(
                    f"{manifest['kind']} {name}: the target selector {selector!r} matches no running pod in "
                    f"namespace {namespace!r}; nothing would be injected"
                )
            report.matching_pods[name] = len(pods)
            sidecar_first = _first_container_problem(manifest, pods)
            if sidecar_first:
                raise BackendError(sidecar_first)
            if self.experiment is not None and not isinstance(item, dict):
                check_pod_share(self.experiment, item, len(pods))
            other_side = self._other_side(manifest)
            if manifest["kind"] == EXEC_KIND:
                continue  # not an API object; exec is checked when it runs
            # `from`/`both` inject on the target pods too (through their nodes' chaos-daemon); `to` only on ours.
            both_ends = (manifest.get("spec") or {}).get("direction") in ("from", "both")
            self._check_placement(manifest, pods + (other_side if both_ends else []), report)
            created = self._create(_with_node(manifest, pods), dry_run=True)
            # 409: the object exists already (a retried step) - the server accepted it once.
            report.dry_run.append(name)
            del created
        return report

    def _other_side(self, manifest: Manifest) -> list[dict[str, Any]]:
        """Running pods of a network fault's `spec.target`: Chaos Mesh selects them too (pkg/selector,
        api/v1alpha1/networkchaos_types.go Target *PodSelector) and fails when none match."""
        target = (manifest.get("spec") or {}).get("target")
        if manifest["kind"] != "NetworkChaos" or not isinstance(target, dict):
            return []
        selector = target.get("selector") or {}
        namespace = (selector.get("namespaces") or [manifest["metadata"]["namespace"]])[0]
        listed = self._list("pods", namespace, label_selector(selector)) or []
        running = [p for p in listed if (p.get("status") or {}).get("phase") == "Running"]
        if not running:
            raise BackendError(
                f"NetworkChaos {manifest['metadata']['name']}: its target (the other side) "
                f"{label_selector(selector)!r} matches no running pod in namespace {namespace!r}; "
                "Chaos Mesh would fail to select it"
            )
        return running

    def _check_placement(self, manifest: Manifest, pods: list[dict[str, Any]], report: PreflightReport) -> None:
        """chaos-daemon on the pods' nodes and the namespace filter (kfchaos.faults.clustercheck), before
        anything is injected. What the identity may not read is noted as unchecked, not failed."""
        name = manifest["metadata"]["name"]
        if not self.placement_checks:
            return
        try:
            problems = clustercheck.namespace_filter_gaps(self.api_client, clustercheck.selected_namespaces([manifest]))
            if clustercheck.needs_daemon(manifest):
                problems += clustercheck.daemon_gaps(
                    self.api_client, [(p.get("spec") or {}).get("nodeName") for p in pods]
                )
        except ApiException as exc:
            report.unchecked.append(f"{name}: placement ({exc.status} {exc.reason})")
            return
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            report.unchecked.append(f"{name}: placement ({type(exc).__name__})")
            return
        if problems:
            raise BackendError(f"{manifest['kind']} {name} cannot be injected: " + "; ".join(problems))

    def _running_targets(self, manifest: Manifest) -> list[dict[str, Any]]:
        namespace, selector = _target_of(manifest)
        pods = self._list("pods", namespace, selector) or []
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return sorted(running, key=lambda p: p["metadata"]["name"])

    def apply(self, item: Manifest | FaultBase) -> FaultHandle:
        """Create the object; if it exists (a retried step, or a reply that was lost), take the existing one."""
        manifest = self.manifest_of(item)
        if manifest["kind"] == EXEC_KIND:
            raise BackendError(
                "gpu-memory-pressure with method exec is rendered but not applied by this backend yet; use method pod"
            )
        plural, _ = _plural_group(manifest)
        meta = manifest["metadata"]
        if plural == "pods":
            manifest = _with_node(manifest, self._running_targets(manifest))
        result = self._create(manifest)
        if isinstance(result, ApiException):  # 409 AlreadyExists
            probe = _handle(manifest, "")
            existing = self._get(probe)
            if existing is None:
                raise BackendError(f"{manifest['kind']} {meta['name']} exists and vanished at once; retry the step")
            run = (existing["metadata"].get("labels") or {}).get(LABEL_RUN_ID)
            if run != meta["labels"].get(LABEL_RUN_ID):
                raise BackendError(
                    f"{manifest['kind']} {meta['namespace']}/{meta['name']} exists but belongs to run {run!r}, "
                    f"not {meta['labels'].get(LABEL_RUN_ID)!r}; refusing to adopt it"
                )
            result = existing
        return _handle(manifest, str(result["metadata"].get("uid", "")))

    def wait_injected(self, handle: FaultHandle, timeout: float | None = None) -> InjectionReport:
        """Poll until Selected and AllInjected are True (a Pod: Running and ready, i.e. memory held).
        `timeout` defaults to the backend's inject_timeout. Ends early with InjectionFailed once a record shows
        `apply_failure_limit` failed Apply attempts in a row (kfchaos.faults.records.apply_failures)."""
        timeout = self.inject_timeout if timeout is None else timeout
        started = time.monotonic()
        last: dict[str, Any] | None = None
        while True:
            last = self._get(handle)
            if last is None:
                raise BackendError(f"{handle.kind} {handle.namespace}/{handle.name} disappeared while being injected")
            if handle.plural == "pods" and (last.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
                # Ended before it was ready: rejected by the kubelet (nodeName bypasses the scheduler, so no free
                # nvidia.com/gpu reads as phase Failed, reason OutOfnvidia.com/gpu: kubernetes
                # pkg/kubelet/lifecycle/predicate.go), or the allocator held less than asked (exit 4). Waiting
                # longer cannot make it injected.
                status = last.get("status") or {}
                terminated = [
                    (s.get("state") or {}).get("terminated") or {} for s in status.get("containerStatuses") or []
                ]
                detail = "; ".join(
                    f"exit {t.get('exitCode')} {t.get('reason') or ''} {t.get('message') or ''}".strip()
                    for t in terminated
                    if t
                )
                raise InjectionTimeout(
                    f"{handle.kind} {handle.namespace}/{handle.name} ended ({status.get('phase')}"
                    f"{', ' + status['reason'] if status.get('reason') else ''}"
                    f"{': ' + status['message'] if status.get('message') else ''}"
                    f"{'; ' + detail if detail else ''}) before holding the asked memory; not injected"
                )
            targets = _injected_targets(handle, last)
            if targets is not None:
                problems = self.target_problems(last, one_shot=handle.one_shot)
                if problems:
                    raise InjectionTimeout(
                        f"{handle.kind} {handle.namespace}/{handle.name} reports AllInjected but does not hit its "
                        f"intended targets: {'; '.join(problems)}"
                    )
                return InjectionReport(handle, targets, time.monotonic() - started, injection_time(handle, last))
            failed = self._apply_failed(handle, last)
            if failed is not None:
                raise failed
            if time.monotonic() - started >= timeout:
                events = "; ".join(self.object_events(handle)[-3:]) or "none"
                raise InjectionTimeout(
                    f"{handle.kind} {handle.namespace}/{handle.name} not injected after {timeout:g}s "
                    f"(conditions {_conditions(last) or (last.get('status') or {}).get('phase')}; events: {events}); "
                    "the fault cannot be shown to have been active"
                )
            self._sleep(self.poll_interval)

    def _apply_failed(self, handle: FaultHandle, obj: dict[str, Any]) -> InjectionFailed | None:
        """InjectionFailed, with the controller's own message, once a record's Apply has failed
        `apply_failure_limit` times in a row; None while no record has."""
        if handle.plural == "pods":
            return None
        failures = [f for f in apply_failures(obj) if f.attempts >= self.apply_failure_limit]
        if not failures:
            return None
        first = failures[0]
        others = f" (and {len(failures) - 1} other target(s))" if len(failures) > 1 else ""
        return InjectionFailed(
            f"{handle.kind} {handle.namespace}/{handle.name} failed to inject: "
            f"{netsafe.printable(first.message)[:300] or 'no message'} "
            f"(target {netsafe.printable(first.target)[:200]}: {first.attempts} failed Apply attempts in a row"
            f"{others}; Chaos Mesh keeps retrying, AllInjected {_conditions(obj).get('AllInjected') or 'unset'}); "
            "the fault cannot be shown to have been active"
        )

    def handle_of(self, item: Manifest | FaultBase) -> FaultHandle:
        """The handle of an object applied earlier (by an earlier stage's task), found by its deterministic name."""
        return _handle(self.manifest_of(item), "")

    def is_active(self, handle: FaultHandle) -> bool:
        """Whether the fault is verifiably active now. Chaos Mesh's condition controller sets `AllInjected` True
        only while every record's phase is Injected (chaos-mesh/chaos-mesh controllers/common/condition/
        controller.go, diffConditions); its desired-phase controller sets `status.experiment.desiredPhase` to Stop
        once the object is deleted, paused or past creation + duration (controllers/common/desiredphase/
        controller.go, CalcDesiredPhase; `DurationExceeded` is generated into api/v1alpha1 by
        cmd/chaos-builder). Records are recovered only after that, so AllInjected alone can still read True for
        a fault that has already been told to stop: both are required. A one-shot kind (pod-kill) stays Run
        by design, so its AllInjected is its whole activity."""
        obj = self._get(handle)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return False
        if handle.plural == "pods":
            return _injected_targets(handle, obj) is not None
        conditions = _conditions(obj)
        phase = ((obj.get("status") or {}).get("experiment") or {}).get("desiredPhase")
        if not (conditions.get("AllInjected") == "True" and phase == "Run" and conditions.get("Paused") != "True"):
            return False
        if handle.one_shot:
            return True  # the kill was the fault: its target is expected to be gone or restarted
        # Chaos Mesh keeps AllInjected True on the records it made once, whatever became of their pods
        # (kfchaos.faults.records): a fault whose recorded pods were replaced hits nothing.
        problems = self.target_problems(obj)
        if problems:
            where = f"{handle.kind} {handle.namespace}/{handle.name}"
            raise TargetsGone(f"{where} is not hitting a live target: " + "; ".join(problems))
        return True

    def target_problems(self, obj: dict[str, Any], one_shot: bool = False) -> list[str]:
        """Why the object's records do not show it hitting live, intended targets (empty when they do): each
        recorded pod must still be the pod that was injected (not for a one-shot kill, whose pod-kill deletes
        it: controllers/chaosimpl/podchaos/podkill/impl.go), and a container kind's record must name the
        intended container (kfchaos.faults.records)."""
        records = parse_records(obj)
        spec = obj.get("spec") or {}
        wanted = [str(c) for c in spec.get("containerNames") or []]
        created = _created(obj) if (obj.get("metadata") or {}).get("creationTimestamp") else None
        problems: list[str] = []
        for record in records:
            pod = self._pod(record.namespace, record.pod)
            reason = None if one_shot else stale_reason(record, pod, created)
            if reason is None and selects_containers(str(obj.get("kind")), spec.get("action")):
                reason = wrong_container(record, pod, wanted)
            if reason is not None:
                problems.append(reason)
        return problems

    def _pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod of that name now, None when there is none."""

        def call() -> dict[str, Any]:
            pod = self.core.read_namespaced_pod(name, namespace, **self._kw())
            return dict(self.api_client.sanitize_for_serialization(pod))

        result = self._call("get", "pods", "", namespace, name, call, ok_statuses=(404,))
        return None if isinstance(result, ApiException) else result

    def object_events(self, handle: FaultHandle) -> list[str]:
        """`reason: message` of the Kubernetes events about the object (why Chaos Mesh could not inject)."""

        def call() -> list[dict[str, Any]]:
            listed = self.core.list_namespaced_event(
                handle.namespace, field_selector=f"involvedObject.name={handle.name}", **self._raw_kw()
            )
            return _items(listed.data)

        result = self._call(
            "list", "events", "", handle.namespace, handle.name, call, ok_statuses=(403, 404), max_bytes=MAX_PAGE_BYTES
        )
        if isinstance(result, ApiException):
            return []
        return [
            f"{e.get('reason')}: {e.get('message')}"
            for e in result
            if (e.get("involvedObject") or {}).get("name") == handle.name
        ]

    def remove(self, handle: FaultHandle) -> None:
        self._delete(handle.plural, handle.namespace, handle.name)

    def wait_recovered(self, handle: FaultHandle, timeout: float | None = None) -> None:
        """Until the object is gone (its finalizer ran), or AllRecovered True, Paused False and desiredPhase Stop.
        `timeout` defaults to the backend's recover_timeout."""
        timeout = self.recover_timeout if timeout is None else timeout
        started = time.monotonic()
        while True:
            current = self._get(handle)
            if current is None or _recovered(handle, current):
                return
            if time.monotonic() - started >= timeout:
                remedy = ""
                if _stuck_on_records(handle.plural, current):
                    remedy = f"; {STUCK_REMEDY}: {_release_command(handle.plural, current)}"
                raise RecoveryTimeout(
                    f"{handle.kind} {handle.namespace}/{handle.name} not recovered after {timeout:g}s "
                    f"(conditions {_conditions(current)}); Chaos Mesh's finalizer may be stuck{remedy}"
                )
            self._sleep(self.poll_interval)

    def server_time(self, namespace: str | None = None) -> float:
        """The API server's clock (POSIX seconds), from the Date header its responses carry (Go net/http
        sets it; RFC 9110 §6.6.1), read from a list the sweep may make anyway. One-second resolution;
        refused when no Date header comes."""
        from email.utils import parsedate_to_datetime

        plural = next(iter(PLURALS.values()))
        headers: Any = None
        try:
            with netsafe.AnswerLimit(MAX_PAGE_BYTES):  # one object asked for; whatever comes is read no further
                answer = self._clock_answer(namespace, plural)
            headers = answer[2]
        except ApiException as exc:  # an error answer carries the header too
            headers = exc.headers
        except (urllib3.exceptions.HTTPError, OSError, netsafe.AnswerTooLarge) as exc:
            raise BackendError(f"cannot read the API server's clock: {exc}") from None
        date = (headers or {}).get("Date")
        if not date:
            raise BackendError("the API server sent no Date header; cannot age objects by its clock")
        return parsedate_to_datetime(date).timestamp()

    def _clock_answer(self, namespace: str | None, plural: str) -> Any:
        if namespace:
            return self.custom.list_namespaced_custom_object_with_http_info(
                GROUP, VERSION, namespace, plural, limit=1, **self._kw()
            )
        return self.custom.list_cluster_custom_object_with_http_info(GROUP, VERSION, plural, limit=1, **self._kw())

    def sweep(
        self,
        run_id: str | None,
        namespaces: list[str] | None = None,
        older_than: float | None = None,
        timeout: float = 60.0,
    ) -> int:
        """Delete every kfchaos object of run `run_id` (None: of any run, with `older_than`) in `namespaces`
        (None: those of the bound experiment, or all namespaces), then wait until they are gone.
        Returns how many objects were deleted."""
        namespaces = namespaces if namespaces is not None else self.experiment_namespaces()
        if run_id is None and older_than is None:
            raise BackendError("sweep needs a run id, or older_than to sweep every run's leftovers")
        # `is not None`, never truthiness: an empty run id is refused (run_selector), not taken for "every run".
        selector = run_selector(run_id) if run_id is not None else f"{LABEL_MANAGED_BY}={MANAGED_BY}"
        # One deadline for the whole call: every request's timeout and every retry is cut to what is left of it.
        self._deadline = time.monotonic() + timeout
        try:
            return self._sweep(run_id, namespaces, older_than, timeout, selector)
        finally:
            self._deadline = None

    def _sweep(
        self,
        run_id: str | None,
        namespaces: list[str] | None,
        older_than: float | None,
        timeout: float,
        selector: str,
    ) -> int:
        # Ages by the server's clock, as creationTimestamp is: a local clock ahead of the server's would
        # otherwise make other runs' live faults look old and sweep them.
        cutoff = None if older_than is None else self.server_time(namespaces[0] if namespaces else None) - older_than
        deleted = 0
        for namespace in namespaces or [None]:  # type: ignore[list-item]
            for plural in [*PLURALS.values(), "pods"]:
                for obj in self._list(plural, namespace, selector) or []:
                    if cutoff is not None and _created(obj) > cutoff:
                        continue
                    meta = obj["metadata"]
                    if meta.get("deletionTimestamp"):
                        continue  # already going; waited for below
                    if self._delete(plural, meta["namespace"], meta["name"]):
                        deleted += 1
        left: list[tuple[str, dict[str, Any]]] = []
        while True:
            try:
                left = [
                    (plural, o)
                    for namespace in namespaces or [None]  # type: ignore[list-item]
                    for plural in [*PLURALS.values(), "pods"]
                    for o in self._list(plural, namespace, selector) or []
                    if cutoff is None or _created(o) <= cutoff
                ]
            except BackendError:
                if self._time_left() or not left:
                    raise
                # The deadline passed mid-listing: report what the last complete listing showed.
            else:
                if not left:
                    return deleted
            if not self._time_left():
                objects = [_terminating(plural, o) for plural, o in left]
                commands = [_release_command(plural, o) for plural, o in left if _stuck_on_records(plural, o)]
                if all(_never_injected(plural, o) for plural, o in left):
                    raise LeftNeverInjected(timeout, objects, commands)
                raise StuckTerminating(timeout, objects, commands)
            self._sleep(self._capped(self.poll_interval))


# ---------------------------------------------------------------- helpers


def _terminating(plural: str, obj: dict[str, Any]) -> str:
    """One object a sweep could not see gone, and why, for StuckTerminating."""
    meta = obj.get("metadata") or {}
    where = f"{plural} {meta.get('namespace')}/{meta.get('name')}"
    if not meta.get("deletionTimestamp"):
        return f"{where} (not deleted yet)"
    finalizers = meta.get("finalizers") or []
    pending = [r for r in raw_records(obj) if r.get("phase") != "Not Injected"]
    never = [str(r.get("id")) for r in pending if never_injected(r)]
    unrecovered = [str(r.get("id")) for r in pending if not never_injected(r)]
    why = f"Terminating since {meta.get('deletionTimestamp')}, finalizers {finalizers}"
    if unrecovered:
        why += f", records not recovered: {', '.join(unrecovered)}"
    if never:
        why += f", records never injected (their Apply retried): {', '.join(never)}"
    return f"{where} ({why})"


def _first_container_problem(manifest: Manifest, pods: list[dict[str, Any]]) -> str | None:
    """A container kind without containerNames lands on each pod's first container
    (pkg/selector/container/selector.go: `pod.Spec.Containers[0]`): refused where a target pod has several,
    since the first may be a sidecar rather than the model server."""
    spec = manifest.get("spec") or {}
    if manifest["kind"] not in PLURALS or not selects_containers(manifest["kind"], spec.get("action")):
        return None
    if spec.get("containerNames"):
        return None
    for pod in pods:
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if len(names) > 1:
            return (
                f"{manifest['kind']} {manifest['metadata']['name']}: without containers, Chaos Mesh injects each "
                f"pod's first container, and pod {pod['metadata']['name']} has {names}: it would hit {names[0]!r}, "
                "which may be a sidecar. Name the container in the fault's `containers` (e.g. the model server's)"
            )
    return None


def _stuck_on_records(plural: str, obj: dict[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    return (
        plural != "pods" and bool(meta.get("deletionTimestamp")) and RECORDS_FINALIZER in (meta.get("finalizers") or [])
    )


def _never_injected(plural: str, obj: dict[str, Any]) -> bool:
    """A chaos object held by its records finalizer though Chaos Mesh never reported any of its records injected
    (kfchaos.faults.backend.LeftNeverInjected says why it stays)."""
    records = raw_records(obj)
    return _stuck_on_records(plural, obj) and bool(records) and all(never_injected(r) for r in records)


def _release_command(plural: str, obj: dict[str, Any]) -> str:
    """The command that lets a Terminating chaos object go: its finalizers removed (see STUCK_REMEDY for why
    the cleanFinalizer annotation is not enough)."""
    meta = obj.get("metadata") or {}
    return (
        f"kubectl patch {plural}.{GROUP} -n {meta.get('namespace')} {meta.get('name')} --type=merge "
        """-p '{"metadata":{"finalizers":null}}'"""
    )


def _plural_group(manifest: Manifest) -> tuple[str, str]:
    kind = manifest["kind"]
    if kind == "Pod":
        return "pods", ""
    if kind not in PLURALS:
        raise BackendError(f"kind {kind!r} is not one this backend applies")
    return PLURALS[kind], GROUP


def _handle(manifest: Manifest, uid: str) -> FaultHandle:
    plural, group = _plural_group(manifest)
    spec = manifest.get("spec") or {}
    return FaultHandle(
        kind=manifest["kind"],
        plural=plural,
        group=group,
        version="v1" if plural == "pods" else VERSION,
        namespace=manifest["metadata"]["namespace"],
        name=manifest["metadata"]["name"],
        uid=uid,
        one_shot=(manifest["kind"], spec.get("action")) in _ONE_SHOT,
    )


def _target_of(manifest: Manifest) -> tuple[str, str]:
    """(namespace, label selector) of the pods a manifest aims at."""
    spec = manifest["spec"]
    if manifest["kind"] == "Pod":
        term = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        match = term["labelSelector"]
        chaos_like = {
            "labelSelectors": match.get("matchLabels") or {},
            "expressionSelectors": match.get("matchExpressions") or [],
        }
        return term["namespaces"][0], label_selector(chaos_like)
    selector = spec["selector"]
    namespaces = selector.get("namespaces") or [manifest["metadata"]["namespace"]]
    return namespaces[0], label_selector(selector)


def _with_node(manifest: Manifest, targets: list[dict[str, Any]]) -> Manifest:
    """A GPU allocator pod pinned to the first running target pod's node (others pass through)."""
    if manifest["kind"] != "Pod" or not targets:
        return manifest
    node = (targets[0].get("spec") or {}).get("nodeName")
    return pin_to_node(manifest, node) if node else manifest


def _injected_targets(handle: FaultHandle, obj: dict[str, Any]) -> list[str] | None:
    """Who was hit, once injection is verified; None while it is not."""
    if handle.plural == "pods":
        status = obj.get("status") or {}
        statuses = status.get("containerStatuses") or []
        if status.get("phase") == "Running" and statuses and all(s.get("ready") for s in statuses):
            return [f"node/{(obj.get('spec') or {}).get('nodeName')}"]
        return None
    conditions = _conditions(obj)
    if conditions.get("Selected") == "True" and conditions.get("AllInjected") == "True":
        records = raw_records(obj)
        # No record: nothing was hit (random-max-percent may draw 0 %, pkg/selector/generic/mode.go), and
        # "all of nothing injected" is no evidence; keep waiting, so the step ends INCONCLUSIVE.
        return [str(r.get("id")) for r in records] or None
    return None


def injection_time(handle: FaultHandle, obj: dict[str, Any]) -> float | None:
    """When the object says the fault took effect: a chaos object's earliest Apply success among its records
    (the records controller appends {type: Succeeded, operation: Apply, timestamp} per record:
    chaos-mesh/chaos-mesh controllers/common/records/controller.go), an allocator pod's Ready condition's
    lastTransitionTime (it turns Ready once the memory is held). None when neither is there."""
    if handle.plural == "pods":
        ready = [
            c.get("lastTransitionTime")
            for c in (obj.get("status") or {}).get("conditions") or []
            if isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        ]
        return stamp(ready[0]) if ready else None
    times = [r.injected_at for r in parse_records(obj) if r.injected_at is not None]
    return min(times) if times else None


def _recovered(handle: FaultHandle, obj: dict[str, Any]) -> bool:
    if handle.plural == "pods":
        return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    conditions = _conditions(obj)
    if handle.one_shot:
        # A killed pod is not "recovered" by Chaos Mesh (its controller restarts it): the injection is the end.
        return conditions.get("AllInjected") == "True"
    phase = ((obj.get("status") or {}).get("experiment") or {}).get("desiredPhase")
    return conditions.get("AllRecovered") == "True" and conditions.get("Paused") != "True" and phase == "Stop"


def _created(obj: dict[str, Any]) -> float:
    stamp = obj["metadata"].get("creationTimestamp")
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    if not stamp:
        return 0.0
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


def _namespace_gone(exc: ApiException, verb: str) -> bool:
    message = _message(exc)
    if exc.status == 403:
        return "because it is being terminated" in message
    return exc.status == 404 and verb == "create" and message.startswith('namespaces "')


def _is_admission_denial(message: str) -> bool:
    """A webhook's refusal reads 'admission webhook "NAME" denied the request...' (k8s.io/apiserver
    pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr); an RBAC 403 reads 'USER cannot VERB
    resource ...' (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/errors.go)."""
    return message.startswith("admission webhook ") and "denied the request" in message


def _list_answer(listed: Any) -> dict[str, Any]:
    """A list answer (a dict, or the raw JSON bytes) as a dict; refused when it is not a JSON object."""
    if isinstance(listed, bytes | bytearray):
        try:
            listed = json.loads(listed or b"{}")
        except (ValueError, RecursionError):
            raise BackendError("the API server's list answer is not JSON") from None
    if not isinstance(listed, dict):
        raise BackendError("the API server's list answer is not a JSON object")
    return listed


def _items(listed: Any) -> list[dict[str, Any]]:
    """The objects of a list answer (a dict, or the raw JSON bytes): a list without `items`, or with `items`
    null, is an empty list; an answer that is not a JSON object, or entries that are not objects, are
    refused or skipped (a list is all the caller reads)."""
    listed = _list_answer(listed)
    items = listed.get("items") or []
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _message(exc: ApiException) -> str:
    """The Status message of an error answer (one printable line: it is the server's text), else its body."""
    try:
        body = json.loads(exc.body or "{}")
        text = body.get("message") if isinstance(body, dict) else None
        return netsafe.printable(text or exc.reason)[:500]
    except (ValueError, RecursionError, TypeError):
        return netsafe.printable(exc.body or exc.reason)[:500]


def _retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
