"""What both reports of a verdict say, whatever their format (kfchaos.report.markdown, kfchaos.report.page): the
verdict as a document, its name, the SLO it was judged by, each stage's figures, the known failure modes that
fit, and the figures written as text (milliseconds, percentages), so that the Markdown summary and the HTML page
never disagree about a run.
"""

from __future__ import annotations

import math
from typing import Any

from kfchaos.knowledge import Match, match
from kfchaos.report import evidence as evidence_section
from kfchaos.report.data import StageFigures, load_frame, stage_figures, stages_of
from kfchaos.verdict.model import Verdict


def _fault_types(context: dict[str, Any]) -> list[str]:
    experiment = context.get("experiment")
    types = list(context.get("fault_types", []))
    if experiment is not None:
        types += [f.type for f in experiment.spec.faults]
    return types


def as_document(verdict: Verdict | dict[str, Any]) -> dict[str, Any]:
    return verdict.to_dict() if isinstance(verdict, Verdict) else verdict


def run_name(document: dict[str, Any]) -> str:
    experiment = document.get("experiment")
    if isinstance(experiment, dict):
        return f"{experiment.get('name')} {experiment.get('version')}"
    return f"{experiment} {document.get('version', '')}".strip()


def ms(value: float) -> str:
    if math.isnan(value):
        return "no data"
    return "∞" if math.isinf(value) else f"{value * 1000:.0f} ms"


def pct(value: float) -> str:
    return "no data" if not math.isfinite(value) else f"{value * 100:.3g}%"


def known_modes(document: dict[str, Any], context: dict[str, Any]) -> list[Match]:
    """Known failure modes that fit, best first by the run's evidence (kfchaos.knowledge.rank)."""
    normalized = {"checks": document.get("checks", []), "stages": stages_of(document)}
    return match(normalized, _fault_types(context), evidence_section.findings(context))


def slo_of(context: dict[str, Any]) -> Any:
    experiment = context.get("experiment")
    return experiment.spec.slo if experiment is not None else None


def figures_of(document: dict[str, Any], context: dict[str, Any]) -> tuple[Any, list[StageFigures]]:
    """The run's records as a frame (None without records) and each stage's figures from them."""
    frame = load_frame(context.get("records"))
    return frame, stage_figures(document, frame, slo_of(context))


def p99_text(f: StageFigures) -> str:
    text = ms(f.p99)
    if math.isinf(f.p99) and f.never_completed:
        text += f" ({f.never_completed} never completed)"
    return text


def evidence_status(item: Match) -> list[str]:
    """What the OOM evidence bundle said about the mode's signals (nothing when the mode has none)."""
    parts = []
    if item.found:
        parts.append(f"evidence found: {', '.join(item.found)}")
    if item.not_seen:
        parts.append(f"collected, not seen: {', '.join(item.not_seen)}")
    if item.not_collected:
        parts.append(f"not collected: {', '.join(item.not_collected)}")
    return ["Evidence: " + "; ".join(parts)] if parts else []
