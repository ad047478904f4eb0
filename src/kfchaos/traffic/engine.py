"""The open-loop replay engine: every request goes out at its intended time, whatever earlier responses do.

One coroutine walks the plan's schedule and writes each request when its time comes, from a plain
call (no task per request) onto an idle keep-alive connection, or a new one. Responses end in callbacks
that write a record. The send time is taken when the request is handed to the connection pool, before a
connection is opened for it, so the lag (sent - intended) is the replayer's own delay, and connection setup
(recorded per request as `connect`) is part of the latency, as it is for a client; latency is recorded from
both times, which makes coordinated omission visible instead of hiding it. When `concurrency_limit`
requests are in flight, a due request is dropped and recorded as `dropped`, never queued (queueing would
bend the schedule).

Timing: uvloop timers have 1 ms resolution, so the scheduler sleeps until ~1 ms before a request is due
and then yields to the event loop (handling I/O) until the due time. Time comes from the loop's
perf_counter clock (uvloop's loop.time() counts whole milliseconds), mapped once to epoch seconds for the records.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import math
import resource
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kfchaos.bounds import MAX_DURATION, MAX_REQUESTS
from kfchaos.errors import KfchaosError
from kfchaos.traffic.http1 import Exchange, Pool, Target, parse_target
from kfchaos.traffic.plan import Planned, ReplayPlan
from kfchaos.traffic.progress import Progress, Snapshot
from kfchaos.traffic.recorder import Recorder, Spool, write_parquet
from kfchaos.traffic.source import SourceReport, read_until
from kfchaos.traffic.sse import SseTimer, bounded_name, stream_error
from kfchaos.traffic.summary import StageSummary, summarize
from kfchaos.traffic.tagging import new_trace_id
from kfchaos.traffic.trafficfaults import client as clientfault
from kfchaos.traffic.wire import RequestBuilder

SPIN = 0.001  # wake this long before a request is due (timer resolution), then yield until it is
SWEEP = 0.05  # how often timeouts are checked
YIELD_EVERY = 32  # when behind schedule, still let responses in after this many sends
START_DELAY = 0.05  # the first request is due this long after the engine starts
# How far past its duration a stage may still be sending (or reading its source) before it stops: a request due
# just before the end and sent a little late is the send lag's business, not a cut.
OVERRUN_GRACE = 1.0
STOP_POLL = 0.1  # with a stop event, a long wait for the next request is cut in slices this long
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what stops a stage run with `signals`
STALL_TICK = 0.01  # the loop watcher's timer: how often it checks that the event loop runs on time
ITL_NUMPY = 4096  # more gaps than this in one stream are summarised with numpy (a list of floats costs 4x the memory)
STALL_MIN = 0.005  # a timer this much late or more is a stall (uvloop's timers have 1 ms resolution)


@dataclass
class StageResult:
    summary: StageSummary
    table: pa.Table
    report: SourceReport
    path: Path | None = None
    interrupted: int | None = None  # the signal (SIGINT, SIGTERM) that stopped the stage, when `signals` was on
    recorder: Recorder | None = field(default=None, repr=False)


def _itl(gaps: Sequence[float]) -> tuple[float, float, float]:
    if not gaps:
        return (math.nan, math.nan, math.nan)
    if len(gaps) > ITL_NUMPY:  # a long stream (up to millions of gaps): sorted in place, 8 bytes a gap
        values = np.array(gaps, dtype=np.float64)
        values.sort()
        p99 = float(values[max(0, math.ceil(0.99 * len(values)) - 1)])
        return (float(values.mean()), p99, float(values[-1]))
    ordered = sorted(gaps)
    p99 = ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]
    return (sum(gaps) / len(gaps), p99, ordered[-1])


class _Stage:
    def __init__(
        self,
        plan: ReplayPlan,
        target: Target,
        loop: asyncio.AbstractEventLoop,
        fault_active: bool | Callable[[float], bool],
    ) -> None:
        s = plan.settings
        self.plan = plan
        self.settings = s
        self.loop = loop
        self.spool: Spool | None = None  # records written as they are taken (an output file was given)
        self.clock = time.perf_counter  # uvloop's loop.time() has only millisecond resolution
        self.epoch = time.time() - time.perf_counter()  # clock -> epoch seconds
        self.fault_active = fault_active
        self.recorder = Recorder(s.stage, s.shard)
        self.pool = Pool(target, loop, self._done)
        self.builder = RequestBuilder(target.host_header, target.base_path, s.stage, s.api, s.model, s.headers)
        self.streaming = s.api != "http"
        self.pending: deque[tuple[float, Exchange]] = deque()
        self.in_flight = 0
        self.scheduled = 0
        self.sent = 0
        self.done = 0
        self.errors = 0
        self.dropped = 0
        self.recent: list[float] = []
        self.start = 0.0
        self.stopped = False
        self.capped = False  # the plan had more than MAX_REQUESTS requests: the rest were not sent
        self.overran = False  # the wall clock reached the stage's end (plus grace) with requests still planned
        # The loop watcher's stalls (its timer STALL_MIN or more late): the largest, their sum, their number.
        self.stall = {"max": 0.0, "total": 0.0, "count": 0.0}

    # ------------------------------------------------------------ sending

    def _dispatch(self, planned: Planned, due: float) -> None:
        self.scheduled += 1
        trace_id = new_trace_id()
        request = planned.request
        if self.in_flight >= self.settings.concurrency_limit:
            active = (
                self.fault_active(due + self.epoch) if callable(self.fault_active) else self.fault_active
            ) or request.fault is not None
            self.dropped += 1
            self.recorder.add(
                planned.record_id, trace_id, due + self.epoch, error="dropped",
                long_context=request.long_context, fault_active=active, fault_request=request.fault,
            )  # fmt: skip
            return
        exchange = Exchange(
            planned, trace_id, self.builder.build(request, trace_id), SseTimer() if self.streaming else None
        )
        self.in_flight += 1
        self.pending.append((self.clock() + self.settings.timeout, exchange))
        if request.client is None:
            self.pool.submit(exchange)
        else:  # a client-abort-storm request: it aborts or reads slowly
            clientfault.submit(self.pool, exchange, request.client)

    def _done(self, exchange: Exchange) -> None:
        self.in_flight -= 1
        self.done += 1
        planned: Planned = exchange.planned
        request = planned.request
        intended = self.start + planned.offset
        error = exchange.error
        status = exchange.status
        if error is None and status >= 500:
            error = "http"
        elif error is None and 300 <= status < 400:
            error = "redirect"  # not followed: a completed answer is a 2xx (docs/verdict.md)
        sse = exchange.sse
        if error is None and sse is not None and 200 <= status < 300:
            error = stream_error(sse)
        elif error is None and 200 <= status < 300 and not exchange.body_bytes and status != 204:
            # 204 No Content and a HEAD answer have no body by definition.
            error = "empty_body" if request.method != "HEAD" else None
        answered = sse.model if sse is not None else None
        if (
            error is None
            and answered is not None
            and answered != bounded_name(self.builder.requested_model(request) or "")
        ):
            error = "wrong_model"  # a fallback's answer is not the target's (docs/verdict.md, "Who answered")
        if error is not None:
            self.errors += 1
        sent = exchange.sent
        if sent:
            self.sent += 1
        latency = exchange.ended - sent if status >= 0 and error in (None, "http") else math.nan
        if latency == latency:
            self.recent.append(latency)
        ttft = tpot = math.nan
        itl = (math.nan, math.nan, math.nan)
        prompt_tokens = request.prompt_tokens if request.prompt_tokens is not None else -1
        output_tokens = -1
        if sse is not None and sse.first is not None and sse.last is not None:
            ttft = sse.first - sent
            itl = _itl(sse.gaps)
            out = sse.output_tokens
            if out is not None:
                output_tokens = out
                if out > 1:
                    tpot = (sse.last - sse.first) / (out - 1)
            if sse.prompt_tokens is not None:
                prompt_tokens = sse.prompt_tokens
        active = (
            self.fault_active(intended + self.epoch) if callable(self.fault_active) else self.fault_active
        ) or request.fault is not None
        # Positional: this runs once per request, and keyword passing costs measurably at 40k calls/s.
        self.recorder.add(
            planned.record_id, exchange.trace_id, intended + self.epoch, sent + self.epoch if sent else math.nan,
            status, error, latency, ttft, itl, tpot, prompt_tokens, output_tokens,
            exchange.bytes_sent if sent else -1, exchange.bytes_received, request.long_context, active,
            exchange.connect if sent else math.nan, request.fault, exchange.ended + self.epoch if sent else math.nan,
            sse.finish_reason if sse is not None else None, answered,
        )  # fmt: skip

    def _sweep(self) -> None:
        now = self.clock()
        pending = self.pending
        while pending:
            deadline, exchange = pending[0]
            if exchange.complete:
                pending.popleft()
            elif deadline <= now:
                pending.popleft()
                self.pool.expire(exchange, "timeout")
            else:
                break

    def cancel_all(self) -> None:
        while self.pending:
            _, exchange = self.pending.popleft()
            if not exchange.complete:
                self.pool.expire(exchange, "cancelled")

    # ------------------------------------------------------------ running

    async def run(
        self, stop: asyncio.Event | None, progress: Progress | None, warm: int, start_at: float | None = None
    ) -> None:
        if warm:
            await self.pool.warm(warm)
        sweeper = asyncio.ensure_future(self._every(SWEEP, self._sweep))
        watcher = asyncio.ensure_future(self._watch_loop())
        spool = self.spool
        spooler = (
            asyncio.ensure_future(self._every(spool.interval, lambda: spool.flush(self.recorder))) if spool else None
        )
        reporter = (
            asyncio.ensure_future(self._every(progress.interval, lambda: self._show(progress))) if progress else None
        )
        # The schedule's first request is made before the clock starts: a generator's set-up (a workload's
        # length fits import scipy, ~1 s) would otherwise land on the first requests as send lag.
        # Reading the source stops at the stage's end whatever it holds (kfchaos.traffic.source.read_until).
        reading = contextlib.ExitStack()
        reading.enter_context(read_until(time.monotonic() + START_DELAY + self._duration_bound()))
        schedule = self.plan.schedule()
        try:
            first = tuple(itertools.islice(schedule, 1))  # made now; empty when the plan is
        except BaseException:
            reading.close()
            raise
        planned_requests = itertools.chain(first, schedule)
        # Everything alive now (modules, the plan's settings) is moved out of the collector's view, so a
        # full collection during the stage scans only the stage's own objects: fewer multi-ms pauses.
        gc.collect()
        gc.freeze()
        self.start = self.clock() + START_DELAY  # after the collection, which can take tens of ms
        if start_at is not None:
            # One schedule for every shard of a stage (kfchaos.steps.shards): offsets count from this epoch
            # time. A shard that starts after it sends its first requests late, and that shows as send lag.
            self.start = start_at - self.epoch
        try:
            with reading:
                await self._send_all(stop, planned_requests)
            if not self.stopped:
                end = self.clock() + self.settings.timeout + 2 * SWEEP
                while self.in_flight and self.clock() < end and not (stop and stop.is_set()):
                    await asyncio.sleep(SWEEP)
        finally:
            gc.unfreeze()
            sweeper.cancel()
            watcher.cancel()
            if spooler:
                spooler.cancel()
            if reporter:
                reporter.cancel()
            self.cancel_all()
            self.pool.close()
            if progress:
                self._show(progress)
                progress.end()

    def _duration_bound(self) -> float:
        duration = self.settings.duration if self.settings.duration is not None else MAX_DURATION
        return duration + OVERRUN_GRACE

    async def _send_all(self, stop: asyncio.Event | None, planned_requests: Iterator[Planned]) -> None:
        clock, start = self.clock, self.start
        since_yield = 0
        sleep = asyncio.sleep
        # The plan ends at the duration; this is the engine's own bound on it, whatever a source yields: by
        # the schedule (offsets) and by the wall clock (a source or a sender that fell behind stops here too).
        end = self.settings.duration if self.settings.duration is not None else math.inf
        for planned in planned_requests:
            if not planned.offset < end:
                return
            if clock() - start >= end + OVERRUN_GRACE:
                self.overran = True
                return
            if self.scheduled >= MAX_REQUESTS:  # records are held in memory: their count is bounded too
                self.capped = True
                return
            due = start + planned.offset
            wait = due - clock()
            if wait > 0:
                if wait > 2 * SPIN:
                    if stop is None:
                        await sleep(wait - SPIN)
                    else:  # a stop (signal, abort) must not wait for a request due minutes from now
                        while (left := due - SPIN - clock()) > 0 and not stop.is_set():
                            await sleep(min(left, STOP_POLL))
                        if stop.is_set():
                            self.stopped = True
                            return
                while clock() < due:
                    await sleep(0)
                since_yield = 0
            elif since_yield >= YIELD_EVERY:
                await sleep(0)
                since_yield = 0
            if stop is not None and stop.is_set():
                self.stopped = True
                return
            self._dispatch(planned, due)
            since_yield += 1

    async def _every(self, interval: float, action: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(interval)
            action()

    async def _watch_loop(self) -> None:
        """Times the event loop itself. While it is late (the process starved of CPU, a long collection, another
        thread holding the GIL), no byte is read and no request sent, so every time the records take meanwhile is
        late by as much: the replayer's own stall, not the server's. The summary's `client_stall` says how much."""
        clock, stall = self.clock, self.stall
        while True:
            before = clock()
            await asyncio.sleep(STALL_TICK)
            late = clock() - before - STALL_TICK
            if late >= STALL_MIN:
                stall["max"] = max(stall["max"], late)
                stall["total"] += late
                stall["count"] += 1

    def _show(self, progress: Progress) -> None:
        recent, self.recent = self.recent, []
        p99 = sorted(recent)[max(0, math.ceil(0.99 * len(recent)) - 1)] if recent else None
        progress.show(
            Snapshot(
                stage=self.settings.stage,
                elapsed=max(0.0, self.clock() - self.start),
                duration=self.settings.duration,
                scheduled=self.scheduled,
                sent=self.sent,
                done=self.done,
                errors=self.errors,
                dropped=self.dropped,
                in_flight=self.in_flight,
                p99_recent=p99,
            )
        )


async def replay(
    plan: ReplayPlan,
    target: str,
    *,
    fault_active: bool | Callable[[float], bool] = False,
    stop: asyncio.Event | None = None,
    progress: Progress | None = None,
    warm_connections: int = 0,
    start_at: float | None = None,
    spool: Spool | None = None,
) -> StageResult:
    """Replay one stage against `target` (base URL) and return its records and summary.

    `fault_active`: whether a (cluster) fault is active, or a function of the epoch send time; burst
    requests are always marked. `stop`: set it to end the stage early (abort); requests in flight are
    recorded as cancelled. `start_at`: the epoch time the stage's offsets count from (a sharded stage's common
    start); default: as soon as the engine is ready.
    """
    loop = asyncio.get_running_loop()
    stage = _Stage(plan, parse_target(target), loop, fault_active)
    stage.spool = spool
    if spool is not None:
        # A part the disk refused cuts the stage: sending stops at once (called from the spool's writer thread).
        stopping = stop = stop if stop is not None else asyncio.Event()

        def on_cut() -> None:
            loop.call_soon_threadsafe(stopping.set)

        spool.on_cut = on_cut
    await stage.run(stop, progress, warm_connections, start_at)
    table = stage.recorder.table()
    s = plan.settings
    summary = summarize(
        table,
        stage=s.stage,
        duration=s.duration,
        max_send_lag_p99=s.max_send_lag_p99,
        goodput=s.goodput,
        streaming=stage.streaming,
    )
    summary.plan_hash = plan.hash
    summary.source = plan.report.to_dict()
    summary.client_stall = dict(stage.stall)
    cut = spool.cut if spool is not None else None
    if cut is not None:
        summary.valid = False
        summary.invalid_reason = (
            f"cut by the disk: {cut}; the replay stopped sending then, and the records it took are kept"
        )
        summary.notes.append(f"cut by the disk: {cut}")
    elif stage.stopped:
        summary.notes.append("stopped early (abort)")
    if stage.capped:
        summary.valid = False
        summary.invalid_reason = f"the plan has more than {MAX_REQUESTS} requests; only that many were sent"
    if stage.overran or plan.report.out_of_time:
        summary.valid = False
        summary.invalid_reason = (
            f"the stage reached its duration ({s.duration:g}s) with requests still planned: the source was "
            "read too slowly (or the sender fell behind); what was sent until then is recorded"
            if s.duration is not None
            else "the stage reached its longest duration with requests still planned"
        )
    return StageResult(summary, table, plan.report, recorder=stage.recorder)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed (it is a dependency); the standard loop otherwise."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def raise_open_file_limit(needed: int) -> None:
    """Each in-flight request holds a socket; containers often start with a soft limit of 1024 files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = needed + 256  # headroom for the traffic file, Parquet output and the interpreter's own files
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def run_stage(
    plan: ReplayPlan, target: str, out: str | Path | None = None, *, signals: bool = False, **options: object
) -> StageResult:
    """Synchronous `replay` on a fresh uvloop; writes the records to `out` (Parquet) when given.

    `signals` (the `kfchaos replay` command, a pipeline step under a kfchaos.termination.Guard): SIGINT and SIGTERM
    stop the stage as an abort does, the records taken until then are returned and written, marked as cut by the
    signal (kfchaos.records.END_KEY: a verdict on them is INCONCLUSIVE), and `result.interrupted` names the signal.
    A Python handler installed before (the step's guard, which starts removing the faults at once) is called too,
    and is back in place afterwards. Off by default: without it the process dies on SIGTERM as it would anyway.
    """
    raise_open_file_limit(plan.settings.concurrency_limit)
    spool = Spool(out) if out is not None else None
    if spool is not None:
        options["spool"] = spool
    loop = new_event_loop()
    caught: list[int] = []
    previous: dict[int, Any] = {int(signum): signal.getsignal(signum) for signum in STOP_SIGNALS} if signals else {}
    if signals:
        stop = options.get("stop")
        if not isinstance(stop, asyncio.Event):
            stop = options["stop"] = asyncio.Event()
        for signum in STOP_SIGNALS:

            def handler(signum: int = signum, stop: asyncio.Event = stop) -> None:
                caught.append(signum)
                stop.set()
                chained = previous.get(signum)
                if callable(chained) and chained is not signal.default_int_handler:
                    chained(signum, None)

            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):  # not the main thread
                loop.add_signal_handler(signum, handler)
    try:
        result = loop.run_until_complete(replay(plan, target, **options))  # type: ignore[arg-type]
    except BaseException:
        if spool is not None:
            spool.close()  # the parts written so far stay: what was measured before the failure
        raise
    finally:
        if signals:
            for signum in STOP_SIGNALS:
                with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                    loop.remove_signal_handler(signum)  # leaves SIG_DFL (uvloop, asyncio alike)
        loop.close()
        for number, before in previous.items():  # the handler before goes back
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(number, before)
    if caught:
        result.interrupted = caught[0]
        result.summary.notes.append(f"stopped by {signal.Signals(caught[0]).name}")
    if spool is not None:
        _keep_records(result, spool, out)  # type: ignore[arg-type]
    return result


def _keep_records(result: StageResult, spool: Spool, out: str | Path) -> None:
    """The stage's records as one file; when the disk refuses it (or cut the stage), as the spool's parts, the last
    one saying how the replay ended (kfchaos.records.END_KEY): `<out>` is then a folder of Parquet files."""
    why = None
    if result.interrupted is not None and spool.cut is None:
        # One whole file still, marked as this spool's last part and cut by the signal: the stage is not whole.
        stopped = f"stopped by {signal.Signals(result.interrupted).name}"
        result.table = spool.mark_end(result.table, stopped)
        result.summary.notes.append(f"records marked as cut: {stopped}")
    if spool.cut is None:
        try:
            result.path = write_parquet(result.table, out)
        except OSError as exc:
            why = f"the records file could not be written whole ({exc.strerror or exc})"
        else:
            spool.discard()
            return
    assert result.recorder is not None
    try:
        result.path = spool.finish(result.recorder)
    except OSError as exc:
        raise KfchaosError(
            f"{out}: the disk refused even the records' last part ({exc.strerror or exc}); {spool.kept} rows are "
            f"kept in {spool.folder}/, and none of them says how the replay ended"
        ) from None
    kept = f"records kept as {spool.parts} part(s) in {result.path}/"
    result.summary.notes.append(f"{why}: {kept}" if why else kept)
    if spool.lost:
        result.summary.notes.append(f"{spool.lost} row(s) could not be written even to the last part")
