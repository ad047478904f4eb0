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
from kfchaos.report.data import failure_bounds, time_series
from kfchaos.report.page import DATA_ID, html

T0 = 1_764_800_000.0
KILL = T0 + 30.2  # the container is OOM-killed here
SCRAPE = 5.0  # Prometheus scrapes the counter every 5 s: it rises at T0 + 35


def at(epoch: float) -> Any:
    """An epoch time to the millisecond: pytest.approx's default relative tolerance is half an hour at 1.76e9."""
    return pytest.approx(epoch, rel=0, abs=1e-3)


def _frame(recorded_end: bool = True) -> pd.DataFrame:
    """10 requests/s of 1 s each for 60 s; those running at the kill end at KILL + 0.05 s: answered 503 by the
    proxy (an HTTP error: the records hold its latency), or, with `recorded_end` False, cut off mid-stream (a
    protocol error: the replayer records no end time, only the first token 0.2 s after the send)."""
    intended = T0 + np.arange(600) / 10.0
    latency = np.full(600, 1.0)
    cut = (intended < KILL) & (intended + latency > KILL)
    error = np.where(cut, "http" if recorded_end else "protocol", None)
    latency = np.where(cut, KILL + 0.05 - intended if recorded_end else np.nan, latency)
    status = np.where(cut, 503 if recorded_end else 200, 200)
    return pd.DataFrame(
        {
            "stage": 75,
            "fault_active": True,
            "intended": intended,
            "sent": intended,
            "status": status,
            "error": error,
            "latency": latency,
            "ttft": np.full(600, 0.2),
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
    assert kill["earliest"] == kill["latest"] == at(KILL)  # the pod status' time, not the scrape's
    assert kill["source"].startswith("pod status")
    assert error["earliest"] == at(KILL + 0.05)  # cut off at the kill, though sent up to 1 s before


def test_without_the_pod_status_only_when_the_kill_was_counted_is_known() -> None:
    """kube-state-metrics counts an OOM kill when the next container starts, after the back-off: the scrape that
    shows it bounds the kill from above only; it is never drawn as the kill's time."""
    story = _page_events(_context(evidence=False))
    kill = next(e for e in story if e["kind"] == "OOM kill")
    assert kill["earliest"] is None and kill["latest"] == T0 + 35.0 >= KILL  # JSON null: not known


def test_errors_are_plotted_when_they_happened() -> None:
    series = time_series(_frame())
    assert series is not None
    first = int(np.flatnonzero(series.errors["http"])[0])
    low, high = series.starts[first], series.starts[first] + series.width
    assert low <= KILL + 0.05 < high  # binned by send time, they sat a window before the kill


def test_a_fault_starts_at_the_backends_own_injection_time_when_the_run_state_has_it() -> None:
    context = _context(evidence=True)
    context["run_state"]["fault_windows"][0]["injected_at"] = T0 + 28.4
    fault = next(e for e in _page_events(context) if e["kind"] == "fault")
    assert fault["earliest"] == fault["latest"] == T0 + 28.4 and "injected_at" in fault["source"]


def test_a_whole_second_injection_time_is_that_second_and_never_before_the_apply() -> None:
    # Kubernetes event timestamps carry whole seconds: 10:00:28Z is some time in [28, 29), and not before the
    # object was created at 28.6.
    context = _context(evidence=True)
    window = context["run_state"]["fault_windows"][0]
    window["injected_at"], window["applied_at"] = T0 + 28.0, T0 + 28.6
    fault = next(e for e in _page_events(context) if e["kind"] == "fault")
    assert (fault["earliest"], fault["latest"]) == (T0 + 28.6, T0 + 29.0)


def test_a_cut_stream_is_placed_at_the_records_end_time() -> None:
    # Records version 3 hold when the replayer saw the stream cut (`ended`): the first error is exact.
    frame = _frame(recorded_end=False)
    frame["ended"] = np.where(frame["error"].notna(), KILL + 0.05, frame["sent"] + frame["latency"])
    earliest, latest = failure_bounds(frame, timeout=30.0)
    failed = frame["error"].notna()
    assert float(earliest[failed].min()) == float(latest[failed].min()) == at(KILL + 0.05)


def test_a_fault_seen_in_effect_before_its_apply_time_starts_when_it_was_seen() -> None:
    # An apply time later than the fault's first verified window (a run state written by an older version kept
    # the last stage's apply) is not the fault's start: it was seen in effect before the first error.
    context = _context(evidence=True)
    window = context["run_state"]["fault_windows"][0]
    window["applied_at"], window["verified"] = T0 + 40.0, [{"from": T0 + 28.0, "to": T0 + 45.0}]
    story = _page_events(context)
    assert story[0]["kind"] == "fault" and story[0]["earliest"] == T0 + 28.0, story


def test_the_faults_own_failed_requests_are_not_the_first_error() -> None:
    # A storm's slow reader that times out by design, ten seconds before the kill: the verdict leaves the fault's
    # own requests out, and so does the story.
    context = _context(evidence=True)
    frame = context["records"]
    frame["fault_request"] = None
    frame.loc[0, ["fault_request", "error", "latency"]] = ["abort-storm", "timeout", KILL - 10.0 - T0]
    error = next(e for e in _page_events(context) if e["kind"] == "first error")
    assert error["earliest"] == at(KILL + 0.05) and "left out" in error["source"], error
