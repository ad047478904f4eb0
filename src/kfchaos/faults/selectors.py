"""A Chaos Mesh pod selector as a Kubernetes label selector string.

Chaos Mesh selects its targets by `labelSelectors` and `expressionSelectors` (api/v1alpha1 PodSelectorSpec); kfchaos
lists the same pods through the Kubernetes API, which takes one label selector string: the backend (the pods a fault
aims at), the foreign-interference watch and the evidence step (the target's pods) all read it from here.
"""

from __future__ import annotations

from typing import Any


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
