"""The verdict's Markdown summary (report.md): the run, each stage's figures in one table, why the verdict is what
it is, the OOM evidence, and the known failure modes that fit with their checklists and remediation. Short enough
to paste into a ticket or a PR comment; the HTML page (kfchaos.report.page) shows the same run with its charts.

Every string quoted here comes from the run folder (a verdict.json, run.json or evidence bundle anyone with write
access to a runs folder can plant) or from the knowledge base, and goes through the one Markdown escaping function,
kfchaos.report.mdtext.markdown_text: it renders as the text it is, on its line, and makes no link, image, HTML,
mention, heading or table cell. Figures are formatted numbers and need none.
"""

from __future__ import annotations

import math
from typing import Any

from kfchaos.knowledge import Match
from kfchaos.report import evidence as evidence_section
from kfchaos.report.facts import as_document, evidence_status, figures_of, known_modes, ms, p99_text, pct, run_name
from kfchaos.report.mdtext import PROSE_LIMIT, markdown_text
from kfchaos.verdict.model import Verdict


def _text(value: object) -> str:
    return markdown_text(value, limit=PROSE_LIMIT)


def _code(value: object) -> str:
    """An identifier from the folder (a run id, a check name): a code span where it can be one as is."""
    return markdown_text(value, code=True, limit=120)


def markdown(verdict: Verdict | dict[str, Any], context: dict[str, Any] | None = None) -> str:
    context = context or {}
    document = as_document(verdict)
    _frame, figures = figures_of(document, context)
    run = context.get("run") or {}
    lines = [f"# kfchaos verdict: {markdown_text(run_name(document))} — **{markdown_text(document['status'])}**", ""]
    run_id = run.get("run_id") or document.get("run_id")
    if run_id:
        target = f", target {markdown_text(run['target'])}" if run.get("target") else ""
        lines += [f"Run {_code(run_id)}{target}", ""]
    if figures:
        lines += [
            "| stage | status | requests | P50 | P90 | P99 | error rate | timeout rate | OOM kills | goodput |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for f in figures:
            oom = "no data" if not math.isfinite(f.oom_kills) else f"{f.oom_kills:g}"
            stage, status, requests = markdown_text(f.stage), markdown_text(f.status), markdown_text(f.requests)
            lines.append(
                f"| {stage}% | {status} | {requests} | {ms(f.p50)} | {ms(f.p90)} | {p99_text(f)} | "
                f"{pct(f.error_rate)} | {pct(f.timeout_rate)} | {oom} | {pct(f.goodput)} |"
            )
        lines.append("")
    reasons = document.get("reasons", [])
    if reasons:
        lines += ["## Why", *[f"- {_text(r)}" for r in reasons], ""]
    for warning in document.get("warnings", []):
        lines.append(f"> warning: {_text(warning)}")
    lines += evidence_section.markdown(context)
    matches = known_modes(document, context)
    if matches:
        lines += ["", "## Known failure modes that fit (best match first)", ""]
        for item in matches:
            lines += _markdown_match(item)
    return "\n".join(lines).rstrip() + "\n"


def _markdown_match(item: Match) -> list[str]:
    mode = item.mode
    return [
        f"### {_text(mode.title)}",
        f"Matched by: {', '.join(_code(c) for c in item.checks) or 'the evidence only'}"
        + (" (and the experiment's fault type)" if item.fault_match else ""),
        *[_text(line) for line in evidence_status(item)],
        "",
        _text(mode.explanation),
        "",
        "Checklist (evidence to look at):",
        *[f"- {_text(e)}" for e in mode.evidence],
        "",
        "Remediation:",
        *[f"- {_text(r)}" for r in mode.remediation],
        "",
    ]
