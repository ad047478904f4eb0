"""The verdict's HTML page (report.html), self-contained: Plotly with its script inline (no network), for an SRE
to read at a glance: the run header, the verdict and why, each stage's figures, one time axis over the whole run
(latency against the baseline band, token latencies, request rate, errors, send lag, the cluster's series) with
stage boundaries and fault windows shaded, each stage's latency CDF and checks, the OOM evidence, and the known
failure modes that fit, ranked. The verdict and the metrics it shows ride along in a JSON block (DATA_ID) for
whoever reads the page after (kfchaos.rundir, scripts/measure-scenarios.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from html import escape
from typing import Any

from kfchaos.faults.catalog import CATALOG
from kfchaos.knowledge import Match
from kfchaos.report import evidence as evidence_section
from kfchaos.report import plots
from kfchaos.report.data import (
    StageFigures,
    baseline_band,
    check_of,
    control_stages,
    events,
    fault_windows,
    load_frame,
    stage_spans,
    stages_of,
    time_series,
)
from kfchaos.report.facts import (
    as_document,
    evidence_status,
    figures_of,
    known_modes,
    ms,
    p99_text,
    pct,
    run_name,
    slo_of,
)
from kfchaos.report.selfcontained import STYLE, json_block, with_policy
from kfchaos.verdict.model import Verdict

DATA_ID = "kfchaos-data"  # <script type="application/json"> with the verdict and the metrics the page shows


def _one_shot(context: dict[str, Any]) -> frozenset[str]:
    """The experiment's faults that act once (pod-kill, container-kill: kfchaos.faults.catalog one_shot; Chaos
    Mesh kills the selected pod or container once, chaos-mesh/chaos-mesh README.md "pod-kill"/"container-kill"),
    drawn as instants: "verified active for 27 s" means nothing for a kill."""
    experiment = context.get("experiment")
    faults = experiment.spec.faults if experiment is not None else []
    return frozenset(f.name for f in faults if f.type in CATALOG and CATALOG[f.type].one_shot)


def _p99_max(document: dict[str, Any], context: dict[str, Any]) -> float | None:
    slo = slo_of(context)
    if slo is not None and slo.p99_max is not None:
        return float(slo.p99_max)
    found = next((check_of(s, "p99").get("threshold") for s in stages_of(document) if check_of(s, "p99")), None)
    return float(found) if isinstance(found, int | float) else None


def _drift(document: dict[str, Any], context: dict[str, Any]) -> float | None:
    slo = slo_of(context)
    if slo is not None:
        return float(slo.p99_drift_max)
    drift = (document.get("baseline") or {}).get("drift")
    return float(drift) if isinstance(drift, int | float) else None


def _header(document: dict[str, Any], context: dict[str, Any]) -> str:
    run = context.get("run") or {}
    experiment = document.get("experiment")
    name, version = (
        (experiment.get("name"), experiment.get("version"))
        if isinstance(experiment, dict)
        else (experiment, document.get("version"))
    )
    baseline = document.get("baseline") or {}
    window = baseline.get("window") or {}
    baseline_text = "none: P99 drift cannot be judged"
    if baseline:
        p99 = baseline.get("latency_p99")
        baseline_text = (f"P99 {p99 * 1000:.0f} ms" if isinstance(p99, int | float) else "P99 unknown") + (
            f", {window.get('start')} → {window.get('end')}" if window else ""
        )
        if baseline.get("captured_at"):
            baseline_text += f", captured {baseline['captured_at']}"
    pipeline = run.get("pipeline") or document.get("pipeline") or {}
    rows = [
        ("experiment", f"{name} {version}"),
        ("run id", run.get("run_id") or document.get("run_id") or "—"),
        ("target", run.get("target") or "—"),
        ("commit", run.get("commit") or "—"),
        ("started", run.get("started") or "—"),
        ("finished", run.get("finished") or "—"),
        ("baseline", baseline_text),
        ("source", run.get("source") or ("pipeline" if pipeline else "kfchaos verdict")),
    ]
    if pipeline:
        rows.append(("pipeline", f"{pipeline.get('name')} {pipeline.get('version')}"))
    if run.get("pipeline_job_id"):
        rows.append(("pipeline job", run["pipeline_job_id"]))
    cells = "".join(f"<b>{escape(k)}</b><span>{escape(str(v))}</span>" for k, v in rows)
    out = f"<div class='header'>{cells}</div>"
    rejudged = run.get("rejudged") or {}
    if rejudged and not rejudged.get("matches", True):
        out += (
            f"<p class='warn'>Re-judging this run folder with <code>kfchaos verdict</code> gives "
            f"<b>{escape(str(rejudged.get('status')))}</b>, not {escape(str(document.get('status')))}"
            f"{': ' + escape(str(rejudged['error'])) if rejudged.get('error') else ''}.</p>"
        )
    return out


def _why(document: dict[str, Any]) -> str:
    """The gating checks that did not pass, failures first, each with its stage; else the verdict's reasons."""
    ranked: list[tuple[int, str, str]] = []
    order = {"FAIL": 0, "INCONCLUSIVE": 1}
    for where, checks in [("", document.get("checks", []))] + [
        (f"stage {s.get('stage')}%: ", s.get("checks", [])) for s in stages_of(document)
    ]:
        for c in checks:
            status = str(c.get("status"))
            if status in order and c.get("gating", True):
                ranked.append((order[status], status, f"{where}{c.get('name')}: {c.get('reason', '')}"))
    if ranked:
        items = "".join(
            f"<li><b class='{s}'>{s}</b> {escape(text)}</li>" for _, s, text in sorted(ranked, key=lambda r: r[0])
        )
        return f"<h2>Why</h2><ul>{items}</ul>"
    reasons = document.get("reasons", [])
    if reasons:
        return "<h2>Why</h2><ul>" + "".join(f"<li>{escape(r)}</li>" for r in reasons) + "</ul>"
    return "<h2>Why</h2><p>Every gating check passed.</p>"


def _stage_table(figures: list[StageFigures]) -> str:
    head = ("stage", "status", "requests", "P50", "P90", "P99", "error rate", "timeout rate", "OOM kills",
            "goodput")  # fmt: skip
    rows = []
    for f in figures:
        interval = ""
        if f.p99_interval and all(math.isfinite(v) for v in f.p99_interval):
            interval = f"<br><small>{f.p99_interval[0] * 1000:.0f}–{f.p99_interval[1] * 1000:.0f} ms</small>"
        oom = "no data" if not math.isfinite(f.oom_kills) else f"{f.oom_kills:g}"
        rate = f"<br><small>{f.goodput_rate:.2f} req/s</small>" if math.isfinite(f.goodput_rate) else ""
        cells = [
            f"{f.stage}%",
            f"<span class='{escape(f.status)}'><b>{escape(f.status)}</b></span>",
            str(f.requests),
            ms(f.p50),
            ms(f.p90),
            escape(p99_text(f)) + interval,
            pct(f.error_rate),
            pct(f.timeout_rate),
            oom,
            pct(f.goodput) + rate,
        ]
        rows.append("<tr>" + "".join(f"<td class='num'>{c}</td>" for c in cells) + "</tr>")
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"


# The unit of an abort rule's per-window value (kfchaos.verdict.gate._rule_values), which its check does not carry.
_ABORT_UNITS = {"error_rate": "fraction", "timeout_rate": "fraction", "p99_latency": "s", "ttft_p99": "s",
                "dependency_p99": "s", "oom_kills": ""}  # fmt: skip


def _abort_value(check: dict[str, Any]) -> str:
    """An abort rule trips on `consecutive` windows in a row above its threshold, not on one window: its worst
    window may lie above the threshold while it PASSes. So it shows the run of windows that decides it (e.g.
    "1/2 windows > 20%; worst 38.5%"), not "worst / threshold", which read as a value above its limit marked PASS."""
    metric = str(check.get("name", "")).removeprefix("abort.").split(".")[0]
    unit = _ABORT_UNITS.get(metric, "")
    details = check.get("details") or {}
    run, needed = details.get("longest_run_above"), details.get("consecutive")
    threshold, worst = _fmt(check.get("threshold"), unit), _fmt(check.get("value"), unit)
    if not isinstance(run, int) or not isinstance(needed, int):
        return f"worst {worst}; rule > {threshold}"
    observed, shown = details.get("windows_above_observed"), details.get("windows_above_shown")
    blips = observed - shown if isinstance(observed, int) and isinstance(shown, int) else 0
    # A window counts only where its own requests show the threshold crossed (kfchaos.verdict.gate): the others
    # are blips, said as such.
    extra = f" ({blips} more above on too few requests)" if blips else ""
    return f"{run}/{needed} windows > {threshold}{extra}; worst {worst}"


def _fmt(v: Any, unit: str) -> str:
    if not isinstance(v, int | float):
        return "—"
    if unit == "s":
        return f"{v * 1000:.0f} ms"
    if unit == "fraction":
        return f"{v * 100:.3g}%"
    if unit == "ratio":  # a relative change: +12% drift
        return f"{v * 100:+.1f}%"
    return f"{v:g} {unit}".strip()


def _value(check: dict[str, Any]) -> str:
    """The value / limit column, in terms that agree with the check's status."""
    if str(check.get("name", "")).startswith("abort.") and not check.get("unit"):
        return _abort_value(check)
    value, threshold, unit = check.get("value"), check.get("threshold"), check.get("unit") or ""
    return f"{_fmt(value, unit)} / {_fmt(threshold, unit)}" if threshold is not None else _fmt(value, unit)


def checks_table(checks: list[dict[str, Any]]) -> str:
    rows = []
    order = {"FAIL": 0, "INCONCLUSIVE": 1, "PASS": 2}
    for c in sorted(checks, key=lambda c: order.get(str(c.get("status")), 3)):
        status = escape(str(c.get("status")))
        gating = "" if c.get("gating", True) else " <small>(info)</small>"
        rows.append(
            f"<tr><td class='{status}'><b>{status}</b></td><td>{escape(str(c.get('name')))}{gating}</td>"
            f"<td class='num'>{escape(_value(c))}</td><td class='num'>{c.get('samples') or ''}</td>"
            f"<td class='reason'>{escape(str(c.get('reason', '')))}</td></tr>"
        )
    return (
        "<table><colgroup><col style='width:8em'><col style='width:10em'><col style='width:11em'>"
        "<col style='width:5em'><col></colgroup><tr><th>status</th><th>check</th><th>value / limit</th>"
        "<th>samples</th><th>reason</th></tr>" + "".join(rows) + "</table>"
    )


def _failure_modes(matches: list[Match]) -> str:
    if not matches:
        return "<p>No known failure mode matches the failing checks.</p>"
    parts = []
    shown = 2  # the best matches open; the rest one click away, so the page stays short
    for rank, item in enumerate(matches, 1):
        mode = item.mode
        score = f"matches {len(item.checks)} of its {len(mode.checks)} check(s): {', '.join(item.checks) or '-'}"
        if item.fault_match:
            score += "; and the experiment's fault type"
        score += "".join(f". {line}" for line in evidence_status(item))
        body = (
            f"<p><small>{escape(score)}</small></p><p>{escape(mode.explanation)}</p><b>Checklist</b><ul>"
            + "".join(f"<li>{escape(e)}</li>" for e in mode.evidence)
            + "</ul><b>Remediation</b><ul>"
            + "".join(f"<li>{escape(r)}</li>" for r in mode.remediation)
            + "</ul>"
        )
        title = f"{rank}. {escape(mode.title)}"
        if rank <= shown:
            parts.append(f"<div class='mode'><h3>{title}</h3>{body}</div>")
        else:
            parts.append(f"<details class='mode'><summary><b>{title}</b></summary>{body}</details>")
    return "".join(parts)


def _metrics_dict(metrics: Any) -> dict[str, Any] | None:
    if metrics is None:
        return None
    return metrics if isinstance(metrics, dict) else dict(metrics.to_dict())


def html(verdict: Verdict | dict[str, Any], context: dict[str, Any] | None = None) -> str:
    context = context or {}
    document = as_document(verdict)
    frame, figures = figures_of(document, context)
    status = escape(str(document["status"]))
    band = baseline_band(context, document, _drift(document, context))
    p99_max = _p99_max(document, context)
    faults = fault_windows(context, document, frame)
    spans = stage_spans(frame, figures)
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>kfchaos {escape(run_name(document))}: {status}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(run_name(document))} <span class='badge {status}'>{status}</span></h1>",
        _header(document, context),
    ]
    parts.append(_why(document))
    parts += [f"<p class='warn'>warning: {escape(w)}</p>" for w in document.get("warnings", [])]
    parts += ["<h2>Stages</h2>", _stage_table(figures) if figures else "<p>No stage ran.</p>"]
    parts.append(
        "<p><small>P50/P90/P99 over the requests sent, a request that never completed counted as ∞ (as the verdict "
        "counts it); goodput: requests that succeeded within p99_max (and ttft_p99_max) per request sent.</small></p>"
    )
    first = True
    story = events(context, frame, faults, context.get("metrics"))
    figure = plots.timeline(time_series(frame) if frame is not None else None, spans, faults, band, p99_max,
                            context.get("metrics"), story=story, instants=_one_shot(context),
                            evidence_kv=evidence_section.kv_usage(context))  # fmt: skip
    parts.append("<h2>Over the run</h2>")
    legend = (
        "<p class='legend'><small>Shaded: <span style='background:rgba(120,120,120,.15)'></span>stages "
        "<span style='background:rgba(255,160,0,.35)'></span>fault applied (to its removal), effect not seen "
        "<span style='background:rgba(220,40,40,.3)'></span>fault verified active"
    )
    source = {f.source for f in faults}
    if source == {"records"}:
        legend += (
            " (from the records: a traffic-side fault from its first request sent to its last answered, else the"
            " fault_active flag; the pipeline recorded no fault windows)"
        )
    elif not faults:
        legend += " (no fault window recorded)"
    parts.append(legend + ". Drag to zoom, double-click to reset, hover for values.</small></p>")
    if figure is not None:
        parts.append(plots.to_html(figure, first, "timeline"))
        first = False
    else:
        parts.append("<p>No records and no metric series: nothing to plot over time.</p>")
    if context.get("metrics") is None:
        parts.append(
            "<p><em>No metric series for this run: KV-cache, GPU memory, restarts and OOM kills unknown.</em></p>"
        )
    parts.append("<h2>Per stage</h2>")
    control_frame = load_frame(context.get("control_records"))
    cdf = plots.stage_cdf(frame, figures, band, control_stages(context, document), control_frame, p99_max)
    if cdf is not None:
        parts.append("<h3>Latency CDF against the baseline</h3>" + plots.to_html(cdf, first, "cdf"))
        first = False
    for stage in stages_of(document):
        stage_status = escape(str(stage.get("status")))
        parts.append(
            f"<div class='stage'><h3>Stage {stage.get('stage')}% — <span class='{stage_status}'>{stage_status}"
            f"</span> <small>({stage.get('requests', 0)} requests)</small></h3>"
            + checks_table(stage.get("checks", []))
            + "</div>"
        )
    if document.get("checks"):
        parts += ["<h2>Experiment-wide checks</h2>", checks_table(document["checks"])]
    parts.append(evidence_section.html(context))
    matches = known_modes(document, context)
    parts += ["<h2>Known failure modes that fit, best match first</h2>", _failure_modes(matches)]
    data = {
        "verdict": document,
        # The ranking the page shows, best first (kfchaos.knowledge.rank), by id: what a reader of the data compares.
        "failure_modes": [item.mode.id for item in matches],
        "metrics": _metrics_dict(context.get("metrics")),
        # The run's story in the order it happened, as the first chart draws it (data.events).
        "events": [
            {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in asdict(e).items()}
            for e in story
        ],
    }
    bundle = evidence_section.bundle_of(context)
    if bundle is not None:  # the pipeline's run folder takes evidence/ from here (kfchaos.rundir)
        data["evidence"] = bundle.to_dict()
    parts.append(
        "<details><summary>Verdict JSON</summary><pre>"
        + escape(json.dumps(document, indent=1, default=str))
        + "</pre></details>"
    )
    parts.append(f'<script type="application/json" id="{DATA_ID}">{json_block(data)}</script>')
    parts.append("</body></html>\n")
    return with_policy("\n".join(parts))
