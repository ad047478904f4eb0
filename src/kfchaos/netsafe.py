"""Rules every HTTP client of kfchaos follows, in one place.

Credentials stay with their host: a redirect to another origin (scheme, host or port) is refused, never
followed, whatever the client. urllib keeps every header across a redirect (CPython Lib/urllib/request.py,
`HTTPRedirectHandler.redirect_request` copies `req.headers` but Content-Length/Type), and urllib3 and requests
drop only the few header names they know (urllib3 src/urllib3/util/retry.py `DEFAULT_REMOVE_HEADERS_ON_REDIRECT`
is Cookie, Authorization, Proxy-Authorization), so a credential in a custom header (`spec.target.auth.header`, a
KFP context's `client_authentication_header_name`) would follow. Refusing the redirect covers every header. A
redirect within the same origin is still followed: the credential goes where it was meant to go.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from http.client import HTTPMessage
from typing import IO, Any, Self
from urllib.parse import urljoin, urlsplit

import urllib3
import urllib3.connection
from urllib3.exceptions import MaxRetryError

from kfchaos.errors import KfchaosError

_DEFAULT_PORTS = {"http": 80, "https": 443}


class RedirectRefused(KfchaosError):
    """A server redirected to another origin; the request was not sent there."""


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in; hosts compare without case."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # a port outside 0-65535: an origin nothing else shares
        port = -1
    return scheme, (parts.hostname or "").lower(), port if port is not None else _DEFAULT_PORTS.get(scheme)


def same_origin(a: str, b: str) -> bool:
    return origin(a) == origin(b)


def origin_text(url: str) -> str:
    scheme, host, port = origin(url)
    return printable(f"{scheme}://{host}:{port}")


def refusal(source: str, target: str) -> str:
    return (
        f"{origin_text(source)} redirected to another origin ({origin_text(target)}); not followed, so no "
        "credential leaves its host: give the final address instead"
    )


class SameOriginRetry(urllib3.Retry):
    """urllib3's Retry that refuses a redirect to another origin (raises MaxRetryError, whose `reason` is a
    RedirectRefused). urllib3's PoolManager calls `increment` before following a redirect
    (src/urllib3/poolmanager.py `PoolManager.urlopen`), and `Retry.new` keeps the subclass."""

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> Self:
        location = response.get_redirect_location() if response is not None else None
        if location and url is not None:
            here = url
            if not urlsplit(url).scheme and _pool is not None:  # a pool's own redirect: url is a path
                here = f"{_pool.scheme}://{_pool.host}:{_pool.port}{url}"
            there = urljoin(here, location)
            if not same_origin(here, there):
                raise MaxRetryError(_pool, url, RedirectRefused(refusal(here, there)))
        return super().increment(method, url, response, error, _pool, _stacktrace)


def retry(total: int = 3, **options: Any) -> SameOriginRetry:
    return SameOriginRetry(total=total, **options)


# C0 and C1 controls and DEL (ESC starts ANSI/OSC sequences: clear the screen, retitle the terminal, write
# the clipboard with OSC 52), and the Unicode bidirectional overrides and isolates that reorder what is shown.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


_UNPRINTABLE_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def printable(text: object) -> str:
    """Text from outside (a server's answer, a file) made safe to print or log: each control character is shown
    as an escape (`\\x1b`, `\\n`), never sent to the terminal. One line whatever came in."""
    return _UNPRINTABLE.sub(_escape, str(text))


def for_terminal(text: object) -> str:
    """A whole message about to be printed (kfchaos's own lines around outside text): as `printable`, but its
    line breaks and tabs kept. The last guard before stderr; outside text is made `printable` where it enters."""
    return _UNPRINTABLE_BUT_LINES.sub(_escape, str(text))


# ---------------------------------------------------------------------------------------------- deadlines
# A socket timeout bounds each read, not a call: a server that sends one byte a second never trips it, and holds
# the call for as long as it likes (headers included: http.client reads them line by line). A Deadline bounds the
# whole call, connect and TLS handshake and every read: a timer thread shuts down every socket the call used when
# the time is up, so the blocked read returns at once and the client fails with an error, however it is written.
# The sockets are the ones the connection classes below register while a deadline is active (this thread's).

DEFAULT_DEADLINE_S = 60.0  # a Kubernetes or KFP API call that sets none (kubeconnect, kfp.client)


class DeadlineExceeded(KfchaosError, TimeoutError):
    """The call did not finish within its whole-call deadline (an OSError too: callers that treat a network
    failure as "unreachable" treat this one so)."""


_active = threading.local()


def _deadlines() -> list[Deadline]:
    stack: list[Deadline] | None = getattr(_active, "stack", None)
    if stack is None:
        stack = _active.stack = []
    return stack


class Deadline:
    """`with Deadline(seconds):` every socket opened or reused in this thread within the block is shut down when
    the time is up. `expired` says whether it fired: the client's own error then means "too slow", and so does
    an answer that looked whole (a shut socket reads as the end of a body sent without a length), so a caller
    checks `expired` after reading, not only on an error."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.append(sock)
            if not self.expired:
                return
        _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def __enter__(self) -> Deadline:
        _deadlines().append(self)
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        _deadlines().remove(self)
        with self._lock:
            self._sockets.clear()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # closed meanwhile, or a TLS socket's detached raw socket
        sock.shutdown(socket.SHUT_RDWR)


def watch(sock: socket.socket | None) -> None:
    """Register a socket with every deadline active in this thread (none: nothing to do)."""
    for deadline in _deadlines():
        deadline.watch(sock)


def expired() -> bool:
    """Whether a deadline active in this thread has fired."""
    return any(d.expired for d in _deadlines())


# ---------------------------------------------------------------------------------------------- answer limits
# A deadline bounds how long an answer takes, not how much of it comes: a server can send a gigabyte within any
# deadline, and a client that preloads (the Kubernetes client does) holds it all, then decodes it into objects several
# times its size. An AnswerLimit bounds the bytes read for each answer in this thread, on the connections below,
# however the client reads them: status line, headers and body as they come off the socket.


class AnswerTooLarge(KfchaosError):
    """An answer over the limit the call set (AnswerLimit), or in a content coding nobody asked for (its size is
    unknown until it is decoded: a few kilobytes of gzip make gigabytes). Not an OSError: a client must not retry
    it as a network failure."""


_limits = threading.local()


def _answer_limits() -> list[int]:
    stack: list[int] | None = getattr(_limits, "stack", None)
    if stack is None:
        stack = _limits.stack = []
    return stack


class AnswerLimit:
    """`with AnswerLimit(max_bytes):` every answer read in this thread within the block, on a watched connection
    (`watch_pools`), is read up to `max_bytes` and refused beyond (AnswerTooLarge, raised while reading); one in a
    content coding (gzip, deflate, ...) is refused as it arrives, since kfchaos's clients under a limit ask for
    none (urllib3 sends `Accept-Encoding: identity`; the API server compresses only when asked: k8s.io/apiserver
    pkg/endpoints/handlers/responsewriters/writers.go, negotiateContentEncoding). Nested limits: the smallest holds."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def __enter__(self) -> AnswerLimit:
        _answer_limits().append(self.max_bytes)
        return self

    def __exit__(self, *exc: object) -> None:
        _answer_limits().remove(self.max_bytes)


class _CountedReader:
    """A response's file object that counts what is read through it and refuses more than `limit` bytes."""

    def __init__(self, raw: Any, limit: int) -> None:
        self._raw = raw
        self._limit = limit
        self._read = 0

    def _count(self, size: int) -> None:
        self._read += size
        if self._read > self._limit:
            raise AnswerTooLarge(f"the answer is larger than {_size_text(self._limit)}; not read further")

    def read(self, size: int | None = -1) -> bytes:
        data: bytes = self._raw.read(self._bounded(size))
        self._count(len(data))
        return data

    def read1(self, size: int = -1) -> bytes:
        data: bytes = self._raw.read1(self._bounded(size))
        self._count(len(data))
        return data

    def readline(self, size: int | None = -1) -> bytes:
        data: bytes = self._raw.readline(self._bounded(size))
        self._count(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        got: int = self._raw.readinto(view[: self._limit - self._read + 1])
        self._count(got)
        return got

    def peek(self, size: int = 0) -> bytes:
        data: bytes = self._raw.peek(size)
        return data

    def _bounded(self, size: int | None) -> int:
        """Never ask the socket for more than one byte past the limit: an unsized read would take it all first."""
        room = self._limit - self._read + 1
        return room if size is None or size < 0 else min(size, room)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def _size_text(limit: int) -> str:
    return f"{limit / (1 << 20):g} MiB" if limit >= 1 << 20 else f"{limit} bytes"


class _LimitedResponse(http.client.HTTPResponse):
    """http.client's response under the AnswerLimit active in this thread when it is made (none: as it was)."""

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        limits = _answer_limits()
        self._limit = min(limits) if limits else None
        if self._limit is not None:
            self.fp = _CountedReader(self.fp, self._limit)  # type: ignore[assignment]

    def begin(self) -> None:
        super().begin()
        coding = (self.getheader("Content-Encoding") or "identity").strip().lower()
        if self._limit is not None and coding != "identity":
            self.close()
            raise AnswerTooLarge(f"the answer is {coding}-encoded, which was not asked for; its size is unknown")


class _Watched:
    """Mixin for urllib3's connection classes: each socket is registered with the active deadlines, and each
    answer is read under the active AnswerLimit."""

    sock: socket.socket | None
    response_class: type[http.client.HTTPResponse] = _LimitedResponse  # http.client makes its answer from this

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        watch(sock)  # from the TCP connect on, through the TLS handshake
        return sock

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        watch(self.sock)  # the TLS socket that replaced the raw one

    def request(self, *args: Any, **kwargs: Any) -> None:
        watch(self.sock)  # a kept-alive connection reused by this call
        super().request(*args, **kwargs)  # type: ignore[misc]


class _WatchedConnection(_Watched, urllib3.connection.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _Bounded:
    """Mixin for urllib3's pools: every request gets the pool's whole-call deadline unless the caller set one
    (then the earlier one wins: both watch the same sockets). With preload_content (the Kubernetes and KFP
    clients' default) the body is read inside urlopen, so the deadline covers it."""

    deadline_s = DEFAULT_DEADLINE_S

    def urlopen(self, *args: Any, **kwargs: Any) -> Any:
        if _deadlines():
            return super().urlopen(*args, **kwargs)  # type: ignore[misc]
        with Deadline(self.deadline_s) as deadline:
            where = ":".join(str(getattr(self, name, "?")) for name in ("scheme", "host", "port"))
            late = f"{where}: no whole answer within {self.deadline_s:g}s (whole-call deadline)"
            try:
                response = super().urlopen(*args, **kwargs)  # type: ignore[misc]
            except Exception:
                if deadline.expired:
                    raise DeadlineExceeded(late) from None
                raise
            if deadline.expired:  # a body cut by the deadline can look whole
                raise DeadlineExceeded(late)
            return response


class _DeadlinePool(_Bounded, urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedConnection


class _DeadlineHTTPSPool(_Bounded, urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


def watch_pools(pool_manager: Any, deadline_s: float = DEFAULT_DEADLINE_S) -> Any:
    """Make a urllib3 PoolManager (or ProxyManager) open watched connections, each request bounded by
    `deadline_s` as a whole. Pools already made keep their classes: call this before the first request."""
    http = type("DeadlinePool", (_DeadlinePool,), {"deadline_s": deadline_s})
    https = type("DeadlineHTTPSPool", (_DeadlineHTTPSPool,), {"deadline_s": deadline_s})
    pool_manager.pool_classes_by_scheme = {"http": http, "https": https}
    return pool_manager


# ---------------------------------------------------------------------------------------------- urllib
class _WatchedClient:
    """Mixin for http.client's connections: each socket is registered with the active deadlines, the raw one
    as soon as it is connected (http.client opens it through the `_create_connection` attribute)."""

    sock: socket.socket | None
    _create_connection: Callable[..., socket.socket]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        create = self._create_connection

        def created(*args: Any, **kwargs: Any) -> socket.socket:
            sock = create(*args, **kwargs)
            watch(sock)
            return sock

        self._create_connection = created

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        watch(self.sock)


class _WatchedHTTPClient(_WatchedClient, http.client.HTTPConnection):
    pass


class _WatchedHTTPSClient(_WatchedClient, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_WatchedHTTPClient, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        options = {"context": getattr(self, "_context", None)}
        if hasattr(self, "_check_hostname"):  # gone in Python 3.12
            options["check_hostname"] = self._check_hostname
        return self.do_open(_WatchedHTTPSClient, req, **options)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handler, refusing another origin (`newurl` is already absolute here)."""

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: HTTPMessage, newurl: str
    ) -> urllib.request.Request | None:
        if not same_origin(req.full_url, newurl):
            raise urllib.error.HTTPError(req.full_url, code, refusal(req.full_url, newurl), headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOriginRedirects, _HTTPHandler, _HTTPSHandler)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Message
    body: bytes


def fetch(request: urllib.request.Request | str, timeout: float, max_bytes: int) -> Answer:
    """One HTTP exchange through urllib, whole: a redirect to another origin is refused (an HTTPError saying
    so), connect and every read fit in `timeout` seconds together (DeadlineExceeded, an OSError), and the body
    is cut at `max_bytes` (`len(body) > max_bytes` tells the caller it was cut: one byte more is read). Raises
    what urllib raises (URLError, HTTPError for a 4xx/5xx, OSError)."""
    url = request if isinstance(request, str) else request.full_url
    late = f"{origin_text(url)}: no whole answer within {timeout:g}s (whole-call deadline)"
    with Deadline(timeout) as deadline:
        try:
            with _OPENER.open(request, timeout=timeout) as response:
                answer = Answer(response.status, response.headers, response.read(max_bytes + 1))
        except (OSError, http.client.HTTPException) as exc:
            if deadline.expired:
                raise DeadlineExceeded(late) from None
            if isinstance(exc, OSError):
                raise
            raise urllib.error.URLError(f"malformed HTTP answer ({type(exc).__name__})") from None
        if deadline.expired:  # a body cut by the deadline can look whole
            raise DeadlineExceeded(late)
    return answer
