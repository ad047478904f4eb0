"""Small hand-made SVG charts (no plotting dependency): categorical x (stages) or time x, one y axis.

Output is a self-contained <svg> element, escaped, so the HTML report opens offline in any browser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

WIDTH, HEIGHT = 640, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 28, 40
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


@dataclass
class Chart:
    title: str
    y_label: str
    x_labels: list[str] = field(default_factory=list)  # categorical x; empty for a numeric x
    lines: list[tuple[str, list[float], list[float]]] = field(default_factory=list)  # (name, xs, ys)
    bars: list[tuple[str, list[float]]] = field(default_factory=list)  # (name, one value per x label)
    band: tuple[float, float, str] | None = None  # (low, high, label): e.g. the baseline band
    limits: list[tuple[float, str]] = field(default_factory=list)  # horizontal lines with labels


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw), default=raw)
    first = math.floor(low / step) * step
    return [first + i * step for i in range(count + 2) if first + i * step <= high + step * 0.5]


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def render(chart: Chart) -> str:
    values = [y for _, _, ys in chart.lines for y in ys if math.isfinite(y)]
    values += [v for _, vs in chart.bars for v in vs if math.isfinite(v)]
    values += [v for v, _ in chart.limits]
    if chart.band:
        values += [chart.band[0], chart.band[1]]
    top = max(values, default=1.0) * 1.1 or 1.0
    ticks = _ticks(0.0, top)
    top = max(top, ticks[-1])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / top)

    categorical = bool(chart.x_labels)
    xs_all = [x for _, xs, _ in chart.lines for x in xs]
    x_min, x_max = (
        (0.0, float(len(chart.x_labels))) if categorical else (min(xs_all, default=0), max(xs_all, default=1))
    )
    span = (x_max - x_min) or 1.0

    def x(v: float) -> float:
        offset = 0.5 if categorical else 0.0
        return LEFT + plot_w * (v + offset - x_min) / span

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{escape(chart.title)}" font-family="sans-serif" font-size="11">',
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{escape(chart.title)}</text>',
        f'<text x="12" y="{TOP + plot_h / 2}" transform="rotate(-90 12 {TOP + plot_h / 2})" text-anchor="middle">'
        f"{escape(chart.y_label)}</text>",
    ]
    for tick in ticks:
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{_fmt(tick)}</text>')
    if chart.band:
        low, high, label = chart.band
        out.append(
            f'<rect x="{LEFT}" y="{y(high):.1f}" width="{plot_w}" height="{max(1.0, y(low) - y(high)):.1f}" '
            f'fill="#2ca02c" opacity="0.15"><title>{escape(label)}</title></rect>'
        )
        out.append(
            f'<text x="{WIDTH - RIGHT - 4}" y="{y(high) - 3:.1f}" text-anchor="end" fill="#2ca02c">'
            f"{escape(label)}</text>"
        )
    for value, label in chart.limits:
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#d62728" '
            'stroke-dasharray="4 3"/>'
        )
        out.append(f'<text x="{LEFT + 4}" y="{y(value) - 3:.1f}" fill="#d62728">{escape(label)}</text>')
    if chart.bars:
        slot = plot_w / max(1, len(chart.x_labels))
        width = slot * 0.7 / len(chart.bars)
        for b, (name, vs) in enumerate(chart.bars):
            for i, v in enumerate(vs):
                if not math.isfinite(v):
                    continue
                left = LEFT + slot * i + slot * 0.15 + b * width
                out.append(
                    f'<rect x="{left:.1f}" y="{y(v):.1f}" width="{width:.1f}" height="{y(0) - y(v):.1f}" '
                    f'fill="{COLORS[b % len(COLORS)]}"><title>{escape(name)}: {_fmt(v)}</title></rect>'
                )
    for n, (name, xs, ys) in enumerate(chart.lines):
        points = [(x(a), y(b)) for a, b in zip(xs, ys, strict=True) if math.isfinite(b)]
        color = COLORS[n % len(COLORS)]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for px, py in points if len(points) <= 50 else []:
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{color}"/>')
        out.append(
            f'<text x="{WIDTH - RIGHT - 4}" y="{TOP + 12 + 13 * n}" text-anchor="end" fill="{color}">'
            f"{escape(name)}</text>"
        )
    for i, label in enumerate(chart.x_labels):
        out.append(f'<text x="{x(i):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{escape(label)}</text>')
    if not categorical and xs_all:
        out.append(f'<text x="{LEFT}" y="{HEIGHT - 10}">{_fmt(0)} s</text>')
        out.append(f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 10}" text-anchor="end">{_fmt(x_max - x_min)} s</text>')
    out.append(
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#333"/>'
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{y(0):.1f}" stroke="#333"/></svg>'
    )
    return "\n".join(out)
