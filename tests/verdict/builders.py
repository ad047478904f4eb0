"""Records and experiments for verdict tests, built from known distributions (real pyarrow tables)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from kfchaos.records import REQUEST_SCHEMA
from kfchaos.spec import Experiment
from kfchaos.validate import parse_experiment

EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {{name: verdict-test, version: 1.0.0, owner: tests}}
spec:
  target:
    namespace: serving
    selector: {{labels: {{app: vllm}}}}
    endpoint: http://127.0.0.1:8000
  traffic:
    synthetic: {{rate: {rate:g}}}
    stages: {stages}
    stage_duration: {stage_duration}
  faults: {faults}
  slo:
{slo}
  abort: {abort}
  baseline: {{file: baselines/verdict-test.yaml}}
"""

# Request ids are unique within a stage in real records (the verdict refuses repeats), also across the
# tables a test concatenates.
_IDS = itertools.count()
_TRACES = itertools.count(1)  # every request the replayer sends has its own trace id, across the whole run

POD_KILL = "[{name: kill-one, type: pod-kill, mode: one}]"


def experiment_text(
    slo: str = "p99_drift_max: 15%",
    *,
    stages: Sequence[int] = (10, 100),
    faults: str = "[]",
    abort: str = "[]",
    stage_duration: str = "30s",
    rate: float = 1000.0,
) -> str:
    """An experiment whose plan is what `records()` builds by default: 30 s stages at 100 requests/s in stage 10
    (synthetic rate x stage / 100), so a stage of default records applies its planned load (kfchaos.verdict.load);
    tests of other shapes give their own plan."""
    if "p99_max" not in slo:
        slo += "\np99_max: 60s"  # the 200ms default would dominate tests that are about something else
    indented = "\n".join("    " + line for line in slo.splitlines())
    return EXPERIMENT.format(
        stages=list(stages), faults=faults, slo=indented, abort=abort, stage_duration=stage_duration, rate=rate
    )


def experiment(
    slo: str = "p99_drift_max: 15%",
    *,
    stages: Sequence[int] = (10, 100),
    faults: str = "[]",
    abort: str = "[]",
    stage_duration: str = "30s",
    rate: float = 1000.0,
) -> Experiment:
    text = experiment_text(slo, stages=stages, faults=faults, abort=abort, stage_duration=stage_duration, rate=rate)
    return parse_experiment(text, "verdict-test.yaml")


def records(
    stage: int,
    latency: np.ndarray,
    *,
    start: float = 1_000_000.0,
    rate: float = 100.0,
    error: Sequence[str | None] | None = None,
    status: np.ndarray | None = None,
    send_lag: float = 0.001,
    ttft: np.ndarray | None = None,
    fault_active: bool | np.ndarray = True,
    long_context: bool = False,
    fault_request: str | None = None,
) -> pa.Table:
    """One stage's records: request i is intended at start + i/rate and sent `send_lag` later."""
    n = len(latency)
    intended = start + np.arange(n) / rate
    errors = list(error) if error is not None else [None] * n
    lat = np.asarray(latency, dtype=np.float64)
    lat_arr = pa.array(lat, mask=np.isnan(lat))
    sent = intended + send_lag
    sent_mask = np.array([e in ("dropped",) for e in errors])
    if status is None:
        status = np.where(np.array([e is None for e in errors]), 200, 0)
    status_mask = np.array([e in ("timeout", "connect", "dropped", "cancelled") for e in errors])
    ttft_values = np.full(n, np.nan) if ttft is None else np.asarray(ttft, dtype=np.float64)
    active = np.full(n, fault_active) if isinstance(fault_active, bool) else fault_active
    columns = {
        "stage": pa.array(np.full(n, stage), pa.int16()),
        "shard": pa.array(np.zeros(n), pa.int16()),
        "request_id": pa.array([f"r{next(_IDS)}" for _ in range(n)]),
        "trace_id": pa.array([f"{next(_TRACES):032x}" for _ in range(n)]),
        "fault_active": pa.array(active),
        "intended": pa.array(intended),
        "sent": pa.array(sent, mask=sent_mask),
        "status": pa.array(np.asarray(status), pa.int16(), mask=status_mask),
        "error": pa.array(errors, pa.string()).dictionary_encode().cast(pa.dictionary(pa.int8(), pa.string())),
        "latency": lat_arr,
        "latency_intended": lat_arr,
        "ttft": pa.array(ttft_values, mask=np.isnan(ttft_values)),
        "itl_mean": pa.nulls(n, pa.float64()),
        "itl_p99": pa.nulls(n, pa.float64()),
        "itl_max": pa.nulls(n, pa.float64()),
        "tpot": pa.nulls(n, pa.float64()),
        "prompt_tokens": pa.nulls(n, pa.int32()),
        "output_tokens": pa.nulls(n, pa.int32()),
        "bytes_sent": pa.nulls(n, pa.int64()),
        "bytes_received": pa.nulls(n, pa.int64()),
        "long_context": pa.array(np.full(n, long_context)),
        "connect": pa.nulls(n, pa.float64()),
        "fault_request": pa.array([fault_request] * n, pa.string()).cast(pa.dictionary(pa.int16(), pa.string())),
        "ended": pa.array(sent + np.nan_to_num(lat), mask=sent_mask),
        "finish_reason": pa.nulls(n, pa.dictionary(pa.int8(), pa.string())),
        "model": pa.nulls(n, pa.dictionary(pa.int16(), pa.string())),
    }
    return pa.table(columns, schema=REQUEST_SCHEMA)


def concat(*tables: pa.Table) -> pa.Table:
    return pa.concat_tables(tables)
