"""Checks of flag values that several commands share, so each says the same thing: exit 3 before anything runs."""

from __future__ import annotations

from kfchaos.errors import KfchaosError
from kfchaos.spec import endpoint_problem


def require_url(flag: str, value: str | None) -> None:
    """A URL flag (--target), where given, is a base URL to send to: the rule of spec.target.endpoint."""
    if value:
        problem = endpoint_problem(value)
        if problem:
            raise KfchaosError(f"{flag}: {problem}")
