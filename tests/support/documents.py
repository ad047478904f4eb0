"""Helpers over parsed documents (YAML or JSON) for the property and fuzz tests."""

from __future__ import annotations

from typing import Any


def document_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key/index path in a parsed document (the root included): where a mutation may land."""
    out = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            out += document_paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            out += document_paths(child, (*prefix, index))
    return out
