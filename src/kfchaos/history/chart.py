"""One check at one stage across the runs, drawn as an inline SVG for the history page: each run's value as a dot
coloured by its verdict (hollow where the run is unverified), the limit as a dashed line, a version bump as a
vertical rule labelled with the new version. Plain SVG: the page runs no script and needs nothing from elsewhere."""

from __future__ import annotations

from html import escape

from kfchaos.history.model import RunEntry
from kfchaos.history.summary import Row

WIDTH, HEIGHT, PAD = 360, 70, 6
COLOUR = {"PASS": "#1a7f37", "FAIL": "#c22", "INCONCLUSIVE": "#d4a72c"}


def svg(runs: list[RunEntry], row: Row) -> str:
    """The chart, or "" when no run has a value for the check."""
    values = [c.value for c in row.cells if c is not None and c.value is not None]
    if not values:
        return ""
    low = min([*values, row.limit] if row.limit is not None else values)
    high = max([*values, row.limit] if row.limit is not None else values)
    span = (high - low) or abs(high) or 1.0
    step = (WIDTH - 2 * PAD) / max(1, len(runs) - 1)

    def y(value: float) -> float:
        return HEIGHT - PAD - (value - low) / span * (HEIGHT - 2 * PAD)

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' role='img'>"]
    if row.limit is not None:
        parts.append(f"<line x1='0' x2='{WIDTH}' y1='{y(row.limit):.1f}' y2='{y(row.limit):.1f}' stroke='#888' "
                     "stroke-dasharray='4 3'><title>limit</title></line>")  # fmt: skip
    last = None
    for i, (run, cell) in enumerate(zip(runs, row.cells, strict=True)):
        x = PAD + i * step
        if last is not None and run.pipeline_version != last:
            parts.append(f"<line x1='{x - step / 2:.1f}' x2='{x - step / 2:.1f}' y1='0' y2='{HEIGHT}' stroke='#bbb'/>")
            parts.append(f"<text x='{x - step / 2 + 2:.1f}' y='10' font-size='9' fill='#666'>"
                         f"{escape(run.pipeline_version or '?')}</text>")  # fmt: skip
        last = run.pipeline_version
        if cell is None or cell.value is None:
            continue
        colour = COLOUR[cell.status]
        fill = colour if run.verified else "none"
        title = escape(f"{run.run_id} ({run.pipeline_version}): {cell.status} {cell.value:.4g}")
        parts.append(f"<circle cx='{x:.1f}' cy='{y(cell.value):.1f}' r='3' fill='{fill}' stroke='{colour}'>"
                     f"<title>{title}</title></circle>")  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)
