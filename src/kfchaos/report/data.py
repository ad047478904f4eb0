"""What the report shows, pulled out of a run's documents: the header, the stages' figures, the records as a
time series over fixed windows, the stage spans, the fault windows and the cluster series.

Everything is read defensively: a part that is absent is left out of the page (with a line saying so),
never invented. Times are epoch seconds here; the plots turn them into UTC datetimes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kfchaos import parquetguard
from kfchaos.faults.activity import run_fault_windows
from kfchaos.metrics.names import OOM_KILLS, RESTARTS

COLUMNS = (
    "stage", "fault_active", "intended", "sent", "status", "error", "latency", "ttft", "itl_p99", "tpot",
    "long_context", "fault_request", "ended",
)  # fmt: skip


def stages_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Stage results from a `kfchaos.Verdict` (stages) or a pipeline `kfchaos.RunVerdict` (steps[].detail)."""
    if "stages" in document:
        return list(document["stages"])
    found = []
    for step in document.get("steps", []):
        detail = step.get("detail") or {}
        if step.get("step") == "stage" and isinstance(detail.get("stage"), dict):
            found.append(detail["stage"])
    return found


def check_of(stage: dict[str, Any], name: str) -> dict[str, Any]:
    return next((c for c in stage.get("checks", []) if c.get("name") == name), {})


def load_frame(records: Any) -> pd.DataFrame | None:
    """The records as a DataFrame (only the columns the report uses), or None when there are none."""
    if records is None:
        return None
    if isinstance(records, pd.DataFrame):
        return records
    if isinstance(records, pa.Table):
        table = records
    elif isinstance(records, str | Path):
        parquetguard.check(records)
        schema = pq.read_schema(records) if Path(records).is_file() else None
        names = [c for c in COLUMNS if schema is None or c in schema.names]
        table = pq.read_table(records, columns=names)
    else:  # kfchaos.verdict.requests.Requests: arrays, no error kinds
        frame = pd.DataFrame(
            {
                "stage": records.stage,
                "fault_active": getattr(records, "fault_active", np.zeros(len(records), dtype=bool)),
                "intended": records.intended,
                "sent": records.sent,
                "latency": records.latency,
            }
        )
        return frame
    frame = table.select([c for c in COLUMNS if c in table.column_names]).to_pandas()
    if "error" in frame:
        frame["error"] = frame["error"].astype("object")
    return frame


# --- per stage -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageFigures:
    stage: int
    status: str
    requests: int
    p50: float  # over the requests sent; a request that never completed counts as +inf (as the verdict counts it)
    p90: float
    p99: float
    p99_interval: tuple[float, float] | None
    never_completed: int
    error_rate: float
    timeout_rate: float
    oom_kills: float
    goodput: float  # share of sent requests that succeeded within every per-request latency SLO
    goodput_rate: float  # those per second of the stage
    window: tuple[float, float] | None


def _nan(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else float("nan")


def _succeeded(frame: pd.DataFrame) -> pd.Series:
    ok = frame["latency"].notna() & np.isfinite(frame["latency"].astype(float))
    if "error" in frame:
        ok &= frame["error"].isna()
    if "status" in frame:
        ok &= frame["status"].fillna(0).between(200, 299)  # a completion is a 2xx (kfchaos.verdict.requests)
    return ok


def _sent(frame: pd.DataFrame) -> pd.Series:
    return frame["sent"].notna() if "sent" in frame else pd.Series(True, index=frame.index)


def quantiles(frame: pd.DataFrame, qs: tuple[float, ...]) -> list[float]:
    """Quantiles of latency over the sent requests, a request that never completed counting as +inf."""
    sent = frame[_sent(frame)]
    if sent.empty:
        return [math.nan] * len(qs)
    values = np.where(_succeeded(sent), sent["latency"].astype(float), np.inf)
    values = np.sort(values)
    out = []
    for q in qs:
        rank = max(0, math.ceil(q * len(values)) - 1)  # the empirical quantile: the value at rank ceil(q n)
        out.append(float(values[rank]))
    return out


def goodput(frame: pd.DataFrame, slo: Any) -> tuple[float, float]:
    """(share, per second) of sent requests that succeeded within the per-request latency SLOs."""
    sent = frame[_sent(frame)]
    if sent.empty:
        return math.nan, math.nan
    good = _succeeded(sent)
    for column, limit in (("latency", getattr(slo, "p99_max", None)), ("ttft", getattr(slo, "ttft_p99_max", None))):
        if limit is not None and column in sent:
            good &= sent[column].fillna(np.inf) <= float(limit)
    span = float(sent["intended"].max() - sent["intended"].min()) if len(sent) > 1 else 0.0
    count = float(good.sum())
    return count / len(sent), (count / span if span > 0 else math.nan)


def stage_figures(document: dict[str, Any], frame: pd.DataFrame | None, slo: Any = None) -> list[StageFigures]:
    out = []
    for stage in stages_of(document):
        percent = int(stage["stage"])
        p99_check = check_of(stage, "p99") or check_of(stage, "p99_drift")
        interval = p99_check.get("interval") if p99_check.get("unit") == "s" else None
        p50 = p90 = p99 = math.nan
        never = 0
        share = rate = math.nan
        raw = stage.get("window")
        window: tuple[float, float] | None = None
        if isinstance(raw, list | tuple) and len(raw) == 2 and all(isinstance(v, int | float) for v in raw):
            window = (float(raw[0]), float(raw[1]))
        subset = frame[frame["stage"] == percent] if frame is not None and "stage" in frame else None
        if subset is not None and len(subset):
            p50, p90, p99 = quantiles(subset, (0.5, 0.9, 0.99))
            never = int((_sent(subset) & ~_succeeded(subset)).sum())
            share, rate = goodput(subset, slo)
            window = window or (float(subset["intended"].min()), float(subset["intended"].max()))
        else:  # no records (the pipeline's report): the checks' own figures; the drift check keeps an infinite P99
            p99 = _nan(check_of(stage, "p99").get("value"))
            candidate = (check_of(stage, "p99_drift").get("details") or {}).get("candidate_p99")
            if math.isnan(p99) and isinstance(candidate, int | float):
                p99 = float(candidate)
        out.append(
            StageFigures(
                stage=percent,
                status=str(stage.get("status", "")),
                requests=int(stage.get("requests", 0) or 0),
                p50=p50,
                p90=p90,
                p99=p99,
                p99_interval=(_nan(interval[0]), _nan(interval[1])) if interval else None,
                never_completed=never,
                error_rate=_nan(check_of(stage, "error_rate").get("value")),
                timeout_rate=_nan(check_of(stage, "timeout_rate").get("value")),
                oom_kills=_nan((check_of(stage, "oom_kill_rate").get("details") or {}).get("oom_kills")),
                goodput=share,
                goodput_rate=rate,
                window=window,
            )
        )
    return out


# --- over time -----------------------------------------------------------------------------------------------


@dataclass
class TimeSeries:
    """Records bucketed into fixed windows of `width` seconds: latencies and rates by intended send time, errors
    by the time they happened (failure_times: a request cut off by a crash fails when it is cut off)."""

    width: float
    starts: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    errors: dict[str, np.ndarray] = field(default_factory=dict)


def window_width(span: float) -> float:
    """About 100 windows over the run, whole seconds, at least 1 s."""
    return float(max(1, math.ceil(span / 100)))


def time_series(frame: pd.DataFrame) -> TimeSeries | None:
    if frame is None or frame.empty or "intended" not in frame:
        return None
    start = float(frame["intended"].min())
    span = float(frame["intended"].max()) - start
    width = window_width(span)
    bins = ((frame["intended"] - start) // width).astype(int)
    failed_bins = ((failure_times(frame) - start) // width).clip(lower=0).fillna(0).astype(int)
    count = max(int(bins.max()), int(failed_bins.max())) + 1
    starts = start + width * np.arange(count)
    ok = _succeeded(frame)
    series = TimeSeries(width, starts)

    def per_window(values: pd.Series, mask: pd.Series, q: float) -> np.ndarray:
        data = pd.DataFrame({"bin": bins[mask], "v": values[mask].astype(float)}).dropna()
        result = data.groupby("bin")["v"].quantile(q) if len(data) else pd.Series(dtype=float)
        return result.reindex(range(count)).to_numpy(dtype=float)

    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        series.columns[name] = per_window(frame["latency"], ok, q)
    for column, name in (("ttft", "ttft_p99"), ("itl_p99", "itl_p99"), ("tpot", "tpot_p99")):
        if column in frame and frame[column].notna().any():
            series.columns[name] = per_window(frame[column], ok, 0.99)
    series.columns["intended_rate"] = np.bincount(bins, minlength=count) / width
    sent = _sent(frame)
    if "sent" in frame:
        sent_bins = ((frame["sent"][sent] - start) // width).clip(0, count - 1).astype(int)
        series.columns["achieved_rate"] = np.bincount(sent_bins, minlength=count) / width
        lag = frame["sent"] - frame["intended"]
        series.columns["send_lag_p99"] = per_window(lag, sent, 0.99)
        series.columns["never_completed"] = np.bincount(bins[sent & ~ok], minlength=count).astype(float)
    if "error" in frame:
        for kind in sorted(str(k) for k in frame["error"].dropna().unique()):
            # dropped and cancelled requests were never sent: they have no failure, only their planned time
            at = bins if kind in ("dropped", "cancelled") else failed_bins
            series.errors[kind] = np.bincount(at[frame["error"] == kind], minlength=count).astype(float)
    if "status" in frame:
        http = frame["error"].isna() if "error" in frame else pd.Series(True, index=frame.index)
        bad = http & frame["status"].notna() & ~frame["status"].fillna(0).between(200, 299)
        if bad.any():
            series.errors["HTTP status not 2xx"] = np.bincount(failed_bins[bad], minlength=count).astype(float)
    return series


def stage_spans(frame: pd.DataFrame | None, figures: list[StageFigures]) -> list[tuple[int, float, float]]:
    """(stage percent, first intended send, last intended send) of each stage."""
    spans = []
    for f in figures:
        if f.window is not None and all(isinstance(v, int | float) for v in f.window):
            spans.append((f.stage, float(f.window[0]), float(f.window[1])))
    if not spans and frame is not None and "stage" in frame and len(frame):
        for stage, group in frame.groupby("stage"):
            spans.append((int(stage), float(group["intended"].min()), float(group["intended"].max())))
    return sorted(spans, key=lambda s: s[1])


# --- fault windows -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultWindow:
    """One fault's life: applied (the API accepted it) -> verified active (seen in effect, one or more
    windows; between two windows nobody looked) -> removed."""

    name: str
    applied: float | None
    verified: tuple[tuple[float, float], ...]
    removed: float | None
    source: str  # where it was read from: "run state", "verdict", "pipeline", "records"
    # When the backend says the fault took effect, where the run state carries it (`injected_at`: Chaos Mesh's
    # earliest containerRecords[].events[] Apply success, an allocator pod's Ready transition, the demo fault
    # proxy's created_at; kfchaos.faults.objectkinds.injection_time); the event time of the fault's start.
    injected: float | None = None

    @property
    def first(self) -> float | None:
        """The earliest sign of the fault: its apply, or a verified window that began before it (seen in effect
        is evidence that it was in effect, whatever an apply time says)."""
        seen = [t for t in (self.applied, self.verified[0][0] if self.verified else None) if t is not None]
        return min(seen) if seen else None


def _epoch(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC).timestamp()
        except ValueError:
            return None
    return None


def _verified(item: dict[str, Any]) -> tuple[tuple[float, float], ...]:
    """`verified: [{"from": t, "to": t}, ...]` (docs/verdict.md, "Fault windows"), or one `verified_at` that
    holds until removal."""
    raw = item.get("verified")
    windows = []
    if isinstance(raw, list):
        for window in raw:
            if isinstance(window, dict):
                start, end = _epoch(window.get("from")), _epoch(window.get("to"))
            elif isinstance(window, list | tuple) and len(window) == 2:
                start, end = _epoch(window[0]), _epoch(window[1])
            else:
                continue
            if start is not None and end is not None and end >= start:
                windows.append((start, end))
    else:
        start = _epoch(item.get("verified_at", raw))
        end = _epoch(item.get("removed_at"))
        if start is not None:
            windows.append((start, end if end is not None and end >= start else start))
    return tuple(sorted(windows))


def _windows_from(items: Any, source: str) -> list[FaultWindow]:
    out = []
    if isinstance(items, dict):  # {"name": {...}}
        items = [{"name": k, **v} for k, v in items.items() if isinstance(v, dict)]
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        applied = _epoch(item.get("applied_at", item.get("applied")))
        verified = _verified(item)
        removed = _epoch(item.get("removed_at", item.get("removed")))
        if applied is None and not verified:
            continue
        name = str(item.get("fault") or item.get("name") or item.get("type") or "fault")
        out.append(FaultWindow(name, applied, verified, removed, source, _epoch(item.get("injected_at"))))
    return out


def fault_windows(context: dict[str, Any], document: dict[str, Any], frame: pd.DataFrame | None) -> list[FaultWindow]:
    """The faults' windows from the first place that has them: the run-level `fault_windows` of the run state,
    the verdict or the audit record; the stage steps' `detail.fault_windows`; else the spans where the records
    say a fault was active (labelled so)."""
    holders = (("run state", context.get("run_state")), ("verdict", document), ("audit", context.get("audit")))
    for source, holder in holders:
        if isinstance(holder, dict) and holder.get("fault_windows"):
            found = _windows_from(holder["fault_windows"], source)
            if found:
                return found
    steps = context.get("steps") or (context.get("audit") or {}).get("steps") or document.get("steps") or []
    # One fault over the stages that saw it, by the run's own rule (what the pipeline writes to the run state).
    merged = run_fault_windows([s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else [])
    return _windows_from(merged, "pipeline") or _windows_from_records(frame)


def _windows_from_records(frame: pd.DataFrame | None) -> list[FaultWindow]:
    """Without recorded windows: each traffic-side fault by name, over the span in each stage from the first of
    its requests sent to the last one answered (a request the server answered is the fault seen in effect);
    then the spans of any other rows the records mark fault_active."""
    if frame is None or "fault_active" not in frame or not frame["fault_active"].any():
        return []
    out = []
    by_fault = frame["fault_request"].notna() if "fault_request" in frame else pd.Series(False, index=frame.index)
    for name, rows in frame[by_fault].groupby("fault_request", sort=True):
        spans = []
        for _, stage_rows in rows.groupby("stage", sort=True):
            answered = stage_rows[stage_rows["status"].notna()] if "status" in stage_rows else stage_rows.iloc[:0]
            sent = answered["sent"].where(answered["sent"].notna(), answered["intended"])
            done = (sent + answered["latency"].fillna(0.0)).max()
            if len(answered) and math.isfinite(float(done)):
                spans.append((float(sent.min()), float(done)))
        if spans:
            out.append(FaultWindow(str(name), None, tuple(sorted(spans)), None, "records"))
    rest = frame[~by_fault]
    if not rest["fault_active"].any():
        return out
    ordered = rest.sort_values("intended")
    active = ordered["fault_active"].to_numpy(dtype=bool)
    times = ordered["intended"].to_numpy(dtype=float)
    edges = np.flatnonzero(np.diff(np.concatenate([[False], active, [False]]).astype(int)))
    marked = tuple((float(times[a]), float(times[b - 1])) for a, b in zip(edges[::2], edges[1::2], strict=True))
    return [*out, FaultWindow("fault active (records)", None, marked, None, "records")]


# --- baseline ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BaselineBand:
    median: float
    low: float  # P10 over the baseline's intervals
    high: float  # P90 over the baseline's intervals
    limit: float | None  # median x (1 + allowed drift)
    label: str


def baseline_band(context: dict[str, Any], document: dict[str, Any], drift: float | None) -> BaselineBand | None:
    """The baseline P99's spread over its intervals (the file's series.latency_p99), else its P99 alone."""
    stat = ((context.get("baseline") or {}).get("series") or {}).get("latency_p99")
    p99 = (document.get("baseline") or {}).get("latency_p99")
    if isinstance(stat, dict) and isinstance(stat.get("median"), int | float):
        median = float(stat["median"])
        low, high = _nan(stat.get("p10", median)), _nan(stat.get("p90", median))
        low, high = (median if math.isnan(low) else low), (median if math.isnan(high) else high)
    elif isinstance(p99, int | float):
        median = low = high = float(p99)
    else:
        return None
    high = max(high, median)
    limit = median * (1 + drift) if drift is not None else None
    label = f"baseline P99 {median * 1000:.0f} ms (P10–P90 of its intervals {low * 1000:.0f}–{high * 1000:.0f} ms)"
    return BaselineBand(median, low, high, limit, label)


@dataclass(frozen=True)
class ControlStage:
    """The control baseline at one stage rate (`kfchaos baseline control`): exact figures from its records."""

    stage: int
    p50: float | None
    p99: float | None
    p99_interval: tuple[float, float] | None
    samples: int


def control_stages(context: dict[str, Any], document: dict[str, Any]) -> dict[int, ControlStage]:
    """The control baseline's stages from the verdict's `baseline.control` or the baseline file's `control`."""
    for holder in (document.get("baseline"), context.get("baseline")):
        control = holder.get("control") if isinstance(holder, dict) else None
        stages = control.get("stages") if isinstance(control, dict) else None
        if not isinstance(stages, list):
            continue
        found = {}
        for item in stages:
            if not isinstance(item, dict) or not isinstance(item.get("stage"), int):
                continue
            raw = item.get("latency_p99_interval")
            interval = raw if isinstance(raw, list) and len(raw) == 2 else []
            ok = len(interval) == 2 and all(isinstance(v, int | float) for v in interval)
            found[int(item["stage"])] = ControlStage(
                int(item["stage"]),
                _finite(item.get("latency_p50")),
                _finite(item.get("latency_p99")),
                (float(interval[0]), float(interval[1])) if ok else None,
                int(item.get("samples") or 0),
            )
        if found:
            return found
    return {}


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


# --- cluster series ------------------------------------------------------------------------------------------


def series_points(metrics: Any, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(epoch times, values) of one snapshot series, or None when absent or empty."""
    if metrics is None:
        return None
    from kfchaos.metrics.snapshot import MetricsSnapshot

    snapshot = metrics if isinstance(metrics, MetricsSnapshot) else MetricsSnapshot.from_dict(metrics)
    series = snapshot.series.get(name)
    if series is None or not len(series.times):
        return None
    return np.asarray(series.times, dtype=float), np.asarray(series.values, dtype=float)


def counter_events(points: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    """(times, how many) where a counter went up; a drop is a counter reset, so the new value is the increase."""
    if points is None or len(points[0]) < 2:
        return np.array([]), np.array([])
    times, values = points
    values = np.nan_to_num(values, nan=0.0)
    diff = np.diff(values)
    increase = np.where(diff < 0, values[1:], diff)
    at = np.flatnonzero(increase > 0)
    return times[1:][at], increase[at]


def rise_intervals(metrics: Any, name: str) -> list[tuple[float, float, float]]:
    """(previous sample, first sample showing it, how many) for each event of a snapshot series: a cumulative
    counter's rises; for an increase per interval (the catalog's restarts, `increase(...[w])` sampled more often
    than w, stored as a gauge) each run of positive samples is one event, which happened after the last sample
    that showed none -- not each wobble of the overlapping increases, which counted one restart four times."""
    points = series_points(metrics, name)
    if points is None:
        return []
    from kfchaos.metrics.snapshot import MetricsSnapshot

    snapshot = metrics if isinstance(metrics, MetricsSnapshot) else MetricsSnapshot.from_dict(metrics)
    if snapshot.series[name].kind == "counter":
        return counter_intervals(points)
    times, values = points
    positive = np.nan_to_num(values, nan=0.0) > 0
    out = []
    for start in np.flatnonzero(positive[1:] & ~positive[:-1]) + 1:
        stop = start
        while stop < len(values) and positive[stop]:
            stop += 1
        out.append((float(times[start - 1]), float(times[start]), float(np.round(np.nanmax(values[start:stop])))))
    return out


def counter_intervals(points: tuple[np.ndarray, np.ndarray] | None) -> list[tuple[float, float, float]]:
    """(previous sample, sample where the counter rose, increase) for each rise: the event happened after the
    previous scrape and by this one, so the scrape interval is its uncertainty, not its time."""
    if points is None or len(points[0]) < 2:
        return []
    times, values = points
    values = np.nan_to_num(values, nan=0.0)
    diff = np.diff(values)
    increase = np.where(diff < 0, values[1:], diff)
    return [(float(times[i]), float(times[i + 1]), float(increase[i])) for i in np.flatnonzero(increase > 0)]


# --- events in the order they happened -----------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """Something that happened, at the time it happened: in [earliest, latest], equal when its own time is known
    (a chaos object's injection time, a container's termination time); a scrape interval otherwise."""

    kind: str  # "fault", "first error", "OOM kill", "container restart"
    label: str
    earliest: float
    latest: float
    source: str  # where the time comes from

    @property
    def exact(self) -> bool:
        return self.earliest == self.latest


def _ended(frame: pd.DataFrame) -> pd.Series:
    """The records' own end time (`ended`, records version 3), NaN where absent (older records, never sent)."""
    return frame["ended"].astype(float) if "ended" in frame else pd.Series(np.nan, index=frame.index)


def failure_times(frame: pd.DataFrame) -> pd.Series:
    """The earliest time each request can have ended: the records' `ended` where they hold it (whatever the
    outcome); else its send (else intended) time plus its latency where the records hold one (a response, an
    HTTP error); else its last sign of life, the first token when it streamed one, else its send. Records
    written before `ended` existed hold no end time for a connection cut or a malformed stream, so such an error
    is known only to lie between this time and its send + the target's timeout (failure_bounds)."""
    start = frame["sent"].where(frame["sent"].notna(), frame["intended"]) if "sent" in frame else frame["intended"]
    start = start.astype(float)
    latency = frame["latency"].astype(float) if "latency" in frame else pd.Series(np.nan, index=frame.index)
    alive = frame["ttft"].astype(float).fillna(0.0) if "ttft" in frame else 0.0
    ended = _ended(frame)
    return ended.where(ended.notna(), start + latency.where(latency.notna(), alive)).astype(float)


def failure_bounds(frame: pd.DataFrame, timeout: float | None) -> tuple[pd.Series, pd.Series]:
    """(earliest, latest) end of each request: equal where the records hold its end time or its latency;
    otherwise from its last sign of life to its send + `timeout` (had it run longer it would be a timeout), or
    unbounded without one."""
    earliest = failure_times(frame)
    start = frame["sent"].where(frame["sent"].notna(), frame["intended"]) if "sent" in frame else frame["intended"]
    known = frame["latency"].notna() if "latency" in frame else pd.Series(False, index=frame.index)
    known = known | _ended(frame).notna()
    limit = start.astype(float) + (timeout if timeout is not None else math.inf)
    return earliest, earliest.where(known, limit)


def _failed(frame: pd.DataFrame) -> pd.Series:
    failed = pd.Series(False, index=frame.index)
    if "error" in frame:
        failed |= frame["error"].notna() & ~frame["error"].isin(["dropped", "cancelled", "client_abort"])
    if "status" in frame:
        failed |= frame["status"].notna() & (frame["status"].fillna(0) >= 500)
    return failed


def _terminations(context: dict[str, Any]) -> list[tuple[float, str]]:
    """(finishedAt, reason) of the containers the OOM evidence bundle read from the pod status
    (lastState.terminated, kfchaos.evidence.collect; k8s.io/api core/v1 ContainerStateTerminated)."""
    from kfchaos.report.evidence import bundle_of

    bundle = bundle_of(context)
    out = []
    for item in bundle.items if bundle is not None else []:
        data = item.data if item.kind == "last-state" and isinstance(item.data, dict) else {}
        terminated = (data.get("lastState") or {}).get("terminated") if isinstance(data, dict) else None
        if isinstance(terminated, dict):
            at = _epoch(terminated.get("finishedAt"))
            if at is not None:
                out.append((at, str(terminated.get("reason") or "")))
    return out


def _injection_bounds(fault: FaultWindow) -> tuple[float, float]:
    """The fault's start as an interval. Kubernetes writes event timestamps in whole seconds (metav1.Time
    marshals RFC 3339 without fractions: kubernetes/apimachinery pkg/apis/meta/v1/time.go, MarshalJSON), so a
    whole-second `injected_at` means some time in that second; and nothing took effect before it was applied."""
    injected = float(fault.injected or 0.0)
    latest = injected + 1.0 if injected.is_integer() else injected
    earliest = max(injected, fault.applied) if fault.applied is not None and fault.applied < latest else injected
    return earliest, latest


def events(context: dict[str, Any], frame: pd.DataFrame | None, faults: list[FaultWindow], metrics: Any) -> list[Event]:
    """The run's story in order: each fault's start (injection time), the first failed request (when it
    failed), each OOM kill and container restart (the container's termination time from the pod status where
    the evidence bundle read it, else the scrape interval in which the counter rose)."""
    found = []
    for fault in faults:
        if fault.injected is not None:
            at, last, source = *_injection_bounds(fault), "the backend's own injection time (injected_at)"
        elif fault.first is not None:
            at, source = fault.first, f"{fault.source}: applied, else first verified"
            last = at
        else:
            continue
        found.append(Event("fault", f"⚡ {fault.name}", at, last, source))
    if frame is not None and len(frame):
        # The fault's own requests (a storm's slow readers, a churned adapter's 404s) fail by design and are left
        # out of the verdict's checks (docs/verdict.md); the story's first error is the traffic's.
        failed = _failed(frame)
        if "fault_request" in frame:
            failed &= frame["fault_request"].isna()
        if failed.any():
            experiment = context.get("experiment")
            timeout = experiment.spec.target.timeout if experiment is not None else None
            earliest, latest = failure_bounds(frame, timeout)
            low, high = float(earliest[failed].min()), float(latest[failed].min())
            source = "records: the traffic's first failed request (the fault's own requests left out), " + (
                "at its end time (ended), else send time + latency"
                if low == high
                else "between its last sign of life (its end time is not recorded) and its send + the target's timeout"
            )
            found.append(Event("first error", "first failed request", low, high, source))
    terminations = _terminations(context)
    # A restart is the next container's start, not the old one's termination: only kills take the pod status' time.
    for name, kind, reasons in ((OOM_KILLS, "OOM kill", ("OOMKilled",)), (RESTARTS, "container restart", ())):
        previous = -math.inf
        for _before, after, _count in rise_intervals(metrics, name):
            # The pod status' own time where the bundle read one since the counter's previous rise: a restart is
            # counted only when the next container starts, after the back-off, so it may precede this interval.
            exact = [t for t, why in terminations if previous < t <= after and why in reasons]
            if exact:
                found.append(Event(kind, kind, max(exact), max(exact), "pod status lastState.terminated.finishedAt"))
            else:
                # Only when it was counted is known: kube-state-metrics counts an OOM kill or restart when the next
                # container starts, after the kubelet's back-off, so it happened before -- how long before is not.
                found.append(Event(kind, kind, -math.inf, after, "counted by the scrape at `latest`; happened before"))
            previous = after
    # In order of the earliest time each can have happened; one known only by when it was counted, by that.
    return sorted(found, key=lambda e: (e.earliest if math.isfinite(e.earliest) else e.latest, e.latest))
