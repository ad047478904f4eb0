"""The fault backend's Kubernetes client: bounded, retried and audited calls for chaos objects, pods and events.

Every call goes through `KubeClient._call`, which retries 429/5xx/connection errors with backoff (honouring a
Retry-After), turns a 403 into the RBAC rule that is missing (or an admission webhook's refusal, or a namespace being
deleted), reads no answer beyond a size limit, and records an `ApiEvent` in `events` for the audit record. Lists are
read in bounded pages. A whole-call deadline (`deadline`) cuts every request's timeout and every retry to what is
left of it. What a call is for (which object, which kind) is the backend's business (kfchaos.faults.chaosmesh); this
module only knows which API serves a resource: pods (the GPU allocator) are the one core resource written, every
other plural is a chaos-mesh.org object.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

from kfchaos import netsafe
from kfchaos.faults.backend import (
    AdmissionDenied,
    ApiEvent,
    BackendError,
    FaultHandle,
    Manifest,
    NamespaceGone,
    PermissionDenied,
)
from kfchaos.faults.catalog import GROUP, PLURALS, VERSION
from kfchaos.faults.retry import RETRYABLE_STATUS, RetryPolicy
from kfchaos.kubeconnect import api_error_message

T = TypeVar("T")
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


class KubeClient:
    """`kubernetes.client.CustomObjectsApi` (chaos objects), `CoreV1Api` (pods, events) and `ApiextensionsV1Api`
    (the CRDs), each call retried by `retry`, bounded in time and size, and recorded in `events`."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        retry: RetryPolicy | None = None,
        request_timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api_client = api_client
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.extensions = kubernetes.client.ApiextensionsV1Api(api_client)
        self.retry = retry or RetryPolicy()
        self.request_timeout = request_timeout
        self._sleep = sleep
        self.events: list[ApiEvent] = []
        self._deadline: float | None = None  # monotonic; set while a call with a whole-call deadline runs

    # ------------------------------------------------------------ deadlines

    @contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """One deadline for everything inside: every request's timeout and every retry is cut to what is left of it."""
        self._deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            self._deadline = None

    def time_left(self) -> bool:
        return self._deadline is None or time.monotonic() < self._deadline

    def capped(self, delay: float) -> float:
        return delay if self._deadline is None else max(0.0, min(delay, self._deadline - time.monotonic()))

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
                        f"or is gone ({api_error_message(exc)}); nothing can be injected there (not an RBAC problem)"
                    ) from None
                if exc.status == 403 and _is_admission_denial(api_error_message(exc)):
                    raise AdmissionDenied(verb, resource, namespace, name, api_error_message(exc)) from None
                if exc.status == 403:
                    raise PermissionDenied(verb, resource, group, namespace, api_error_message(exc)) from None
                if exc.status in RETRYABLE_STATUS and attempt < self.retry.attempts and self.time_left():
                    self._sleep(self.capped(self.retry.delay(attempt, _retry_after(exc))))
                    continue
                raise BackendError(
                    f"{verb} {resource} {namespace or ''}/{name or ''} failed with {exc.status} {exc.reason} "
                    f"after {attempt} attempt(s): {api_error_message(exc)}"
                ) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                self._record(verb, resource, namespace, name, 0, None, attempt, dry_run, type(exc).__name__)
                if attempt < self.retry.attempts and self.time_left():
                    self._sleep(self.capped(self.retry.delay(attempt)))
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

    # ------------------------------------------------------------ object access (chaos kinds and pods)

    def create(
        self, plural: str, group: str, manifest: Manifest, dry_run: bool = False
    ) -> dict[str, Any] | ApiException:
        """Create the object of `manifest` (a resource of `plural` in `group`); the ApiException when it exists
        already (409: an answer, not a failure)."""
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

    def get(self, handle: FaultHandle) -> dict[str, Any] | None:
        """The object now; None when it is gone."""
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

    def delete(self, plural: str, namespace: str, name: str) -> bool:
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

    def list_objects(self, plural: str, namespace: str | None, selector: str) -> list[dict[str, Any]] | None:
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
                        f"({api_error_message(result)}); the list was restarted {MAX_RELISTS} times and never completed"
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

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod of that name now, None when there is none."""

        def call() -> dict[str, Any]:
            pod = self.core.read_namespaced_pod(name, namespace, **self._kw())
            return dict(self.api_client.sanitize_for_serialization(pod))

        result = self._call("get", "pods", "", namespace, name, call, ok_statuses=(404,))
        return None if isinstance(result, ApiException) else result

    def object_events(self, namespace: str, name: str) -> list[str]:
        """`reason: message` of the Kubernetes events about the object (why Chaos Mesh could not inject); none when
        the identity may not read events."""

        def call() -> list[dict[str, Any]]:
            listed = self.core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={name}", **self._raw_kw()
            )
            return _items(listed.data)

        result = self._call(
            "list", "events", "", namespace, name, call, ok_statuses=(403, 404), max_bytes=MAX_PAGE_BYTES
        )
        if isinstance(result, ApiException):
            return []
        return [
            f"{e.get('reason')}: {e.get('message')}"
            for e in result
            if (e.get("involvedObject") or {}).get("name") == name
        ]

    def has_crd(self, crd: str) -> bool:
        """Whether the CustomResourceDefinition `crd` (plural.group) is installed."""
        result = self._call(
            "get",
            "customresourcedefinitions",
            "apiextensions.k8s.io",
            None,
            crd,
            lambda: self.extensions.read_custom_resource_definition(crd, **self._kw()),
            ok_statuses=(404,),
        )
        return not isinstance(result, ApiException)

    def server_time(self, namespace: str | None = None) -> float:
        """The API server's clock (POSIX seconds), from the Date header its responses carry (Go net/http
        sets it; RFC 9110 §6.6.1), read from a list the sweep may make anyway. One-second resolution;
        refused when no Date header comes."""
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


# ---------------------------------------------------------------- helpers


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _namespace_gone(exc: ApiException, verb: str) -> bool:
    message = api_error_message(exc)
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


def _retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
