"""Scrub secrets from text that leaves the process (messages, crash reports, audit and report fields).

One rule, used everywhere a value that may come from a request, a URL or the environment is written out: query
strings are cut (`?api_key=...` -> `?<redacted>`), credentials in URLs (`user:pass@`) are dropped, and the value
of anything that looks like a credential (`Bearer ...`, `token=...`, `"api_key": "..."`) is replaced.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@'\"]+@")
_QUERY = re.compile(r"(?P<path>(?:https?://|/)[^\s?'\"<>]*)\?[^\s'\"<>]+")
_AUTH_SCHEME = re.compile(r"(?i)\b(?P<scheme>bearer|basic|token)\s+[A-Za-z0-9._~+/=:-]+")
_SECRET_WORDS = r"token(?!s)|secret|passw(?:or)?d|api[_-]?key|apikey|auth(?:orization)?|cookie|credential|session"
_SECRET_NAME = rf"[A-Za-z0-9_.-]*(?:{_SECRET_WORDS})[A-Za-z0-9_.-]*"
_KEY_VALUE = re.compile(rf"(?i)(?P<key>[\"']?{_SECRET_NAME}[\"']?\s*[:=]\s*)(?P<quote>[\"']?)(?P<value>[^\s\"',;&}}]+)")


_SECRET_FIELD = re.compile(rf"(?i)(?:{_SECRET_WORDS})")


def secret_name(name: str) -> bool:
    """Whether a field's name says it holds a secret (an API key, a token, a session, a cookie): the same words whose
    values `redact` scrubs."""
    return bool(_SECRET_FIELD.search(name))


def redact(text: str) -> str:
    """`text` with URL query strings, URL credentials and credential-like values replaced by <redacted>."""
    text = _URL_USERINFO.sub(lambda m: m["scheme"], text)
    text = _QUERY.sub(lambda m: f"{m['path']}?{REDACTED}", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m['scheme']} {REDACTED}", text)
    return _KEY_VALUE.sub(lambda m: f"{m['key']}{m['quote']}{REDACTED}", text)
