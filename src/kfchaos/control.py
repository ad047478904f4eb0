"""The control baseline: a fault-free replay of the experiment's own traffic at each of its stage rates, by
kfchaos's own client (kfchaos.traffic.api), measured exactly from the per-request records.

It is what the P99 drift is compared with (kfchaos.verdict.drift): the same client, the same traffic and
the same latency definition as the run, where the Prometheus histogram is a server-side figure,
interpolated inside buckets. The records are written beside the baseline and their sha256 kept in it, so a
reviewer can recompute every figure. The Prometheus figures stay in the file as production's band.
"""

from __future__ import annotations

import hashlib
import math
import urllib.parse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kfchaos import safefile
from kfchaos.baseline import Baseline, ControlBaseline, ControlStage, format_time
from kfchaos.errors import KfchaosError
from kfchaos.spec import Experiment
from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.verdict.requests import Requests, load_requests
from kfchaos.verdict.stats import empirical_quantile_rank, order_statistics, quantile_ranks

P99 = 0.99


def _quantile(values: np.ndarray, beyond: int, q: float) -> float | None:
    """The exact empirical quantile (inverted CDF: the order statistic of rank ceil(q n)); `beyond` values
    count as +inf (timeouts); None without values or where the quantile is a timeout (no finite figure)."""
    n = len(values) + beyond
    if n == 0:
        return None
    rank = empirical_quantile_rank(n, q)
    return order_statistics(values, (rank,))[0] if rank <= len(values) else None


def measure_stage(requests: Requests, stage: int, rate: float, confidence: float) -> ControlStage:
    """Exact figures of one stage's records, read with the verdict's own rules (kfchaos.verdict.requests)."""
    sent = requests.counted()  # the verdict's accounting: dropped and cancelled requests count
    ok = requests.succeeded() & np.isfinite(requests.latency)
    latency = np.sort(requests.latency[ok])
    timeouts = int(np.count_nonzero(requests.timed_out()))
    n = len(latency) + timeouts
    ranks = quantile_ranks(n, P99, confidence) if n else None
    interval = None
    if ranks is not None:
        bounds = [order_statistics(latency, (r,))[0] if r <= len(latency) else math.inf for r in ranks]
        interval = bounds if all(math.isfinite(b) for b in bounds) else None
    ttft = requests.ttft[ok & np.isfinite(requests.ttft)]
    p99 = _quantile(latency, timeouts, P99)
    return ControlStage(
        stage=stage,
        rate=rate,
        sent=int(np.count_nonzero(sent)),
        succeeded=int(np.count_nonzero(requests.succeeded())),
        errors=int(np.count_nonzero(requests.failed())),
        timeouts=timeouts,
        samples=n,
        latency_p50=_quantile(latency, timeouts, 0.5),
        latency_p99=p99,
        latency_p99_interval=interval,
        ttft_p99=_quantile(np.sort(ttft), timeouts, P99) if len(ttft) else None,
    )


def _public(url: str) -> str:
    """The endpoint without user:password (never written to a file)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_control(
    experiment: Experiment,
    target: str,
    records_out: Path,
    *,
    base_dir: str | Path,
    duration: float,
    stages: Sequence[int] | None = None,
) -> ControlBaseline:
    """Replay each stage rate for `duration` seconds without faults (no long-context bursts either: they
    are a fault) and measure it. Raises KfchaosError when a stage sent nothing: an empty control would
    compare with nothing."""
    if duration <= 0:
        raise KfchaosError(f"control duration must be positive, got {duration:g}s")
    percents = list(stages or experiment.spec.traffic.stages)
    tables: list[pa.Table] = []
    rates: dict[int, float] = {}
    for percent in percents:
        plan = plan_stage(experiment, percent, base_dir=base_dir, duration=duration, traffic_faults=())
        result = run_stage(plan, target, fault_active=False)
        tables.append(result.table)
        rates[percent] = result.table.num_rows / duration
    table = pa.concat_tables(tables, promote_options="default")
    safefile.replace_with(records_out, lambda handle: pq.write_table(table, handle))
    requests = load_requests(records_out)
    measured = []
    for percent in percents:
        subset = requests.where((requests.stage == percent) & ~requests.injected)
        if not len(subset.stage):
            raise KfchaosError(f"control replay at {percent}% produced no records; is {_public(target)} serving?")
        measured.append(measure_stage(subset, percent, rates[percent], experiment.spec.slo.confidence))
    return ControlBaseline(
        captured_at=format_time(datetime.now(UTC)),
        target=_public(target),
        stage_duration=duration,
        confidence=experiment.spec.slo.confidence,
        records=records_out.name,
        records_sha256=sha256_file(records_out),
        stages=measured,
    )


def attach(baseline: Baseline, control: ControlBaseline) -> Baseline:
    """The baseline with this control beside its production figures, sealed again."""
    return baseline.model_copy(update={"control": control, "content_hash": ""}).sealed()
