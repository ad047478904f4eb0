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

import re
import urllib.error
import urllib.request
from http.client import HTTPMessage
from typing import IO, Any, Self
from urllib.parse import urljoin, urlsplit

import urllib3
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


def refusal(source: str, target: str) -> str:
    scheme, host, port = origin(target)
    return (
        f"{source} redirected to another origin ({scheme}://{host}:{port}); not followed, so no credential "
        "leaves its host: give the final address instead"
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


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handler, refusing another origin (`newurl` is already absolute here)."""

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: HTTPMessage, newurl: str
    ) -> urllib.request.Request | None:
        if not same_origin(req.full_url, newurl):
            raise urllib.error.HTTPError(req.full_url, code, refusal(req.full_url, newurl), headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOriginRedirects)


def urlopen(request: urllib.request.Request | str, timeout: float) -> Any:
    """`urllib.request.urlopen` that refuses a redirect to another origin (an HTTPError saying so)."""
    return _OPENER.open(request, timeout=timeout)


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
