"""What may go onto the wire from a traffic file: HTTP tokens, field values, request paths.

RFC 9110 §5.1: a field name is a `token` (`1*tchar`, tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" /
"-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA); §9.1: a method is a token too. §5.5: a field value
is visible ASCII, obs-text (0x80-0xFF), spaces and tabs inside; CR, LF and NUL are never allowed (a CR/LF in
a value would start a new header: header injection). Names are compared case-insensitively (§5.1), so the
credential and framing rules look at the lower-cased name of a valid token only: `"Authorization "` is not a
token and never reaches them. RFC 9112 §3.2: the request target in origin form is `absolute-path [ "?" query ]`;
everything else (non-ASCII, spaces, controls, `#`) is percent-encoded as a URL is (RFC 3986 §2.1), so a path
can neither split the request line nor fail to encode.

Messages name what is wrong, never the value: a header value or query may hold a credential.
"""

from __future__ import annotations

import re
from urllib.parse import quote

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A field value: VCHAR / obs-text / SP / HTAB only, and no leading or trailing whitespace (RFC 9110 §5.5).
_NOT_IN_VALUE = re.compile(r"[^\t\x20-\x7e\x80-\xff]")
# RFC 3986 pchar plus "/" and "?" (query), and "%" so existing percent-encodings are kept as they are.
_PATH_SAFE = "/?:@!$&'()*+,;=%-._~"
_ENCODED = re.compile(r"[A-Za-z0-9/?:@!$&'()*+,;=%\-._~]*")


def is_token(text: str) -> bool:
    return _TOKEN.fullmatch(text) is not None


def is_field_value(text: str) -> bool:
    return _NOT_IN_VALUE.search(text) is None and (not text or (text[0] not in " \t" and text[-1] not in " \t"))


def header_problem(name: object, value: object) -> str | None:
    """Why (name, value) cannot be sent as a header, or None. Never quotes the value."""
    if not isinstance(name, str) or _TOKEN.fullmatch(name) is None:
        return "header name is not an HTTP token (RFC 9110 5.1)"
    if not isinstance(value, str):
        return f"header {name[:64]}: value is not text"
    if not is_field_value(value):
        return f"header {name[:64]}: value has characters not allowed in a field value (RFC 9110 5.5)"
    return None


def encode_path(path: str | bytes) -> str:
    """The origin-form request target for `path`: percent-encoded where a URL would be (text as UTF-8; raw
    bytes, as a capture holds them, as they are)."""
    if isinstance(path, bytes):
        return quote(path, safe=_PATH_SAFE)
    if _ENCODED.fullmatch(path):  # the common case, and every path a reader already encoded: nothing to do
        return path
    return quote(path, safe=_PATH_SAFE, encoding="utf-8", errors="surrogatepass")
