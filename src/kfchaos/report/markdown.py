"""The verdict's Markdown summary (report.md): the run, each stage's figures in one table, why the verdict is what
it is, the OOM evidence, and the known failure modes that fit with their checklists and remediation. Short enough
to paste into a ticket or a PR comment; the HTML page (kfchaos.report.page) shows the same run with its charts.
"""

from __future__ import annotations

import math
from typing import Any

from kfchaos.knowledge import Match
from kfchaos.report import evidence as evidence_section
from kfchaos.report.facts import as_document, evidence_status, figures_of, known_modes, ms, p99_text, pct, run_name
from kfchaos.verdict.model import Verdict


def markdown(verdict: Verdict | dict[str, Any], context: dict[str, Any] | None = None) -> str:
    context = context or {}
    document = as_document(verdict)
    _frame, figures = figures_of(document, context)
    run = context.get("run") or {}
    lines = [f"# kfchaos verdict: {run_name(document)} — **{document['status']}**", ""]
    run_id = run.get("run_id") or document.get("run_id")
    if run_id:
        lines += [f"Run `{run_id}`" + (f", target {run['target']}" if run.get("target") else ""), ""]
    if figures:
        lines += [
            "| stage | status | requests | P50 | P90 | P99 | error rate | timeout rate | OOM kills | goodput |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for f in figures:
            oom = "no data" if not math.isfinite(f.oom_kills) else f"{f.oom_kills:g}"
            lines.append(
                f"| {f.stage}% | {f.status} | {f.requests} | {ms(f.p50)} | {ms(f.p90)} | {p99_text(f)} | "
                f"{pct(f.error_rate)} | {pct(f.timeout_rate)} | {oom} | {pct(f.goodput)} |"
            )
        lines.append("")
    reasons = document.get("reasons", [])
    if reasons:
        lines += ["## Why", *[f"- {r}" for r in reasons], ""]
    for warning in document.get("warnings", []):
        lines.append(f"> warning: {warning}")
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
        f"### {mode.title}",
        f"Matched by: {', '.join(item.checks) or 'the evidence only'}"
        + (" (and the experiment's fault type)" if item.fault_match else ""),
        *evidence_status(item),
        "",
        mode.explanation,
        "",
        "Checklist (evidence to look at):",
        *[f"- {e}" for e in mode.evidence],
        "",
        "Remediation:",
        *[f"- {r}" for r in mode.remediation],
        "",
    ]
