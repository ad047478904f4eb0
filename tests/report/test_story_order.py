"""The report's first chart tells the story in order: the fault, then the OOM kill at the time the container was
terminated (not when Prometheus next scraped the counter), then the errors it caused at the time the requests
were cut off (not when they were sent). Read from the report's own data, not from the rendered picture."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kfchaos.evidence.model import Bundle, Item
from kfchaos.metrics.names import OOM_KILLS
from kfchaos.metrics.snapshot import MetricsSnapshot, Series
from kfchaos.report import DATA_ID, html
from kfchaos.report.data import time_series

T0 = 1_764_800_000.0
KILL = T0 + 30.2  # the container is OOM-killed here
SCRAPE = 5.0  # Prometheus scrapes the counter every 5 s: it rises at T0 + 35


def _frame() -> pd.DataFrame:
    """10 requests/s of 1 s each for 60 s; those running at the kill are cut off at KILL + 0.05 s."""
    intended = T0 + np.arange(600) / 10.0
    latency = np.full(600, 1.0)
    cut = (intended < KILL) & (intended + latency > KILL)
    error = np.where(cut, "connect", None)
    latency = np.where(cut, KILL + 0.05 - intended, latency)
    return pd.DataFrame(
        {
            "stage": 75,
            "fault_active": True,
            "intended": intended,
            "sent": intended,
            "status": np.where(cut, np.nan, 200),
            "error": error,
            "latency": latency,
        }
    )


def _metrics() -> MetricsSnapshot:
    times = T0 + np.arange(0, 61, SCRAPE)
    values = np.where(times >= KILL, 1.0, 0.0)
    return MetricsSnapshot(source="test", series={OOM_KILLS: Series(OOM_KILLS, times, values, kind="counter")})


def _bundle() -> Bundle:
    finished = pd.Timestamp(KILL, unit="s", tz="UTC").isoformat()
    data = {"lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": finished}}}
    item = Item("last-state", "Last terminated state of the container", "demo/demo-llm/server")
    return Bundle(trigger=["oom_kills"], window=(T0, T0 + 60), items=[item.got("pod status", "OOMKilled", data)])


def _context(evidence: bool) -> dict[str, Any]:
    context: dict[str, Any] = {
        "records": _frame(),
        "metrics": _metrics(),
        "run_state": {"fault_windows": [{"name": "kv-cache-swell", "applied_at": T0 + 28.0,
                                         "verified": [{"from": T0 + 28.0, "to": T0 + 29.0}]}]},
    }  # fmt: skip
    if evidence:
        context["evidence"] = _bundle()
    return context


def _page_events(context: dict[str, Any]) -> list[dict[str, Any]]:
    document = {"experiment": "story", "version": "1", "status": "FAIL", "stages": [], "checks": [], "reasons": []}
    page = html(document, context)
    found = re.search(rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', page, flags=re.S)
    assert found is not None
    return json.loads(found.group(1))["events"]


def test_fault_then_oom_kill_at_its_termination_time_then_the_errors_it_caused() -> None:
    story = _page_events(_context(evidence=True))
    kinds = [e["kind"] for e in story]
    assert kinds == ["fault", "OOM kill", "first error"], story
    fault, kill, error = story
    assert fault["earliest"] == T0 + 28.0
    assert kill["earliest"] == kill["latest"] == pytest.approx(KILL)  # the pod status' time, not the scrape's
    assert kill["source"].startswith("pod status")
    assert error["earliest"] == pytest.approx(KILL + 0.05)  # cut off at the kill, though sent up to 1 s before


def test_without_the_pod_status_the_scrape_interval_is_the_uncertainty_not_the_time() -> None:
    story = _page_events(_context(evidence=False))
    kill = next(e for e in story if e["kind"] == "OOM kill")
    assert kill["earliest"] == T0 + 30.0 and kill["latest"] == T0 + 35.0  # (previous scrape, this scrape]
    assert kill["earliest"] <= KILL <= kill["latest"]
    error = next(e for e in story if e["kind"] == "first error")
    assert kill["earliest"] <= error["earliest"]


def test_errors_are_plotted_when_they_happened() -> None:
    series = time_series(_frame())
    assert series is not None
    first = int(np.flatnonzero(series.errors["connect"])[0])
    low, high = series.starts[first], series.starts[first] + series.width
    assert low <= KILL + 0.05 < high  # binned by send time, they sat a window before the kill


def test_a_fault_starts_at_the_chaos_objects_own_injection_time_when_the_run_state_has_it() -> None:
    context = _context(evidence=True)
    context["run_state"]["fault_windows"][0]["injected_at"] = T0 + 28.4
    fault = next(e for e in _page_events(context) if e["kind"] == "fault")
    assert fault["earliest"] == fault["latest"] == T0 + 28.4 and "injected_at" in fault["source"]
