"""Reports of a verdict: a Markdown summary and a self-contained HTML page with inline SVG plots
(latency percentiles per stage against the baseline band, error rate, OOM events, KV-cache usage) and the
matching known failure modes. Both accept a `kfchaos.Verdict` JSON or the pipeline's `kfchaos.RunVerdict`.

`markdown(verdict, context)` and `html(verdict, context)` return text; `write_reports()` writes
verdict.json, summary.md and report.html. Context keys, all optional: experiment (an Experiment),
records (Parquet path, Table or Requests), metrics (a MetricsSnapshot or its JSON), fault_types.
"""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path
from typing import Any

from kfchaos.knowledge import Match, match
from kfchaos.report.figures import (
    KV_SERIES,
    OOM_SERIES,
    StageFigures,
    load_records,
    series_of,
    stage_figures,
    stages_of,
)
from kfchaos.report.svg import Chart, render
from kfchaos.verdict.model import Verdict


def _fault_types(context: dict[str, Any]) -> list[str]:
    experiment = context.get("experiment")
    types = list(context.get("fault_types", []))
    if experiment is not None:
        types += [f.type for f in experiment.spec.faults]
    return types


def _document(verdict: Verdict | dict[str, Any]) -> dict[str, Any]:
    return verdict.to_dict() if isinstance(verdict, Verdict) else verdict


def _name(document: dict[str, Any]) -> str:
    experiment = document.get("experiment")
    if isinstance(experiment, dict):
        return f"{experiment.get('name')} {experiment.get('version')}"
    return f"{experiment} {document.get('version', '')}".strip()


def _ms(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value * 1000:.0f} ms"


def _pct(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value * 100:.3g}%"


def _baseline_band(document: dict[str, Any]) -> tuple[float, float, str] | None:
    baseline = document.get("baseline") or {}
    p99 = baseline.get("latency_p99")
    drift = baseline.get("drift")  # given by the pipeline's verdict document, which has steps, not stages
    for stage in document.get("stages", []):
        for check in stage.get("checks", []):
            if check["name"] == "p99_drift" and check.get("threshold") is not None:
                drift = check["threshold"]
    if not p99:
        return None
    high = p99 * (1 + (drift or 0.0))
    return (p99, high, f"baseline P99 {p99 * 1000:.0f} ms .. +{(drift or 0) * 100:g}%")


def _matches(document: dict[str, Any], context: dict[str, Any]) -> list[Match]:
    normalized = {"checks": document.get("checks", []), "stages": stages_of(document)}
    return match(normalized, _fault_types(context))


def markdown(verdict: Verdict | dict[str, Any], context: dict[str, Any] | None = None) -> str:
    context = context or {}
    document = _document(verdict)
    figures = stage_figures(document, load_records(context.get("records")))
    lines = [f"# kfchaos verdict: {_name(document)} — **{document['status']}**", ""]
    if document.get("run_id"):
        lines += [f"Run `{document['run_id']}`", ""]
    if figures:
        lines += [
            "| stage | status | requests | P50 | P90 | P99 | error rate | timeout rate | OOM kills |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for f in figures:
            oom = "n/a" if not math.isfinite(f.oom_kills) else f"{f.oom_kills:g}"
            lines.append(
                f"| {f.stage}% | {f.status} | {f.requests} | {_ms(f.p50)} | {_ms(f.p90)} | {_ms(f.p99)} | "
                f"{_pct(f.error_rate)} | {_pct(f.timeout_rate)} | {oom} |"
            )
        lines.append("")
    reasons = document.get("reasons", [])
    if reasons:
        lines += ["## Why", *[f"- {r}" for r in reasons], ""]
    for warning in document.get("warnings", []):
        lines.append(f"> warning: {warning}")
    matches = _matches(document, context)
    if matches:
        lines += ["", "## Known failure modes that fit", ""]
        for item in matches:
            lines += _markdown_match(item)
    return "\n".join(lines).rstrip() + "\n"


def _markdown_match(item: Match) -> list[str]:
    mode = item.mode
    return [
        f"### {mode.title}",
        f"Matched by: {', '.join(item.checks)}" + (" (and the experiment's fault type)" if item.fault_match else ""),
        "",
        mode.explanation,
        "",
        "Evidence to collect:",
        *[f"- {e}" for e in mode.evidence],
        "",
        "Remediation:",
        *[f"- {r}" for r in mode.remediation],
        "",
    ]


def _charts(document: dict[str, Any], figures: list[StageFigures], context: dict[str, Any]) -> list[str]:
    labels = [f"{f.stage}%" for f in figures]
    positions = [float(i) for i in range(len(figures))]
    out = []
    latency = Chart("Latency per stage", "seconds", x_labels=labels, band=_baseline_band(document))
    p99_max = next(
        (c.get("threshold") for st in stages_of(document) for c in st.get("checks", []) if c["name"] == "p99"), None
    )
    if p99_max is not None:
        latency.limits.append((float(p99_max), f"p99_max {float(p99_max) * 1000:.0f} ms"))
    for name, values in (
        ("P50", [f.p50 for f in figures]),
        ("P90", [f.p90 for f in figures]),
        ("P99", [f.p99 for f in figures]),
    ):
        if any(math.isfinite(v) for v in values):
            latency.lines.append((name, positions, values))
    out.append(render(latency))
    errors = Chart("Error and timeout rate per stage", "fraction of requests", x_labels=labels)
    errors.bars = [("errors", [f.error_rate for f in figures]), ("timeouts", [f.timeout_rate for f in figures])]
    out.append(render(errors))
    oom = Chart("OOM kills per stage", "kills", x_labels=labels, bars=[("OOM kills", [f.oom_kills for f in figures])])
    out.append(render(oom))
    kv = series_of(context.get("metrics"), KV_SERIES)
    if kv:
        out.append(
            render(
                Chart("KV-cache usage", "fraction", lines=[("kv_cache_usage", kv[0], kv[1])], limits=[(1.0, "full")])
            )
        )
    else:
        out.append("<p><em>No KV-cache usage series (vllm:kv_cache_usage_perc) in the metrics.</em></p>")
    oom_series = series_of(context.get("metrics"), OOM_SERIES)
    if oom_series:
        out.append(render(Chart("OOM events (counter)", "events", lines=[("oom_kills", *oom_series)])))
    return out


_STYLE = """
body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
.PASS{color:#2a7}.FAIL{color:#c22}.INCONCLUSIVE{color:#b80}svg{display:block;margin:1em 0}
"""


def html(verdict: Verdict | dict[str, Any], context: dict[str, Any] | None = None) -> str:
    context = context or {}
    document = _document(verdict)
    figures = stage_figures(document, load_records(context.get("records")))
    status = escape(str(document["status"]))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>kfchaos verdict {escape(_name(document))}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(_name(document))}: <span class='{status}'>{status}</span></h1>",
    ]
    reasons = document.get("reasons", [])
    if reasons:
        parts.append("<h2>Why</h2><ul>" + "".join(f"<li>{escape(r)}</li>" for r in reasons) + "</ul>")
    parts.append("<h2>Stages</h2><table><tr><th>stage</th><th>status</th><th>checks</th></tr>")
    parts += stage_rows(document)
    parts.append("</table>")
    parts += ["<h2>Plots</h2>", *_charts(document, figures, context)]
    matches = _matches(document, context)
    if matches:
        parts.append("<h2>Known failure modes that fit</h2>")
        for item in matches:
            mode = item.mode
            parts.append(
                f"<h3>{escape(mode.title)}</h3><p>{escape(mode.explanation)}</p>"
                f"<p>Matched by: {escape(', '.join(item.checks))}</p><b>Evidence to collect</b><ul>"
                + "".join(f"<li>{escape(e)}</li>" for e in mode.evidence)
                + "</ul><b>Remediation</b><ul>"
                + "".join(f"<li>{escape(r)}</li>" for r in mode.remediation)
                + "</ul>"
            )
    parts.append(f"<h2>Verdict JSON</h2><pre>{escape(json.dumps(document, indent=1, default=str))}</pre>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def stage_rows(document: dict[str, Any]) -> list[str]:
    rows = []
    for stage in stages_of(document):
        status = escape(str(stage.get("status")))
        checks = "<br>".join(
            f"<span class='{escape(c['status'])}'>{escape(c['status'])}</span> "
            f"{escape(c['name'])}: {escape(c['reason'])}"
            for c in stage.get("checks", [])
        )
        rows.append(f"<tr><td>{stage.get('stage')}%</td><td class='{status}'>{status}</td><td>{checks}</td></tr>")
    return rows


def write_reports(verdict: Verdict | dict[str, Any], out_dir: str | Path, **context: Any) -> dict[str, Path]:
    """verdict.json, summary.md and report.html in `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    document = _document(verdict)
    paths = {"json": out / "verdict.json", "markdown": out / "summary.md", "html": out / "report.html"}
    paths["json"].write_text(json.dumps(document, indent=2) + "\n")
    paths["markdown"].write_text(markdown(document, context))
    paths["html"].write_text(html(document, context))
    return paths
