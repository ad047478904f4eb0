"""The sweep's page: one self-contained HTML file, built as the run report is (kfchaos.report.selfcontained: its style,
plotly.js inline once, a Content-Security-Policy that runs the page's own scripts only, the data as a JSON block), so it
opens offline, from a file or a CI artifact.

What it shows, top down: the recommendation (or "none does" and the closest), the frontier chart
(kfchaos.tune.frontier), the table (each configuration's verdict per stage, breakpoint, OOM kills, goodput and P99 at
its highest judged stage, settings, run folder; the recommended row marked), the recommendation's evidence, and the
TuneResult document (`<script type="application/json" id="kfchaos-tune-data">`).
"""

from __future__ import annotations

import json
import math
from html import escape

from kfchaos.report.plots import to_html
from kfchaos.report.selfcontained import STYLE, json_block, with_policy
from kfchaos.tune.frontier import frontier
from kfchaos.tune.outcome import ConfigOutcome, StageOutcome
from kfchaos.tune.resultfile import Result
from kfchaos.tune.table import document

DATA_ID = "kfchaos-tune-data"
RECOMMENDED_ROW = "recommended"  # the class of the recommended configuration's table row
_EXTRA_STYLE = "tr.recommended td{background:#fff6d6;font-weight:600}.NOT{color:#777}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _p99(stage: StageOutcome | None) -> str:
    if stage is None or stage.p99 is None:
        return "-"
    return "∞ (never completed)" if math.isinf(stage.p99) else f"{stage.p99 * 1000:.0f} ms"


def _status(status: str) -> str:
    return f"<span class='{escape(status.split()[0])}'>{escape(status)}</span>"


def _row(outcome: ConfigOutcome, recommended: bool) -> str:
    top = outcome.highest_judged
    name = escape(outcome.name) + (" ★ recommended" if recommended else "")
    cells = [
        name,
        f"{outcome.cost:g}",
        _status(outcome.status),
        "-" if outcome.breakpoint is None else f"{outcome.breakpoint}%",
        str(outcome.oom_kills),
        *[_status(s.status) for s in outcome.stages],
        "-" if top is None else f"{top.stage}%",
        _percent(top.goodput if top else None),
        _p99(top),
        f"<code>{escape(outcome.settings)}</code>",
        escape(outcome.run_dir or "(none)"),
    ]
    mark = f" class='{RECOMMENDED_ROW}'" if recommended else ""
    return f"<tr{mark} data-configuration='{escape(outcome.name)}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def table_html(result: Result) -> str:
    ramp = [s.stage for s in result.outcomes[0].stages]
    header = ["configuration", "cost", "verdict", "breakpoint", "OOM kills", *[f"{s}%" for s in ramp],
              "highest judged", "goodput there", "P99 there", "settings", "run folder"]  # fmt: skip
    rows = [_row(o, o is result.recommendation.chosen) for o in result.outcomes]
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _badge(result: Result) -> str:
    chosen = result.recommendation.chosen
    return f"recommended: {chosen.name}" if chosen is not None else "none PASSes the whole ramp"


def html(result: Result) -> str:
    chosen = result.recommendation.chosen
    badge = "PASS" if chosen is not None else "FAIL"
    title = f"kfchaos tune: {result.experiment}"
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{escape(title)}</title><style>{STYLE}{_EXTRA_STYLE}</style></head><body>",
        f"<h1>{escape(title)} <span class='badge {badge}'>{escape(_badge(result))}</span></h1>",
        f"<p>{len(result.outcomes)} configurations (grid {escape(result.grid)}), each one chaos run of the experiment"
        f" under its faults. Cheapest means: {escape(result.recommendation.cost_rule)}.</p>",
    ]
    if result.disagreement:
        parts.append(f"<p class='warn'>warning: {escape(result.disagreement)}</p>")
    figure, unplaced = frontier(result.outcomes, result.recommendation, result.p99_max)
    parts.append("<h2>Frontier: goodput against P99 under the faults</h2>")
    parts.append(
        "<p class='legend'><small>One point per configuration, at the highest load stage its run reached and judged "
        "(its label: that stage, and the load it held); grey lines join its stages from the lowest load. Up and to "
        "the left is better. Green: PASSed the whole ramp; red cross: FAIL; amber: INCONCLUSIVE; dark red hexagram: "
        "OOM-killed, never recommended; gold ring: the recommendation. P99 counts a request that never completed as "
        "∞, as the verdict does; such points stand in the ∞ column. Hover for each configuration's stages and "
        "settings.</small></p>"
    )
    if figure is not None:
        parts.append(to_html(figure, True, "frontier"))
    else:
        parts.append("<p>No configuration has a judged stage with goodput and P99: nothing to draw.</p>")
    if unplaced:
        names = ", ".join(escape(o.name) for o in unplaced)
        parts.append(f"<p class='warn'>not drawn (no goodput or P99 at any judged stage): {names}</p>")
    parts += ["<h2>Configurations</h2>", table_html(result)]
    parts += ["<h2>Recommendation</h2>", f"<p><b>{escape(result.recommendation.headline())}</b></p><ul>"]
    parts += [f"<li>{escape(line)}</li>" for line in result.recommendation.evidence]
    parts.append("</ul>")
    data = document(result.experiment, result.grid, result.outcomes, result.recommendation, result.p99_max)
    parts.append(
        "<details><summary>TuneResult JSON</summary><pre>" + escape(json.dumps(data, indent=1)) + "</pre></details>"
    )
    parts.append(f'<script type="application/json" id="{DATA_ID}">{json_block(data)}</script>')
    parts.append("</body></html>\n")
    return with_policy("\n".join(parts))
