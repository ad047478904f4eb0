"""Markdown and HTML reports: plots as inline SVG that parse, nothing fetched from outside, matched failure modes."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from kfchaos.cli import main
from kfchaos.knowledge import failure_modes, match
from kfchaos.metrics.names import KV_CACHE_USAGE
from kfchaos.metrics.snapshot import Series
from kfchaos.report import html, markdown
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

    summary = (out / "summary.md").read_text()
    assert "| 100% | FAIL | 3000 |" in summary
    assert "KV-cache exhaustion under long contexts" in summary
    assert "--gpu-memory-utilization 0.85" in summary and "--max-num-seqs" in summary

    page = (out / "report.html").read_text()
    collector = _Collector()
    collector.feed(page)
    assert collector.external == []  # opens offline: nothing to fetch
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) >= 4  # latency, error rate, OOM kills, KV cache (+ OOM counter)
    for svg in svgs:
        ET.fromstring(svg)  # each plot is well-formed SVG
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
    assert "<svg" in html(document, {})


def test_knowledge_base_is_well_formed_and_ranks_fault_matches_first() -> None:
    modes = failure_modes()
    assert len({m.id for m in modes}) == len(modes)
    verdict = {"checks": [], "stages": [{"checks": [{"name": "p99_drift", "status": "FAIL"}]}]}
    ranked = match(verdict, ["network-delay"])
    assert ranked[0].mode.id == "latency-bound-collective"
    assert match({"checks": [], "stages": [{"checks": [{"name": "p99_drift", "status": "PASS"}]}]}) == []
