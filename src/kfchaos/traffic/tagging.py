"""Headers on the wire: tags that let the server side find replayed requests, and the credential rules.

Every request carries `X-Traffic-Stage: stage-N`, a unique `X-Trace-ID` (32 hex digits) and a W3C
`traceparent` with the same trace id, so traces, logs and the per-request records join on one key.
Authorization and Cookie headers from a recording are dropped unless the experiment allows them; the
target's own credential comes from an environment variable, is added last, and is never logged.
Names are compared after normalisation (surrounding whitespace removed, lower case), and a pair that is not a
valid HTTP field (kfchaos.traffic.httpsyntax) never reaches the wire: configured ones are refused up front,
recorded ones (which the readers already refuse) are dropped here as a last guard.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kfchaos.errors import KfchaosError
from kfchaos.traffic.httpsyntax import header_problem

CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
# Framing headers are the client's own business: a recorded value would corrupt the request.
HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "upgrade"})
STAGE_HEADER = "X-Traffic-Stage"
TRACE_HEADER = "X-Trace-ID"

_random = random.Random()  # trace ids need uniqueness, not secrecy: a fast PRNG seeded from the OS


def new_trace_id() -> bytes:
    """16 random bytes, never all zero (an all-zero trace id is invalid in W3C Trace Context)."""
    value = _random.getrandbits(128) or 1
    return value.to_bytes(16, "big")


def traceparent(trace_id: bytes) -> str:
    return f"00-{trace_id.hex()}-{_random.getrandbits(64) or 1:016x}-01"


@dataclass(frozen=True)
class HeaderPolicy:
    add: tuple[tuple[str, str], ...] = ()
    strip: frozenset[str] = frozenset()
    allow_credentials: bool = False
    credential: tuple[str, str] | None = field(default=None, repr=False)  # (header, value); never printed

    def __repr__(self) -> str:  # no header value (an added API key, the credential) in logs or tracebacks
        return (
            f"HeaderPolicy(add={[name for name, _ in self.add]!r}, strip={sorted(self.strip)!r}, "
            f"allow_credentials={self.allow_credentials}, credential={'set' if self.credential else 'none'})"
        )

    def __post_init__(self) -> None:
        for name, value in self.add:
            problem = header_problem(name, value)
            if problem:
                raise KfchaosError(f"headers to add: {problem}")
        if self.credential:
            if header_problem(self.credential[0], "x"):
                raise KfchaosError("target credential: the header name is not an HTTP token")
            if header_problem(self.credential[0], self.credential[1]):  # never quote the value
                raise KfchaosError("target credential: the value has characters a header value cannot have")
        object.__setattr__(self, "strip", frozenset(h.strip().lower() for h in self.strip))

    def drops(self, name: str) -> bool:
        lower = name.strip().lower()
        return (
            lower in HOP_HEADERS or lower in self.strip or (lower in CREDENTIAL_HEADERS and not self.allow_credentials)
        )

    def apply(self, recorded: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """Recorded headers minus the stripped ones, then the configured additions, then the credential."""
        replaced = {name.lower() for name, _ in self.add}
        if self.credential:
            replaced.add(self.credential[0].lower())
        out = []
        for name, value in recorded:
            if header_problem(name, value) is not None:  # the readers refuse these already: a last guard
                continue
            lower = name.lower()  # a valid token has no whitespace to strip
            if lower in replaced or lower in HOP_HEADERS or lower in self.strip:
                continue
            if lower in CREDENTIAL_HEADERS and not self.allow_credentials:
                continue
            out.append((name, value))
        out.extend(self.add)
        if self.credential:
            out.append(self.credential)
        return out


def credential_from_env(env: str, kind: str, header: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(header, value) for spec.target.auth. A missing variable is an input error naming the variable only."""
    value = (os.environ if environ is None else environ).get(env)
    if not value:
        raise KfchaosError(f"target credential: environment variable {env} is not set (spec.target.auth.env)")
    return (header, f"Bearer {value}" if kind == "bearer" else value)
