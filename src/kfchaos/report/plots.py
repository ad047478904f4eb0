"""The report's figures, drawn with Plotly (plotly.js inlined once per page, so the page needs no network: it
works offline, in the KFP UI's HTML viewer and in a browser, with hover and zoom)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kfchaos.report.data import (
    BaselineBand,
    ControlStage,
    Event,
    FaultWindow,
    StageFigures,
    TimeSeries,
    counter_events,
    series_points,
)

FAULT_APPLIED = "rgba(255,160,0,0.18)"  # applied, not yet verified
FAULT_VERIFIED = "rgba(220,40,40,0.16)"  # verified in effect, until removed
STAGE_SHADE = ("rgba(120,120,120,0.06)", "rgba(120,120,120,0.0)")
CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["toImage"]}


def _dt(values: Any) -> list[datetime]:
    return [datetime.fromtimestamp(float(v), UTC) for v in np.atleast_1d(values)]


def _ms(values: np.ndarray) -> list[float | None]:
    return [None if not math.isfinite(v) else v * 1000 for v in np.asarray(values, dtype=float)]


MAX_FAULT_SHADES = 200  # verified windows drawn per fault: closer ones are drawn as one (see merge_close)


def merge_close(windows: Sequence[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """Sorted windows with those less than `gap` apart joined: what a plot can tell apart anyway."""
    out: list[tuple[float, float]] = []
    for low, high in sorted(windows):
        if out and low - out[-1][1] < gap:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def _band(x0: float, x1: float, fill: str) -> dict[str, Any]:
    """A rectangle over the full height of every row. The rows share one matched x axis, so one shape per
    window (paper y) does what add_vrect(row="all") does with a shape per row -- and add_vrect re-scans
    every shape on each call: 20 windows on 7 rows took 6 s and 120 took 262 s (measured, plotly 5), which
    left a traffic-side fault's hundreds of windows rendering for hours."""
    return {"type": "rect", "xref": "x", "yref": "paper", "x0": _dt(x0)[0], "x1": _dt(x1)[0], "y0": 0, "y1": 1,
            "fillcolor": fill, "line": {"width": 0}, "layer": "below"}  # fmt: skip


def _instant(at: float) -> dict[str, Any]:
    """A one-shot fault (a pod killed once) is an instant: a line at the time it was done, not a window."""
    return {"type": "line", "xref": "x", "yref": "paper", "x0": _dt(at)[0], "x1": _dt(at)[0], "y0": 0, "y1": 1,
            "line": {"color": "rgb(200,30,30)", "width": 2}}  # fmt: skip


def _shade(
    fig: go.Figure,
    spans: list[tuple[int, float, float]],
    faults: list[FaultWindow],
    end: float,
    instants: frozenset[str] = frozenset(),
) -> None:
    """Stage boundaries and fault windows (applied -> verified -> removed) across every row of the figure; the
    faults named in `instants` (one-shot) as a line at their time."""
    shapes: list[dict[str, Any]] = []
    for i, (stage, start, stop) in enumerate(spans):
        shapes.append(_band(start, stop, STAGE_SHADE[i % 2]))
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": _dt(start)[0], "x1": _dt(start)[0],
                       "y0": 0, "y1": 1, "line": {"color": "#888", "width": 1, "dash": "dot"}})  # fmt: skip
        _label_above(fig, start, f"<b>stage {stage}%</b>", yshift=22, font={"size": 12, "color": "#333"})
    for fault in faults:
        if fault.name in instants:
            if fault.first is not None:
                shapes.append(_instant(fault.first))
            continue
        # Orange from applied to removed (in place, effect not seen), red over each verified window on top.
        first = fault.first
        stop = fault.removed if fault.removed is not None else (fault.verified[-1][1] if fault.verified else end)
        if first is not None and fault.source != "records" and stop > first:
            shapes.append(_band(first, stop, FAULT_APPLIED))
        windows = [(low, max(high, low + 0.5)) for low, high in fault.verified]
        if windows:
            gap = (windows[-1][1] - windows[0][0]) / MAX_FAULT_SHADES
            shapes += [_band(low, high, FAULT_VERIFIED) for low, high in merge_close(windows, gap)]
    fig.update_layout(shapes=[*fig.layout.shapes, *shapes])
    for fault in faults:  # the names on top, once
        at = fault.first
        if at is not None:
            _label_above(fig, at, f"⚡ {plain(fault.name)}", yshift=42, font={"size": 11, "color": "#b22"})


def plain(text: object) -> str:
    """Text from outside (a fault's name, an error kind, a status from a run folder) shown by Plotly as written. Its
    labels read a subset of HTML: <a href> becomes a link, <span style> styles, and an old plotly.js ran script
    through them (plotly/plotly.js src/lib/svg_text_utils.js). `<`, `>` and `&` go in as entities, which Plotly
    shows as the characters."""
    return escape(str(text), quote=False)


def _label_above(fig: go.Figure, at: float, text: str, yshift: int, font: dict[str, Any]) -> None:
    """A label above the plot area at time `at` (stage names, then fault names one row higher)."""
    fig.add_annotation(
        x=_dt(at)[0],
        y=1.0,
        yref="paper",
        yshift=yshift,
        text=text,
        showarrow=False,
        xanchor="left",
        yanchor="bottom",
        font=font,
    )


def timeline(
    series: TimeSeries | None,
    spans: list[tuple[int, float, float]],
    faults: list[FaultWindow],
    band: BaselineBand | None,
    p99_max: float | None,
    metrics: Any,
    *,
    story: list[Event] | None = None,
    instants: frozenset[str] = frozenset(),
    evidence_kv: tuple[np.ndarray, np.ndarray] | None = None,
) -> go.Figure | None:
    """One figure, one shared time axis: latency, token latencies, request rate, errors, send lag, cluster.
    `story`: the run's events (data.events): OOM kills and restarts are drawn at their time where the pod status
    gave it, else at the scrape that counted them (they happened before). `evidence_kv`: the OOM evidence
    bundle's KV-cache usage, read at its own finer step, drawn over the snapshot's so its peak is on the chart."""
    from kfchaos.metrics.names import (
        GPU_MEMORY_USED,
        KV_CACHE_USAGE,
        OOM_KILLS,
        PREEMPTIONS,
        PREFIX_CACHE_HIT_RATE,
        RESTARTS,
    )

    kv = series_points(metrics, KV_CACHE_USAGE)
    prefix_hits = series_points(metrics, PREFIX_CACHE_HIT_RATE)
    gpu = series_points(metrics, GPU_MEMORY_USED)
    preempt = counter_events(series_points(metrics, PREEMPTIONS))
    if story is None:  # without the events, the counters' rises at their scrape times
        oom = counter_events(series_points(metrics, OOM_KILLS))
        restarts = counter_events(series_points(metrics, RESTARTS))
    else:
        oom, restarts = _event_points(story, "OOM kill"), _event_points(story, "container restart")
    if series is None and kv is None and gpu is None:
        return None
    rows = [
        "Latency per window (successful requests), ms",
        "TTFT / ITL / TPOT P99 per window, ms",
        "Request rate: intended vs achieved, req/s",
        "Errors per window, by kind, when they failed (a cut-off request: at its last sign of life)",
        "Send lag P99 (sent − intended), ms",
        "KV-cache usage and prefix-cache hit rate (%), GPU memory used (MiB)",
        "Preemptions, restarts and OOM kills",
    ]
    heights = [0.22, 0.13, 0.12, 0.13, 0.1, 0.16, 0.14]
    fig = make_subplots(
        rows=len(rows),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.035,
        subplot_titles=rows,
        specs=[[{}]] * 5 + [[{"secondary_y": True}], [{}]],
        row_heights=heights,
    )
    if series is not None:
        x = _dt(series.starts + series.width / 2)
        first, last = x[0], x[-1]
        if band is not None:
            fig.add_trace(
                go.Scatter(
                    x=[first, last, last, first],
                    y=[band.low * 1000, band.low * 1000, band.high * 1000, band.high * 1000],
                    fill="toself",
                    fillcolor="rgba(40,140,80,0.15)",
                    mode="lines",
                    line={"width": 0},
                    name="baseline P99 band (P10–P90)",
                    hoverinfo="skip",
                ),
                row=1,
                col=1,
            )
            fig.add_trace(
                go.Scatter(
                    x=[first, last],
                    y=[band.median * 1000] * 2,
                    mode="lines",
                    name="baseline P99",
                    line={"color": "#2a7", "dash": "dash"},
                ),
                row=1,
                col=1,
            )
            if band.limit is not None:
                fig.add_trace(
                    go.Scatter(
                        x=[first, last],
                        y=[band.limit * 1000] * 2,
                        mode="lines",
                        name="baseline P99 + allowed drift",
                        line={"color": "#c80", "dash": "dot"},
                    ),
                    row=1,
                    col=1,
                )
        if p99_max is not None:
            fig.add_trace(
                go.Scatter(
                    x=[first, last],
                    y=[p99_max * 1000] * 2,
                    mode="lines",
                    name="SLO p99_max",
                    line={"color": "#c22", "dash": "dash"},
                ),
                row=1,
                col=1,
            )
        for name, color in (("p50", "#1f77b4"), ("p90", "#9467bd"), ("p99", "#d62728")):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=_ms(series.columns[name]),
                    mode="lines+markers",
                    name=name.upper(),
                    line={"color": color},
                    marker={"size": 4},
                    hovertemplate="%{y:.0f} ms",
                ),
                row=1,
                col=1,
            )
        for name, label in (("ttft_p99", "TTFT P99"), ("itl_p99", "ITL P99"), ("tpot_p99", "TPOT P99")):
            if name in series.columns:
                fig.add_trace(
                    go.Scatter(x=x, y=_ms(series.columns[name]), mode="lines", name=label, hovertemplate="%{y:.1f} ms"),
                    row=2,
                    col=1,
                )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=series.columns["intended_rate"],
                mode="lines",
                name="intended rate",
                line={"color": "#777", "dash": "dash"},
                line_shape="hv",
            ),
            row=3,
            col=1,
        )
        if "achieved_rate" in series.columns:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=series.columns["achieved_rate"],
                    mode="lines",
                    name="achieved rate",
                    line={"color": "#17becf"},
                    line_shape="hv",
                ),
                row=3,
                col=1,
            )
        for kind, counts in series.errors.items():
            fig.add_trace(go.Bar(x=x, y=counts, name=f"error: {plain(kind)}"), row=4, col=1)
        if "never_completed" in series.columns and not series.errors:
            fig.add_trace(go.Bar(x=x, y=series.columns["never_completed"], name="never completed"), row=4, col=1)
        if "send_lag_p99" in series.columns:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=_ms(series.columns["send_lag_p99"]),
                    mode="lines",
                    name="send lag P99",
                    line={"color": "#8c564b"},
                ),
                row=5,
                col=1,
            )
    fractions = ((kv, "KV-cache usage %", "#ff7f0e"), (prefix_hits, "prefix-cache hit rate %", "#2ca02c"))
    for fraction, label, color in fractions:
        if fraction is not None:
            fig.add_trace(
                go.Scatter(x=_dt(fraction[0]), y=fraction[1] * 100, mode="lines", name=label, line={"color": color}),
                row=6,
                col=1,
                secondary_y=False,
            )
    if evidence_kv is not None and len(evidence_kv[0]):
        fig.add_trace(
            go.Scatter(
                x=_dt(evidence_kv[0]),
                y=evidence_kv[1] * 100,
                mode="lines",
                name="KV-cache usage % (evidence)",
                line={"color": "#ff7f0e", "dash": "dot"},
            ),
            row=6,
            col=1,
            secondary_y=False,
        )
    if gpu is not None:
        fig.add_trace(
            go.Scatter(x=_dt(gpu[0]), y=gpu[1], mode="lines", name="GPU memory used MiB", line={"color": "#7f7f7f"}),
            row=6,
            col=1,
            secondary_y=True,
        )
    for (times, counts), name, symbol, color in (
        (preempt, "preemptions", "circle", "#ff7f0e"),
        (restarts, "container restarts", "diamond", "#1f77b4"),
        (oom, "OOM kills", "x", "#d62728"),
    ):
        # An event strip: one lane per kind, a marker where the counter went up, its size the increase.
        fig.add_trace(
            go.Scatter(
                x=_dt(times),
                y=[name] * len(times),
                mode="markers",
                name=name,
                customdata=counts,
                marker={"symbol": symbol, "size": 8 + 4 * np.minimum(counts, 5), "color": color},
                hovertemplate=f"+%{{customdata:g}} {name}<extra></extra>",
            ),
            row=7,
            col=1,
        )
    starts = [s for _, s, _ in spans] or ([float(series.starts[0])] if series is not None else [])
    end = max([e for _, _, e in spans] + ([float(series.starts[-1] + series.width)] if series is not None else [0]))
    if starts:
        _shade(fig, spans, faults, end, instants)
    _row_legends(fig, len(rows))
    fig.update_layout(
        height=1700,
        barmode="stack",
        hovermode="x unified",
        margin={"l": 60, "r": 190, "t": 110, "b": 40},
        template="plotly_white",
    )
    fig.update_xaxes(type="date", showticklabels=True, tickformat="%H:%M:%S")
    focus = _focus(series, spans, faults)
    if focus is not None:  # the measured part of the run; the metric series beyond it are a zoom-out away
        fig.update_xaxes(range=[_dt(focus[0])[0], _dt(focus[1])[0]])
    fig.update_yaxes(rangemode="tozero")
    # Latency on a log axis: the baseline band, a multi-second tail and the SLO line stay readable together.
    fig.update_yaxes(type="log", rangemode="normal", row=1, col=1)
    if series is not None:
        shown = [v for v in (band.low if band else None, band.limit if band else None, p99_max) if v]
        values = np.concatenate([series.columns[k] for k in ("p50", "p90", "p99")] + [np.array(shown)])
        ticks = log_ticks(values[np.isfinite(values) & (values > 0)])
        if ticks:
            fig.update_yaxes(tickvals=[t * 1000 for t in ticks], ticktext=[_label(t) for t in ticks], row=1, col=1)
    return fig


def _event_points(story: list[Event], kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(times, counts) of one kind of event: its own time, the middle of the interval it is known to lie in, or,
    known only by when it was counted, that time."""
    chosen = [e for e in story if e.kind == kind]
    at = [(e.earliest + e.latest) / 2 if math.isfinite(e.earliest) else e.latest for e in chosen]
    return np.array(at), np.ones(len(chosen))


def _focus(
    series: TimeSeries | None, spans: list[tuple[int, float, float]], faults: list[FaultWindow]
) -> tuple[float, float] | None:
    """From the first request (or fault) to the last request (or fault removal), with a 5 % margin."""
    times = [t for _, a, b in spans for t in (a, b)]
    if series is not None:
        times += [float(series.starts[0]), float(series.starts[-1] + series.width)]
    times += [t for f in faults for t in (f.applied, f.removed, *(v for w in f.verified for v in w)) if t is not None]
    if not times:
        return None
    start, end = min(times), max(times)
    margin = max(1.0, (end - start) * 0.05)
    return start - margin, end + margin


def log_ticks(seconds: np.ndarray) -> list[float]:
    """1-2-5 ticks (in seconds) covering the values, for a log latency axis an SRE reads without counting."""
    if not len(seconds):
        return []
    low, high = float(seconds.min()), float(seconds.max())
    # Less than a decade on screen: finer steps, so the axis still has three or more labels.
    mantissas = (1, 2, 5) if high / low > 15 else (1, 1.5, 2, 3, 4, 5, 6, 8)
    ticks = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        for mantissa in mantissas:
            value = mantissa * 10.0**exponent
            if low / 2 <= value <= high * 2:
                ticks.append(value)
    return ticks


def _label(seconds: float) -> str:
    return f"{seconds:g} s" if seconds >= 1 else f"{seconds * 1000:g} ms"


def _row_legends(fig: go.Figure, rows: int) -> None:
    """A legend beside each row (Plotly's multiple legends), so each row's lines are named where they are."""
    axis_of_row = {}
    for row in range(1, rows + 1):
        subplot = fig.get_subplot(row, 1)
        axis_of_row[subplot.yaxis.plotly_name.replace("yaxis", "y")] = row
        top = subplot.yaxis.domain[1]
        fig.update_layout(
            {
                f"legend{'' if row == 1 else row}": {
                    "y": top,
                    "yanchor": "top",
                    "x": 1.02,
                    "xanchor": "left",
                    "font": {"size": 11},
                    "bgcolor": "rgba(255,255,255,0)",
                }
            }
        )
    for trace in fig.data:
        found = axis_of_row.get(trace.yaxis or "y")
        row = found if found is not None else 1
        if found is None:  # a secondary axis: its row is the one whose primary axis is just before it
            row = max((r for a, r in axis_of_row.items() if _axis_number(a) < _axis_number(trace.yaxis)), default=1)
        trace.legend = "legend" if row == 1 else f"legend{row}"


def _axis_number(name: str | None) -> int:
    digits = (name or "y")[1:]
    return int(digits) if digits else 1


def stage_cdf(
    frame: pd.DataFrame | None,
    figures: list[StageFigures],
    band: BaselineBand | None,
    control: dict[int, ControlStage],
    control_frame: pd.DataFrame | None,
    p99_max: float | None,
) -> go.Figure | None:
    """Latency CDF of each stage against the control baseline at the same rate (its records' CDF dashed, where
    the run folder has them; its P50 and P99 with the P99's interval) and the baseline P99: the whole
    curve on the left, the tail (90-100 %) on the right. A curve stops short of 100 % by the share of requests
    that never completed, so an infinite P99 shows as a curve that never reaches the 99 % line."""
    if frame is None or "stage" not in frame or frame.empty:
        return None
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.55, 0.45],
        horizontal_spacing=0.08,
        subplot_titles=["Latency CDF (log scale)", "The tail (zoomed)"],
    )
    colors = ("#1f77b4", "#ff7f0e", "#9467bd", "#d62728", "#8c564b", "#e377c2")
    curves = {f.stage: _cdf(frame, f.stage) for f in figures}
    # The tail panel starts at 90 %, lower when a stage's curve ends below that (many never completed).
    ends = [float(c[1][-1]) for c in curves.values() if c is not None]
    tail_share = min([0.9] + [math.floor((e - 0.05) * 20) / 20 for e in ends])
    tail_share = max(0.0, tail_share)
    low, high, tail_low = math.inf, 0.0, math.inf
    for i, f in enumerate(figures):
        color = colors[i % len(colors)]
        curve = curves[f.stage]
        if curve is None:
            continue
        values, share, _sent = curve
        low, high = min(low, float(values[max(0, len(values) // 100)])), max(high, float(values[-1]))
        tail_low = min(tail_low, float(values[min(len(values) - 1, int(np.searchsorted(share, tail_share)))]))
        reference = _cdf(control_frame, f.stage) if control_frame is not None else None
        for col in (1, 2):
            if reference is not None:
                fig.add_trace(
                    go.Scatter(
                        x=reference[0] * 1000,
                        y=reference[1],
                        mode="lines",
                        name=f"control at {f.stage}%",
                        line={"color": color, "dash": "dash", "width": 1.5},
                        legendgroup=str(f.stage),
                        showlegend=col == 1,
                        hovertemplate="control %{x:.0f} ms: %{y:.2%}",
                    ),
                    row=1,
                    col=col,
                )
            point = control.get(f.stage)
            if point is not None and (point.p50 is not None or point.p99 is not None):
                xs = [v for v in (point.p50, point.p99) if v is not None]
                ys = [q for q, v in ((0.5, point.p50), (0.99, point.p99)) if v is not None]
                errors = None
                if point.p99 is not None and point.p99_interval is not None:
                    plus = [0.0] * (len(xs) - 1) + [(point.p99_interval[1] - point.p99) * 1000]
                    minus = [0.0] * (len(xs) - 1) + [(point.p99 - point.p99_interval[0]) * 1000]
                    errors = {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus}
                fig.add_trace(
                    go.Scatter(
                        x=[v * 1000 for v in xs],
                        y=ys,
                        mode="markers",
                        name=f"control P50/P99 at {f.stage}%",
                        marker={"color": color, "symbol": "diamond-open", "size": 11, "line": {"width": 2}},
                        error_x=errors,
                        legendgroup=str(f.stage),
                        showlegend=col == 1,
                        hovertemplate=f"control at {f.stage}%: %{{x:.0f}} ms at %{{y:.0%}}<extra></extra>",
                    ),
                    row=1,
                    col=col,
                )
                high = max(high, *(point.p99_interval or ()), *xs)
        for col in (1, 2):
            fig.add_trace(
                go.Scatter(
                    x=values * 1000,
                    y=share,
                    mode="lines",
                    name=f"stage {f.stage}% ({plain(f.status)})"
                    + (f", {1 - share[-1]:.0%} never completed" if share[-1] < 0.995 else ""),
                    line={"color": color},
                    legendgroup=str(f.stage),
                    showlegend=col == 1,
                    hovertemplate="%{x:.0f} ms: %{y:.2%}",
                ),
                row=1,
                col=col,
            )
    marks = []
    if band is not None:
        marks.append((band.median, "baseline P99", "#2a7", "dash"))
        if band.limit is not None:
            marks.append((band.limit, "+ allowed drift", "#c80", "dot"))
    if p99_max is not None:
        marks.append((p99_max, "p99_max", "#c22", "dash"))
    for at, label, color, dash in marks:
        high = max(high, at)
        for col in (1, 2):  # a line trace, not a shape: it has a legend entry and a hover label
            fig.add_trace(
                go.Scatter(
                    x=[at * 1000, at * 1000],
                    y=[0, 1.02],
                    mode="lines",
                    name=label,
                    line={"color": color, "dash": dash},
                    legendgroup=label,
                    showlegend=col == 1,
                    hovertemplate=f"{label} {at * 1000:.0f} ms<extra></extra>",
                ),
                row=1,
                col=col,
            )
    for col in (1, 2):
        fig.add_hline(y=0.99, line={"color": "#999", "width": 1, "dash": "dot"}, row=1, col=col)
    if math.isfinite(low) and low > 0:
        fig.update_xaxes(range=[math.log10(low * 1000) - 0.1, math.log10(high * 1000) + 0.1], row=1, col=1)
    if math.isfinite(tail_low) and tail_low > 0:
        fig.update_xaxes(range=[math.log10(tail_low * 1000) - 0.05, math.log10(high * 1000) + 0.05], row=1, col=2)
    fig.update_xaxes(type="log", title_text="latency, ms")
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%", title_text="share of requests sent", row=1, col=1)
    fig.update_yaxes(range=[tail_share, 1.002], tickformat=".0%", row=1, col=2)
    fig.update_layout(
        height=440,
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 40, "b": 40},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def _cdf(frame: pd.DataFrame | None, stage: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(sorted latencies of the successful requests, their share of the requests sent, requests sent)."""
    if frame is None or "stage" not in frame:
        return None
    subset = frame[frame["stage"] == stage]
    sent = subset[subset["sent"].notna()] if "sent" in subset else subset
    if sent.empty:
        return None
    ok = sent["latency"].notna() & np.isfinite(sent["latency"].astype(float))
    if "error" in sent:
        ok &= sent["error"].isna()
    values = np.sort(sent.loc[ok, "latency"].astype(float).to_numpy())
    if not len(values):
        return None
    share = np.arange(1, len(values) + 1) / len(sent)
    if len(values) > 2000:  # enough points for the eye, and the page stays small
        pick = np.unique(np.linspace(0, len(values) - 1, 2000).astype(int))
        values, share = values[pick], share[pick]
    return values, share, len(sent)


def to_html(fig: go.Figure, first: bool, div_id: str) -> str:
    """The figure as a <div>; the first on the page carries plotly.js inline (no CDN, no network)."""
    html: str = fig.to_html(full_html=False, include_plotlyjs=first, config=CONFIG, div_id=div_id)
    return html
