"""The report's "OOM evidence" section: each item of the bundle (kfchaos.evidence), what it shows, where it
came from, and what could not be collected and why."""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np

from kfchaos.evidence.model import FINDINGS, Bundle
from kfchaos.report.mdtext import PROSE_LIMIT, markdown_text


def bundle_of(context: dict[str, Any]) -> Bundle | None:
    found = context.get("evidence")
    if isinstance(found, Bundle):
        return found
    return Bundle.from_dict(found)


def findings(context: dict[str, Any]) -> dict[str, bool] | None:
    """The bundle's findings (None: no bundle was collected)."""
    bundle = bundle_of(context)
    return bundle.findings() if bundle is not None else None


def kv_usage(context: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """The KV-cache usage the bundle read around the kill ([time, fraction] pairs of its kv-cache item), or None."""
    bundle = bundle_of(context)
    for item in bundle.items if bundle is not None else []:
        points = item.data.get("usage") if item.kind == "kv-cache" and isinstance(item.data, dict) else None
        if isinstance(points, list) and points:
            pairs = [p for p in points if isinstance(p, list | tuple) and len(p) == 2]
            if pairs:
                array = np.asarray(pairs, dtype=float)
                return array[:, 0], array[:, 1]
    return None


def _folder_link(item: Any) -> str:
    return f"evidence/{item.file}" if item.collected else ""


def markdown(context: dict[str, Any]) -> list[str]:
    """The section for report.md: every string of the bundle (a pod's log title, a target, what a collector said,
    the trigger and the notes: a planted folder's to choose) through kfchaos.report.mdtext.markdown_text."""
    bundle = bundle_of(context)
    if bundle is None:
        return []
    trigger = "; ".join(_prose(t) for t in bundle.trigger)
    lines = ["## OOM evidence", "", f"Collected because: {trigger}", ""]
    lines += ["| item | target | collected | what it shows / why not | source |", "|---|---|---|---|---|"]
    for item in bundle.items:
        text = item.shows if item.collected else f"not collected: {item.why_not}"
        file = f" ({markdown_text(_folder_link(item), code=True)})" if item.collected else ""
        title, target, collected = markdown_text(item.title), markdown_text(item.target), item.collected
        lines.append(
            f"| {title}{file} | {target} | {'yes' if collected else 'no'} | {_prose(text)} | {_prose(item.source)} |"
        )
    lines += ["", *[f"- {_prose(n)}" for n in bundle.notes], *_findings_md(bundle), ""]
    return lines


def _prose(text: object) -> str:
    return markdown_text(text, limit=PROSE_LIMIT)


def _findings_md(bundle: Bundle) -> list[str]:
    found = bundle.findings()
    seen = [FINDINGS[n] for n, v in found.items() if v and n in FINDINGS]
    return ["", "Found: " + "; ".join(seen)] if seen else ["", "Found: none of the OOM signals in what was collected"]


def html(context: dict[str, Any]) -> str:
    bundle = bundle_of(context)
    if bundle is None:
        return ""
    rows = []
    for item in bundle.items:
        status = "PASS" if item.collected else "INCONCLUSIVE"
        text = escape(item.shows) if item.collected else "not collected: " + escape(item.why_not or "")
        file = f"<br><small><code>{escape(_folder_link(item))}</code></small>" if item.collected else ""
        body = ""
        if item.collected and isinstance(item.data, str) and item.data.strip():
            body = f"<details><summary>log tail</summary><pre>{escape(item.data[-20000:])}</pre></details>"
        rows.append(
            f"<tr><td>{escape(item.title)}{file}</td><td>{escape(item.target)}</td>"
            f"<td class='{status}'>{'yes' if item.collected else 'no'}</td>"
            f"<td class='reason'>{text}{body}</td><td class='reason'><small>{escape(item.source)}</small></td></tr>"
        )
    found = bundle.findings()
    seen = "".join(f"<li>{escape(FINDINGS[n])}</li>" for n, v in found.items() if v and n in FINDINGS)
    notes = "".join(f"<li>{escape(n)}</li>" for n in bundle.notes)
    return (
        "<h2>OOM evidence</h2><p>Collected because: "
        + escape("; ".join(bundle.trigger))
        + ". The evidence never changes the verdict.</p>"
        + "<table><tr><th>item</th><th>target</th><th>collected</th><th>what it shows / why not</th>"
        + "<th>source</th></tr>"
        + "".join(rows)
        + "</table>"
        + (
            f"<p><b>Found</b></p><ul>{seen}</ul>"
            if seen
            else "<p>Found: none of the OOM signals in what was collected.</p>"
        )
        + (f"<ul>{notes}</ul>" if notes else "")
    )
