"""Pydantic field types for values as people write them, with JSON Schema that editors understand."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from kfchaos.units import DURATION_FORMS, PERCENT_FORMS, parse_duration, parse_percent

DURATION_PATTERN = r"^((\d+(\.\d+)?|\.\d+)(ns|us|µs|ms|s|m|h))+$"
PERCENT_PATTERN = r"^\s*\d+(\.\d+)?\s*%\s*$"

Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN, "description": DURATION_FORMS}),
]
"""Seconds, written as a Go-style duration string (`200ms`, `20m`, `1h30m`)."""

Percent = Annotated[
    float,
    BeforeValidator(parse_percent),
    WithJsonSchema({"type": "string", "pattern": PERCENT_PATTERN, "description": PERCENT_FORMS}),
]
"""A fraction in [0, 1], written as a percentage (`15%`)."""

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _dns_label(value: Any) -> Any:
    if isinstance(value, str) and (len(value) > 63 or not DNS_LABEL.match(value)):
        raise ValueError(
            f"{value!r} is not a valid Kubernetes name: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters"
        )
    return value


DnsLabel = Annotated[str, BeforeValidator(_dns_label), Field(pattern=DNS_LABEL.pattern, max_length=63)]


def check_label(key: str, value: str) -> None:
    """Kubernetes label syntax; raises ValueError with the rule that failed."""
    name = key.rsplit("/", 1)[-1]
    if not _LABEL_KEY.match(key) or len(name) > 63:
        raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(f"label value {value!r} for {key!r} is not a valid Kubernetes label value")


class StrictModel(BaseModel):
    """Unknown fields are errors: a typo in an experiment must never be silently ignored."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False, frozen=True)
