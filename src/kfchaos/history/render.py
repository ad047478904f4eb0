"""The history in words: the terminal table, the Markdown summary of `--compare OLD NEW` (short enough for a PR
comment) and an offline HTML page (no script at all; the data rides in a JSON block, like the report's)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from html import escape

import numpy as np

from kfchaos.history import chart
from kfchaos.history.model import Measurement, RunEntry
from kfchaos.history.regression import NOT_ENOUGH, NOT_TESTED, REGRESSION, Comparison, Regressions
from kfchaos.history.summary import History, Row
from kfchaos.report.mdtext import markdown_text
from kfchaos.report.selfcontained import with_policy

LETTER = {"PASS": "P", "FAIL": "F", "INCONCLUSIVE": "I"}
ABSENT, UNVERIFIED, BUMP = ".", "?", "|"
TOP_MODES = 10
TOP_MOVED = 5  # the compared checks without a regression a PR comment names, the most moved first
TOP_UNVERIFIED = 20  # the unverified runs a PR comment names: planted folders must not fill it


def figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "fraction":
        return f"{value * 100:.3g} %"
    if unit == "ratio":  # the drift checks: how far above (or below) the reference, 1 = 100 %
        return f"{value * 100:+.3g} %"
    if unit == "s":
        return f"{value * 1000:.3g} ms" if abs(value) < 1 else f"{value:.3g} s"
    return f"{value:.4g}{' ' + unit if unit else ''}"


def stage_name(stage: int | None) -> str:
    return "run" if stage is None else f"{stage}%"


def _letter(run: RunEntry, cell: Measurement | None) -> str:
    if not run.verified:
        return UNVERIFIED
    return ABSENT if cell is None else LETTER[cell.status]


def strip(history: History, row: Row) -> str:
    """One letter a run, oldest first, with a bar where the pipeline version changes."""
    out, last = [], None
    for run, cell in zip(history.runs, row.cells, strict=True):
        if last is not None and run.pipeline_version != last:
            out.append(BUMP)
        last = run.pipeline_version
        out.append(_letter(run, cell))
    return "".join(out)


def _medians(history: History, row: Row) -> str:
    parts = []
    for version in history.versions:
        values = sorted(
            c.value
            for r, c in zip(history.runs, row.cells, strict=True)
            if r.verified and r.pipeline_version == version and c is not None and c.value is not None
        )
        if values:
            parts.append(f"{version}: {figure(float(np.median(values)), row.unit)}")
    return ", ".join(parts) or "-"


def _counts(history: History) -> str:
    unverified = len(history.runs) - len(history.verified)
    return f"{len(history.runs)} runs, {len(history.verified)} verified, {unverified} unverified"


def change(c: Comparison) -> str:
    """How far the median moved toward the limit (+) or away from it (-), relative to OLD's."""
    return "-" if c.change is None else f"{c.change * 100:+.2g} %"


def _comparison_line(c: Comparison) -> str:
    where = f"{c.check} at {stage_name(c.stage)}"
    if c.outcome == NOT_TESTED:
        return f"{c.outcome.upper():<16} {where}: {c.why}"
    if c.outcome == NOT_ENOUGH:
        moved = f"median {change(c)} toward the limit; " if c.change is not None else ""
        return f"{c.outcome.upper():<16} {where}: {moved}{c.why}"
    return (
        f"{c.outcome.upper():<16} {where}: median {figure(c.old_median, c.unit)} -> {figure(c.new_median, c.unit)} "
        f"({change(c)} toward the limit; shift {figure(c.shift, c.unit)}, limit {figure(c.limit, c.unit)}), "
        f"{c.why}, {c.old_runs} vs {c.new_runs} runs"
    )


def _test_line(r: Regressions) -> str:
    return f"{r.test}; {r.confidence:.0%} confidence; at least {r.min_runs} verified runs a side"


def text(history: History) -> str:
    lines = [f"kfchaos history: {history.experiment} ({_counts(history)}; from {history.source})"]
    if not history.runs:
        lines.append("no runs of this experiment")
    lines.append("")
    lines.append(f"{'#':>3}  {'run':<32} {'started':<20} {'version':<12} {'status':<13} {'OOM':>4}  verified")
    for i, run in enumerate(history.runs, 1):
        oom = "-" if run.oom_kills is None else f"{run.oom_kills:g}"
        verified = "yes" if run.verified else "NO: " + "; ".join(run.unverified_because)[:160]
        started = run_started(run)
        lines.append(
            f"{i:>3}  {run.run_id[:32]:<32} {started:<20} {run.pipeline_version or '?':<12} "
            f"{run.status or '?':<13} {oom:>4}  {verified}"
        )
    for item in history.unreadable:
        lines.append(f"     unreadable: {item}")
    lines.append("")
    lines.append(
        f"checks, oldest run first ({' '.join(f'{v} {k}' for k, v in LETTER.items())}, {ABSENT} none, "
        f"{UNVERIFIED} unverified, {BUMP} version bump), what moved first; median per version vs the limit:"
    )
    width = max([len(r.check) for r in history.rows] + [5])
    for row in history.rows:
        lines.append(
            f"  {row.check:<{width}} {stage_name(row.stage):>4}  {strip(history, row)}  "
            f"limit {figure(row.limit, row.unit)}; {_medians(history, row)}"
        )
    for comparison in history.comparisons:
        lines.append("")
        lines += _comparison_text(comparison)
    lines.append("")
    lines.append("failure modes (verified runs): failures, then checks that could not be judged; most frequent first:")
    if not history.modes:
        lines.append("  none")
    for mode in history.modes[:TOP_MODES]:
        lines.append(
            f"  {mode.runs:>3} runs  {mode.status:<12} {mode.check} at {stage_name(mode.stage)}: "
            f"{mode.last_reason} (last {mode.last_run}; versions {', '.join(mode.versions)})"
        )
    return "\n".join(lines) + "\n"


def _comparison_text(r: Regressions) -> list[str]:
    """The regressions first, then what moved most (Regressions.comparisons' order: regression.by_movement)."""
    found = f"{len(r.regressions)} regression(s)" if r.tested else "nothing decided: not enough verified runs"
    lines = [f"{r.old} -> {r.new}: {found} ({_test_line(r)})"]
    shown = [c for c in r.comparisons if c.outcome != NOT_TESTED]
    lines += ["  " + _comparison_line(c) for c in shown]
    untested = len(r.comparisons) - len(shown)
    if untested:
        lines.append(f"  {untested} check(s) not tested: no limit, or the runs do not show which side is worse")
    return lines


def run_started(run: RunEntry) -> str:
    if run.started_at is None:
        return "?"
    return datetime.fromtimestamp(run.started_at, UTC).strftime("%Y-%m-%d %H:%MZ")


# --- Markdown: `--compare OLD NEW` ----------------------------------------------------------------------------


def _md(value: object) -> str:
    """Outside text (a reason, a folder's path, an experiment's name) in the comment: kfchaos.report.mdtext."""
    return markdown_text(value)


def _code(value: object) -> str:
    """An identifier from outside (a check, a version, a run id): a code span where it can be one as is."""
    return markdown_text(value, code=True, limit=120)


def markdown_compare(history: History) -> str:
    """A PR comment: the verdict of the comparison first, then each regression, then what could not be said. Every
    string from a run folder, a KFP run or the command line goes through kfchaos.report.mdtext.markdown_text."""
    r = history.comparisons[0]
    old_runs = [x for x in history.runs if x.pipeline_version == r.old]
    new_runs = [x for x in history.runs if x.pipeline_version == r.new]
    regressions = r.regressions
    short = [c for c in r.comparisons if c.outcome == NOT_ENOUGH]
    old, new = _code(r.old), _code(r.new)
    if regressions:
        head = f"**{len(regressions)} regression(s)** from pipeline version {old} to {new}"
    elif r.tested:
        head = f"**No regression found** from pipeline version {old} to {new}"
    else:
        head = f"**Not enough runs** to compare pipeline version {old} with {new}: no claim either way"
    lines = [
        f"### kfchaos history: {_md(history.experiment)}",
        "",
        head + ".",
        "",
        f"Runs: {old} {_side(old_runs)}; {new} {_side(new_runs)}. Test: {_md(_test_line(r))}.",
    ]
    if regressions:
        lines += [
            "",
            "| | check | stage | old median | new median | shift | limit | p | runs |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
    for c in regressions:
        lines.append(
            f"| :red_circle: regression | {_code(c.check)} | {stage_name(c.stage)} | "
            + " | ".join(_md(figure(v, c.unit)) for v in (c.old_median, c.new_median, c.shift, c.limit))
            + f" | {c.p_value:.2g} (<= {c.alpha:.2g}) | {c.old_runs} vs {c.new_runs} |"
        )
    by_why: dict[str, list[Comparison]] = {}
    for c in short:
        by_why.setdefault(c.why, []).append(c)
    for why, items in by_why.items():
        names = ", ".join(f"{_code(c.check)} at {stage_name(c.stage)}" for c in items)
        lines += ["", f"Not compared, too few runs ({_md(why)}): {names}."]
    tested = [c for c in r.comparisons if c.outcome not in (REGRESSION, NOT_ENOUGH, NOT_TESTED)]
    if tested:
        other = " other" if regressions else ""
        moved = [c for c in tested if c.moved > 0][:TOP_MOVED]  # already most moved first
        most = (
            ", the most moved first: "
            + ", ".join(f"{_code(c.check)} at {stage_name(c.stage)} {change(c)} (p = {c.p_value:.2g})" for c in moved)
            if moved
            else ""
        )
        lines += ["", f"{len(tested)}{other} check(s) compared without a regression{most}."]
    unverified = [x for x in old_runs + new_runs if not x.verified]
    if unverified:
        more = len(unverified) - TOP_UNVERIFIED
        lines += [
            "",
            f"{len(unverified)} run(s) could not be verified and were not counted: "
            + ", ".join(_code(x.run_id) for x in unverified[:TOP_UNVERIFIED])
            + (f" and {more} more (`kfchaos history` lists each, with why)" if more > 0 else ""),
        ]
    new_modes = [m for m in history.modes if r.new in m.versions and r.old not in m.versions]
    if new_modes:
        lines += ["", "Failure modes seen only since the bump:"]
        lines += [
            f"- {_md(m.status)} {_code(m.check)} at {stage_name(m.stage)} in {m.runs} run(s): {_md(m.last_reason)}"
            for m in new_modes[:5]
        ]
    return "\n".join(lines) + "\n"


def _side(runs: list[RunEntry]) -> str:
    verified = [r for r in runs if r.verified]
    statuses = ", ".join(
        f"{sum(r.status == s for r in verified)} {s}" for s in LETTER if any(r.status == s for r in verified)
    )
    return f"{len(verified)} verified run(s)" + (f" ({statuses})" if statuses else "")


# --- HTML -----------------------------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:1.5em auto;padding:0 1em;
color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 7px;font-size:13px;text-align:left}
th{background:#f6f6f6}td.num{text-align:right}.cell{display:inline-block;width:9px;height:14px;margin:0 1px}
td.strip{white-space:nowrap}
.PASS{background:#1a7f37}.FAIL{background:#c22}.INCONCLUSIVE{background:#d4a72c}.none{background:#eee}
.unverified{background:repeating-linear-gradient(45deg,#999,#999 2px,#fff 2px,#fff 4px)}.bump{margin-left:6px}
.regression{color:#c22;font-weight:600}
"""


def html(history: History) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>kfchaos history {escape(history.experiment)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>History: {escape(history.experiment)}</h1>",
        f"<p>{escape(_counts(history))}; from {escape(history.source)}.</p>",
        "<h2>Runs</h2><table><tr><th>#</th><th>run</th><th>started</th><th>pipeline version</th><th>status</th>"
        "<th>OOM kills</th><th>verified</th></tr>",
    ]
    for i, run in enumerate(history.runs, 1):
        oom = "-" if run.oom_kills is None else f"{run.oom_kills:g}"
        verified = "yes" if run.verified else "no: " + "; ".join(run.unverified_because)
        parts.append(
            f"<tr><td class=num>{i}</td><td>{escape(run.run_id)}</td><td>{escape(run_started(run))}</td>"
            f"<td>{escape(run.pipeline_version or '?')}</td><td>{escape(run.status or '?')}</td>"
            f"<td class=num>{oom}</td><td>{escape(verified)}</td></tr>"
        )
    parts.append("</table>")
    parts.append(
        "<h2>Checks across runs, what moved first</h2><table><tr><th>check</th><th>stage</th>"
        "<th>runs, oldest first</th><th>limit</th><th>median per version</th>"
        "<th>value per run (dashed: the limit)</th></tr>"
    )
    for row in history.rows:
        parts.append(
            f"<tr><td>{escape(row.check)}</td><td>{stage_name(row.stage)}</td>"
            f"<td class=strip>{_cells(history, row)}</td>"
            f"<td>{escape(figure(row.limit, row.unit))}</td><td>{escape(_medians(history, row))}</td>"
            f"<td>{chart.svg(history.runs, row)}</td></tr>"
        )
    parts.append("</table>")
    for r in history.comparisons:
        parts.append(
            f"<h2>{escape(r.old)} &rarr; {escape(r.new)}</h2><p>{escape(_test_line(r))}</p><table>"
            "<tr><th>outcome</th><th>check</th><th>stage</th><th>old median</th><th>new median</th>"
            "<th>change toward the limit</th><th>shift</th><th>limit</th><th>p</th><th>runs</th><th>why</th></tr>"
        )
        for c in r.comparisons:
            cls = " class=regression" if c.outcome == REGRESSION else ""
            p = "" if c.p_value is None else f"{c.p_value:.2g}"
            parts.append(
                f"<tr><td{cls}>{escape(c.outcome)}</td><td>{escape(c.check)}</td><td>{stage_name(c.stage)}</td>"
                f"<td>{escape(figure(c.old_median, c.unit))}</td><td>{escape(figure(c.new_median, c.unit))}</td>"
                f"<td class=num>{escape(change(c))}</td><td>{escape(figure(c.shift, c.unit))}</td>"
                f"<td>{escape(figure(c.limit, c.unit))}</td>"
                f"<td class=num>{p}</td><td>{c.old_runs} vs {c.new_runs}</td><td>{escape(c.why)}</td></tr>"
            )
        parts.append("</table>")
    parts.append(
        "<h2>Failure modes: failures, then checks that could not be judged; most frequent first</h2><table><tr>"
        "<th>runs</th><th>status</th><th>check</th><th>stage</th><th>last reason</th><th>versions</th></tr>"
    )
    for mode in history.modes:
        parts.append(
            f"<tr><td class=num>{mode.runs}</td><td>{escape(mode.status)}</td><td>{escape(mode.check)}</td>"
            f"<td>{stage_name(mode.stage)}</td><td>{escape(mode.last_reason)}</td>"
            f"<td>{escape(', '.join(mode.versions))}</td></tr>"
        )
    parts.append("</table>")
    # Inside <script>: no `<` at all (neither `</script>` nor `<!--` can end or bend the block), nor `>` or `&`.
    data = json.dumps(history.to_dict(), default=str).replace("<", "\\u003c").replace(">", "\\u003e")
    data = data.replace("&", "\\u0026")
    parts.append(f'<script type="application/json" id="kfchaos-history">{data}</script></body></html>\n')
    return with_policy("\n".join(parts))


def _cells(history: History, row: Row) -> str:
    out, last = [], None
    for run, cell in zip(history.runs, row.cells, strict=True):
        bump = " bump" if last is not None and run.pipeline_version != last else ""
        last = run.pipeline_version
        kind = "unverified" if not run.verified else ("none" if cell is None else cell.status)
        title = f"{run.run_id} ({run.pipeline_version}): " + (
            "unverified"
            if not run.verified
            else "no value"
            if cell is None
            else f"{cell.status} {figure(cell.value, cell.unit)} (limit {figure(cell.threshold, cell.unit)})"
        )
        out.append(f"<span class='cell {kind}{bump}' title='{escape(title, quote=True)}'></span>")
    return "".join(out)
