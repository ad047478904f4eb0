"""Headers on the wire: tags that let the server side find replayed requests, and the credential rules.

Every request carries `X-Traffic-Stage: stage-N`, a unique `X-Trace-ID` (32 hex digits) and a W3C
`traceparent` with the same trace id, so traces, logs and the per-request records join on one key.
A recorded credential (Authorization, Cookie, Proxy-Authorization, and any header whose name says it holds a
secret: an API key, a token, a session, kfchaos.redact.secret_name) is dropped unless the experiment names it
(`spec.traffic.headers.allow_credentials: [Authorization]`, `--allow-credential NAME`); the target's own credential
comes from an environment variable, is added last, and is never logged. A recorded Host never reaches the wire:
the request goes to the experiment's target, with its Host.
Names are compared after normalisation (surrounding whitespace removed, lower case), and a pair that is not a
valid HTTP field (kfchaos.traffic.httpsyntax) never reaches the wire: configured ones are refused up front,
recorded ones (which the readers already refuse) are dropped here as a last guard.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from kfchaos.errors import KfchaosError
from kfchaos.redact import secret_name
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


def is_credential(name: str) -> bool:
    """Whether a recorded header carries a credential (its name, normalised: lower case)."""
    return name in CREDENTIAL_HEADERS or secret_name(name)


@dataclass(frozen=True)
class HeaderPolicy:
    add: tuple[tuple[str, str], ...] = ()
    strip: frozenset[str] = frozenset()
    # Recorded credential headers kept, by name (normalised); every other one is dropped.
    allow_credentials: frozenset[str] = frozenset()
    credential: tuple[str, str] | None = field(default=None, repr=False)  # (header, value); never printed

    def __repr__(self) -> str:  # no header value (an added API key, the credential) in logs or tracebacks
        return (
            f"HeaderPolicy(add={[name for name, _ in self.add]!r}, strip={sorted(self.strip)!r}, "
            f"allow_credentials={sorted(self.allow_credentials)!r}, "
            f"credential={'set' if self.credential else 'none'})"
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
        object.__setattr__(self, "allow_credentials", frozenset(h.strip().lower() for h in self.allow_credentials))

    def drops(self, name: str) -> bool:
        lower = name.strip().lower()
        return (
            lower in HOP_HEADERS
            or lower in self.strip
            or (is_credential(lower) and lower not in self.allow_credentials)
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
            if is_credential(lower) and lower not in self.allow_credentials:
                continue
            out.append((name, value))
        out.extend(self.add)
        if self.credential:
            out.append(self.credential)
        return out
