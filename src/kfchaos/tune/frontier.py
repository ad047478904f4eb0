"""The frontier chart of a sweep: each configuration's goodput against its P99 under the faults, drawn with Plotly as
the run report's figures are (kfchaos.report.plots: plotly.js inline, so the page works offline).

A configuration is one point, at the highest load stage its run reached and judged (a run an abort rule stopped is
placed where it stopped, not at the top of the ramp it never reached); its label says which stage and the load it
held (the breakpoint). A thin line joins its stages from the lowest load up, so the chart shows how each one degraded
along the ramp. Up and to the left is better: more requests within the SLOs, at a lower P99.

Marks: PASSed the whole ramp (green circle), FAIL (red cross), INCONCLUSIVE (amber diamond), OOM-killed (dark red
hexagram, whatever its verdict: never recommended), and the recommendation ringed in gold. The SLO's p99_max is a
dashed line. A P99 that is infinite (requests at the 99th percentile never completed, counted as the verdict counts
them) is drawn in a column right of every measured value, marked ∞, never at a made-up latency. A configuration with
no goodput at its highest judged stage (no records) cannot be placed and is listed under the chart instead
(`unplaced`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go

from kfchaos.report.plots import plain
from kfchaos.tune.outcome import ConfigOutcome, StageOutcome
from kfchaos.tune.recommend import Recommendation

OOM_KILLED = "OOM-killed (never recommended)"
RECOMMENDED = "recommended"
# trace name -> (marker symbol, colour); a configuration is drawn in exactly one of these (the OOM mark first).
MARKS = {
    "PASS (whole ramp)": ("circle", "#1a7f37"),
    "FAIL": ("x", "#cc2222"),
    "INCONCLUSIVE": ("diamond", "#9a6700"),
    OOM_KILLED: ("hexagram", "#7a0000"),
}
INFINITE_LABEL = "∞"


@dataclass(frozen=True)
class Placed:
    outcome: ConfigOutcome
    stage: StageOutcome
    p99_ms: float  # math.inf for an unbounded P99
    goodput: float


def mark_of(outcome: ConfigOutcome) -> str:
    """Which of MARKS a configuration is drawn with."""
    if outcome.oom_kills:
        return OOM_KILLED
    if outcome.holds_ramp:
        return "PASS (whole ramp)"
    return "FAIL" if outcome.status == "FAIL" else "INCONCLUSIVE"


def _point(stage: StageOutcome) -> tuple[float, float] | None:
    if stage.p99 is None or stage.goodput is None:
        return None
    return stage.p99 * 1000, stage.goodput


def placed(outcomes: list[ConfigOutcome]) -> tuple[list[Placed], list[ConfigOutcome]]:
    """The configurations the chart can place (at their highest judged stage), and those it cannot."""
    out, unplaced = [], []
    for outcome in outcomes:
        stage = outcome.highest_judged
        point = _point(stage) if stage is not None else None
        if stage is None or point is None:
            unplaced.append(outcome)
        else:
            out.append(Placed(outcome, stage, *point))
    return out, unplaced


def _held(outcome: ConfigOutcome) -> str:
    return "held no stage" if outcome.breakpoint is None else f"held {outcome.breakpoint}%"


def _hover(item: Placed) -> str:
    o = item.outcome
    p99 = "∞ (requests never completed)" if math.isinf(item.p99_ms) else f"{item.p99_ms:.0f} ms"
    stages = ", ".join(f"{s.stage}% {s.status}" for s in o.stages)
    return "<br>".join(
        plain(line)
        for line in (
            f"{o.name}: {o.status}, {_held(o)}",
            f"at {item.stage.stage}%: goodput {100 * item.goodput:.1f}%, P99 {p99}",
            f"stages: {stages}",
            f"OOM kills: {o.oom_kills}; cost {o.cost:g}",
            o.settings,
        )
    )


def frontier(
    outcomes: list[ConfigOutcome], recommendation: Recommendation, p99_max: float | None
) -> tuple[go.Figure | None, list[ConfigOutcome]]:
    """The chart (None when no configuration can be placed) and the configurations it could not place."""
    points, unplaced = placed(outcomes)
    if not points:
        return None, unplaced
    finite = [s.p99 * 1000 for o in outcomes for s in o.stages if s.p99 is not None and math.isfinite(s.p99)]
    limit_ms = p99_max * 1000 if p99_max else None
    widest = max([*finite, limit_ms or 0.0]) or 1000.0
    infinite_x = widest * 1.25  # the ∞ column, right of every measured value and of the limit

    def x_of(p99_ms: float) -> float:
        return infinite_x if math.isinf(p99_ms) else p99_ms

    fig = go.Figure()
    first_ramp = True
    for outcome in outcomes:  # each configuration's stages, lowest load first
        path = [(s, _point(s)) for s in outcome.stages if s.judged]
        drawn = [(s, xy) for s, xy in path if xy is not None]
        if len(drawn) < 2:
            continue
        fig.add_trace(
            go.Scatter(
                x=[x_of(xy[0]) for _, xy in drawn],
                y=[xy[1] for _, xy in drawn],
                mode="lines+markers",
                line={"color": "rgba(120,120,120,0.45)", "width": 1},
                marker={"size": 5, "color": "rgba(120,120,120,0.6)"},
                name="stages of a configuration, lowest load first",
                legendgroup="ramp",
                showlegend=first_ramp,
                customdata=[outcome.name] * len(drawn),
                hovertext=[plain(f"{outcome.name} at {s.stage}%: {s.status}") for s, _ in drawn],
                hoverinfo="text",
            )
        )
        first_ramp = False
    for mark, (symbol, colour) in MARKS.items():
        group = [p for p in points if mark_of(p.outcome) == mark]
        if not group:
            continue
        fig.add_trace(
            go.Scatter(
                x=[x_of(p.p99_ms) for p in group],
                y=[p.goodput for p in group],
                mode="markers+text",
                marker={"symbol": symbol, "size": 15, "color": colour, "line": {"width": 1, "color": colour}},
                text=[plain(f"{p.outcome.name} @{p.stage.stage}% ({_held(p.outcome)})") for p in group],
                textposition="top center",
                name=mark,
                customdata=[p.outcome.name for p in group],
                hovertext=[_hover(p) for p in group],
                hoverinfo="text",
            )
        )
    chosen = next((p for p in points if p.outcome is recommendation.chosen), None)
    if chosen is not None:
        fig.add_trace(
            go.Scatter(
                x=[x_of(chosen.p99_ms)],
                y=[chosen.goodput],
                mode="markers",
                marker={"symbol": "circle-open", "size": 30, "color": "#d4a000", "line": {"width": 3}},
                name=RECOMMENDED,
                customdata=[chosen.outcome.name],
                hovertext=[plain(f"recommended: {chosen.outcome.name} ({chosen.outcome.settings})")],
                hoverinfo="text",
            )
        )
    shapes, notes = [], []
    if limit_ms is not None:
        shapes.append(_vertical(limit_ms, "#c22", "dash"))
        notes.append(_note(limit_ms, f"p99_max {limit_ms:.0f} ms"))
    if any(math.isinf(p.p99_ms) for p in points):
        shapes.append(_vertical(infinite_x, "#7a0000", "dot"))
        notes.append(_note(infinite_x, f"P99 {INFINITE_LABEL}: requests never completed"))
    fig.update_layout(
        template="plotly_white",
        height=520,
        margin={"l": 60, "r": 30, "t": 50, "b": 60},
        shapes=shapes,
        annotations=notes,
        xaxis={"title": "P99 under the faults, ms (at the configuration's highest judged stage)", "rangemode": "tozero",
               "range": [0, infinite_x * 1.12]},
        yaxis={"title": "goodput (requests within the SLOs, per request sent)", "tickformat": ".0%",
               "range": [-0.03, 1.1]},
        legend={"orientation": "h", "y": -0.18},
    )  # fmt: skip
    return fig, unplaced


def _vertical(x: float, colour: str, dash: str) -> dict[str, object]:
    return {"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
            "line": {"color": colour, "width": 1.5, "dash": dash}}  # fmt: skip


def _note(x: float, text: str) -> dict[str, object]:
    return {"x": x, "y": 1.0, "xref": "x", "yref": "paper", "text": plain(text), "showarrow": False,
            "yanchor": "bottom", "font": {"size": 11, "color": "#555"}}  # fmt: skip
