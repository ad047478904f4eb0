"""Markdown and HTML reports: Plotly inline (nothing fetched from outside), what an SRE looks for first, the
matched failure modes ranked."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pyarrow.parquet as pq

from kfchaos.cli import main
from kfchaos.knowledge import failure_modes, match
from kfchaos.metrics.names import KV_CACHE_USAGE
from kfchaos.metrics.snapshot import Series
from kfchaos.report.markdown import markdown
from kfchaos.report.page import html
from tests.report.sample import write_sample
from tests.verdict.builders import concat, experiment_text, records
from tests.verdict.fixtures import baseline, exponential, oom_snapshot

START = 1_000_000.0
LONG_CONTEXT = "[{name: burst, type: long-context-burst, params: {requests: 8, context_tokens: 32000}}]"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.external: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href") and value and not value.startswith("#"):
                self.external.append(value)


def test_failing_long_context_run_reports_plots_and_kv_cache_advice(tmp_path: Path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(experiment_text("ttft_p99_max: 500ms", stages=[10, 100], faults=LONG_CONTEXT))
    table = concat(
        records(10, exponential(0.5, 3000), start=START, ttft=exponential(0.05, 3000)),
        records(100, exponential(0.5, 3000), start=START + 40, ttft=exponential(0.3, 3000)),  # TTFT P99 ~1.4 s
    )
    pq.write_table(table, tmp_path / "r.parquet")
    snapshot = oom_snapshot(START, START + 80)
    times = snapshot.series["oom_kills"].times
    snapshot.series[KV_CACHE_USAGE] = Series(KV_CACHE_USAGE, times, np.linspace(0.3, 0.99, len(times)))
    snapshot.write(tmp_path / "m.json")
    baseline().write(tmp_path / "b.yaml")
    out = tmp_path / "out"
    argv = ["verdict", "--experiment", str(exp), "--records", str(tmp_path / "r.parquet"), "--baseline"]
    code = main([*argv, str(tmp_path / "b.yaml"), "--metrics", str(tmp_path / "m.json"), "--out", str(out)])
    assert code == 1
    document = json.loads((out / "verdict.json").read_text())
    assert document["status"] == "FAIL"

    summary = (out / "report.md").read_text()
    assert "| 100% | FAIL | 3000 |" in summary
    assert "KV-cache exhaustion under long contexts" in summary
    assert "--gpu-memory-utilization 0.85" in summary and "--max-num-seqs" in summary

    page = (out / "report.html").read_text()
    collector = _Collector()
    collector.feed(page)
    assert collector.external == []  # opens offline: nothing to fetch
    assert page.count("Plotly.newPlot") == 2  # drawn by plotly.js in the browser
    assert page.count("plotly.js v") == 1  # its script inline, once
    assert "KV-cache usage" in page and "baseline P99" in page
    assert page.index("Long") > 0 and "Known failure modes" in page


def test_reports_accept_the_pipeline_run_verdict_shape() -> None:
    document = {
        "kind": "kfchaos.RunVerdict",
        "experiment": "x",
        "version": "1.0.0",
        "status": "FAIL",
        "reasons": ["stage 30: oom_kill_rate: 1 OOM kill(s)"],
        "steps": [
            {
                "step": "stage",
                "detail": {
                    "stage": {
                        "stage": 30,
                        "status": "FAIL",
                        "requests": 10,
                        "checks": [
                            {
                                "name": "oom_kill_rate",
                                "status": "FAIL",
                                "value": 0.1,
                                "reason": "1 OOM kill",
                                "details": {"oom_kills": 1},
                                "unit": "fraction",
                            }
                        ],
                    }
                },
            }
        ],
    }
    text = markdown(document, {})
    assert "| 30% | FAIL | 10 |" in text and "Container memory limit too close" in text
    assert "Stage 30%" in html(document, {})


def test_knowledge_base_is_well_formed_and_ranks_fault_matches_first() -> None:
    modes = failure_modes()
    assert len({m.id for m in modes}) == len(modes)
    verdict = {"checks": [], "stages": [{"checks": [{"name": "p99_drift", "status": "FAIL"}]}]}
    ranked = match(verdict, ["network-delay"])
    assert ranked[0].mode.id == "latency-bound-collective"
    assert match({"checks": [], "stages": [{"checks": [{"name": "p99_drift", "status": "PASS"}]}]}) == []


def _plotly_figures(page: str) -> list[dict]:
    """The figures' JSON as plotly.js receives it: Plotly.newPlot("id", data, layout, config)."""
    decoder = json.JSONDecoder()
    figures = []
    for found in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', page):
        data, end = decoder.raw_decode(page, found.end())
        layout, _ = decoder.raw_decode(page, end + page[end:].index("{"))
        figures.append({"id": found.group(1), "data": data, "layout": layout})
    return figures


def test_the_page_shows_header_stages_time_series_and_checks_at_a_glance(tmp_path: Path) -> None:
    sample = write_sample(tmp_path / "in")
    out = tmp_path / "runs" / "run-42"
    main([*sample.verdict_argv(), "--out", str(out)])
    page = (out / "report.html").read_text()

    # The header: experiment, version, the run id that names the folder, target, start and end, baseline.
    header = page[page.index("class='header'") : page.index("<h2>Why")]
    for text in ("verdict-test 1.0.0", "run-42", "http://127.0.0.1:8000", "2025-12-03T22:13:20Z", "P99 400 ms"):
        assert text in header, text
    # Failures first in "Why"; P50/P90 figures where records exist; the stage whose P99 is infinite is shown.
    why = page[page.index("<h2>Why") : page.index("<h2>Stages")]
    assert why.index("FAIL") < why.index("INCONCLUSIVE")
    stages = page[page.index("<h2>Stages") : page.index("<h2>Over the run")]
    assert "n/a" not in stages and "no data" not in stages.split("OOM kills")[1].split("</tr>")[1]
    assert "∞ (43 never completed)" in stages
    assert stages.count("<tr>") == 4  # header + stages 10, 30, 60: none dropped

    figures = {f["id"]: f for f in _plotly_figures(page)}
    assert set(figures) == {"timeline", "cdf"}
    timeline = figures["timeline"]
    names = {trace.get("name") for trace in timeline["data"]}
    for name in ("P50", "P90", "P99", "baseline P99 band (P10–P90)", "SLO p99_max", "TTFT P99", "intended rate",
                 "achieved rate", "error: timeout", "error: connect", "send lag P99", "KV-cache usage %",
                 "GPU memory used MiB", "preemptions", "OOM kills", "container restarts"):  # fmt: skip
        assert name in names, name
    # One time axis (dates) shared by every row; stage boundaries and the fault window shaded across rows.
    axes = [k for k in timeline["layout"] if k.startswith("xaxis")]
    assert len(axes) == 7 and all(timeline["layout"][a].get("type") == "date" for a in axes)
    shapes = timeline["layout"]["shapes"]
    assert sum(1 for s in shapes if s["type"] == "rect" and "220,40,40" in s.get("fillcolor", "")) >= 1
    labels = [a["text"] for a in timeline["layout"]["annotations"]]
    assert {"<b>stage 10%</b>", "<b>stage 30%</b>", "<b>stage 60%</b>"} <= set(labels)
    assert any("fault active" in t for t in labels)
    oom = next(t for t in timeline["data"] if t.get("name") == "OOM kills")
    assert len(oom["x"]) == 1  # one kill, one marker
    cdf_names = {t.get("name") for t in figures["cdf"]["data"]}
    assert {"baseline P99", "p99_max"} <= cdf_names
    assert "stage 60% (FAIL), 2% never completed" in cdf_names  # the curve ends short of 100 %: said so
    assert any(str(n).startswith("stage 10% (") for n in cdf_names)

    # Each stage's checks with their reasons in a column that wraps; the raw JSON folded away.
    assert page.count("<td class='reason'>") >= 18 and "overflow-wrap:anywhere" in page
    assert "<details><summary>Verdict JSON</summary>" in page
    # Failure modes ranked: the one most failing checks point at first.
    modes = page[page.index("Known failure modes that fit") :]
    assert modes.index("KV-cache exhaustion") < modes.index("Latency-bound collective")


def test_fault_windows_are_read_from_the_documented_shape_and_shaded_applied_then_verified(tmp_path: Path) -> None:
    from kfchaos.report.data import fault_windows
    from kfchaos.report.page import html
    from kfchaos.rundir import layout

    start = 1_764_800_000.0
    # The run-level list of the verdict document / audit record / run state (docs/verdict.md, "Fault windows").
    window = {"fault": "delay", "name": "delay-66821c46e1", "kind": "NetworkChaos", "stages": [30, 60],
              "applied_at": start + 10, "removed_at": start + 110, "watched_in": [30, 60],
              "verified": [{"from": start + 41, "to": start + 79, "stage": 30},
                           {"from": start + 81, "to": start + 108, "stage": 60}]}  # fmt: skip
    (found,) = fault_windows({"run_state": {"fault_windows": [window]}}, {}, None)
    assert (found.name, found.applied, found.removed, found.source) == ("delay", start + 10, start + 110, "run state")
    assert found.verified == ((start + 41, start + 79), (start + 81, start + 108))
    # Per stage step (detail.fault_windows), one fault seen by two stages, is one fault.
    halves = (window["verified"][:1], window["verified"][1:])
    steps = [{"step": "stage", "detail": {"fault_windows": [{**window, "verified": h}]}} for h in halves]
    (merged,) = fault_windows({"steps": steps}, {}, None)
    assert merged.verified == found.verified and merged.source == "pipeline"
    # An older single verified_at holds until removal.
    (simple,) = fault_windows(
        {}, {"fault_windows": [{"name": "x", "applied_at": 1, "verified_at": 2, "removed_at": 9}]}, None
    )
    assert simple.verified == ((2.0, 9.0),)

    sample = write_sample(tmp_path / "in")
    out = tmp_path / "run"
    main([*sample.verdict_argv(), "--out", str(out)])
    run = layout.open_run(out)
    context = layout.report_context(run)
    context["run_state"] = {"fault_windows": [window]}
    page = html(run.verdict(), context)
    timeline = next(f for f in _plotly_figures(page) if f["id"] == "timeline")
    fills = [s.get("fillcolor") for s in timeline["layout"]["shapes"] if s["type"] == "rect"]
    # One shape per window over the full height of the rows (they share one x axis), not one per row.
    assert fills.count("rgba(255,160,0,0.18)") == 1 and fills.count("rgba(220,40,40,0.16)") == 2
    red = [s for s in timeline["layout"]["shapes"] if s.get("fillcolor") == "rgba(220,40,40,0.16)"]
    assert all((s["xref"], s["yref"], s["y0"], s["y1"]) == ("x", "paper", 0, 1) for s in red)
    assert any(a["text"] == "⚡ delay" for a in timeline["layout"]["annotations"])
    assert "the pipeline recorded no fault windows" not in page


def test_the_control_baseline_travels_with_the_run_folder_and_is_drawn_on_the_cdf(tmp_path: Path) -> None:
    from kfchaos.rundir import layout

    sample = write_sample(tmp_path / "in", with_control=True)
    out = tmp_path / "run"
    main([*sample.verdict_argv(), "--out", str(out)])
    run = layout.open_run(out)
    assert run.has(layout.CONTROL_RECORDS) and run.manifest()["rejudged"]["matches"]
    page = run.file(layout.REPORT_HTML).read_text()
    cdf = next(f for f in _plotly_figures(page) if f["id"] == "cdf")
    traces = {t.get("name"): t for t in cdf["data"]}
    assert {"control at 10%", "control at 30%", "control at 60%"} <= set(traces)  # its records' CDF, dashed
    points = traces["control P50/P99 at 60%"]
    assert points["y"] == [0.5, 0.99] and points["error_x"]["arrayminus"][1] > 0  # P99 with its interval


def test_a_fault_with_thousands_of_verified_windows_is_drawn_with_a_bounded_number_of_shapes() -> None:
    """A traffic-side fault interleaved with the base traffic leaves a window per request in the records
    fallback: hundreds per stage. Drawn one by one (add_vrect per row) they took hours; close ones are joined."""
    from kfchaos.report.data import FaultWindow
    from kfchaos.report.plots import MAX_FAULT_SHADES, _shade, merge_close

    start = 1_764_800_000.0
    windows = tuple((start + i * 0.1, start + i * 0.1) for i in range(5000))  # one every 100 ms for 500 s
    apart = tuple((start + i * 10.0, start + i * 10.0 + 1) for i in range(20))  # 9 s between them: all kept
    fig = go.Figure()
    _shade(fig, [(10, start, start + 500)], [FaultWindow("rotation", None, windows + apart, None, "records")], 0)
    red = [s for s in fig.layout.shapes if s.fillcolor == "rgba(220,40,40,0.16)"]
    assert 1 <= len(red) <= MAX_FAULT_SHADES + 1
    assert merge_close([(0, 1), (1.2, 2), (5, 6)], 0.5) == [(0, 2), (5, 6)]
    assert merge_close([(5, 6), (0, 1)], 0.5) == [(0, 1), (5, 6)]


def test_a_traffic_side_fault_without_recorded_windows_is_shaded_by_name_over_its_answered_requests() -> None:
    import pandas as pd

    from kfchaos.report.data import fault_windows

    start = 1_764_800_000.0
    base = pd.DataFrame({"stage": 10, "fault_active": False, "intended": start + np.arange(300) * 0.1,
                         "sent": start + np.arange(300) * 0.1, "status": 200.0, "latency": 1.0,
                         "fault_request": None})  # fmt: skip
    # The fault's requests interleave with the traffic from 5 s to 25 s; the last two were never answered.
    times = start + 5 + np.arange(40) * 0.5
    answered = [200.0] * 38 + [np.nan] * 2
    fault = pd.DataFrame({"stage": 10, "fault_active": True, "intended": times, "sent": times,
                          "status": answered, "latency": 2.0, "fault_request": "rotation"})  # fmt: skip
    frame = pd.concat([base, fault], ignore_index=True)
    (window,) = fault_windows({}, {}, frame)
    assert window.name == "rotation" and window.source == "records"
    assert window.verified == ((start + 5, start + 5 + 37 * 0.5 + 2.0),)
    # Nobody answered: nothing was seen in effect, so nothing is shaded for it.
    frame.loc[frame["fault_request"] == "rotation", "status"] = np.nan
    assert fault_windows({}, {}, frame) == []
