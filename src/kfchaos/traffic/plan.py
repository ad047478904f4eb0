"""The replay plan of one stage: which requests, at which offsets, from which source; and its hash.

A plan is a recipe, not a list: `schedule()` streams `Planned` requests (intended offset from the stage
start, the request, its record id) from the source, so a ten-million-request file is never in memory.
Recorded timestamps are kept (relative to the first request), divided by the speed factor; a stage at
p % keeps the deterministic hash subset of kfchaos.traffic.sampling; the recording starts again when
the stage is longer than it (loop). Records slightly out of time order are re-sorted within a window
of REORDER_DEPTH records (as GoReplay's --input-file-read-depth); later stragglers are sent at their
turn and counted. `plan.hash` covers the settings and the source file's bytes: same hash, same requests.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from kfchaos.bounds import MAX_DURATION
from kfchaos.errors import KfchaosError
from kfchaos.faultspec.kinds import TRAFFIC_SIDE_TYPES
from kfchaos.spec import Experiment
from kfchaos.targetauth import credential_from_env
from kfchaos.traffic.formats import READERS
from kfchaos.traffic.formats.sharegpt import read_sharegpt
from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.sampling import select
from kfchaos.traffic.settings import GoodputSlo, ReplaySettings, TrafficFault
from kfchaos.traffic.source import SourceReport
from kfchaos.traffic.synthetic import synthetic_requests
from kfchaos.traffic.tagging import HeaderPolicy
from kfchaos.traffic.trafficfaults.table import generate
from kfchaos.traffic.workload import workload_for
from kfchaos.validate import load_experiment

REORDER_DEPTH = 1000


class Planned(NamedTuple):
    offset: float  # seconds after the stage start when it should be sent
    request: TrafficRequest
    record_id: str  # the request id, with `~k` appended on the k-th loop of the recording


def file_digest(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class ReplayPlan:
    settings: ReplaySettings
    report: SourceReport = field(init=False)
    _hash: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        source = self.settings.source
        if source is not None and not Path(source).is_file():
            raise KfchaosError(f"traffic file {source}: not found")
        self.report = SourceReport(source or "synthetic", self.settings.format if source else "synthetic")

    @property
    def hash(self) -> str:
        """sha256 of the settings and the source bytes; the audit record keeps it."""
        if self._hash is None:
            content = file_digest(self.settings.source) if self.settings.source else None
            described: dict[str, Any] = {"settings": self.settings.describe(), "source": content}
            fit_from = self.settings.synthetic.fit_from if self.settings.synthetic else None
            if fit_from:  # the recording a synthetic workload is fitted to: its bytes, as for a traffic file
                described["fit_source"] = file_digest(fit_from)
            text = json.dumps(described, sort_keys=True)
            self._hash = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
        return self._hash

    def _open(self, report: SourceReport) -> Iterator[TrafficRequest]:
        s = self.settings
        if s.synthetic is not None:
            if s.synthetic.realistic:
                return workload_for(s.synthetic, s.seed)
            return synthetic_requests(s.synthetic, s.seed)
        assert s.source is not None
        if s.format == "sharegpt":
            return read_sharegpt(s.source, report, rate=s.prompt_rate, seed=s.seed)
        return READERS[s.format](s.source, report)

    def _ordered(self, report: SourceReport) -> Iterator[TrafficRequest]:
        """Requests in timestamp order, within a bounded reorder window."""
        heap: list[tuple[float, int, TrafficRequest]] = []
        counter = itertools.count()
        last = float("-inf")
        for request in self._open(report):
            if len(heap) < REORDER_DEPTH:
                heapq.heappush(heap, (request.timestamp, next(counter), request))
                continue
            _, _, first = heapq.heappushpop(heap, (request.timestamp, next(counter), request))
            if first.timestamp < last:
                report.out_of_order += 1
                first = replace(first, timestamp=last)
            last = first.timestamp
            yield first
        while heap:
            yield heapq.heappop(heap)[2]

    def _recorded(self) -> Iterator[Planned]:
        s = self.settings
        fraction, scale = s.fraction, s.time_scale
        # Without a duration the recording plays once, but never longer than one stage may last: a timestamp
        # years after the first would otherwise keep the replay waiting for it.
        end = s.duration if s.duration is not None else MAX_DURATION
        everything = fraction >= 1.0 and s.shards == 1  # no hashing needed to keep every request
        t0: float | None = None
        span = 0.0
        for lap in itertools.count():
            report = self.report if lap == 0 else SourceReport(self.report.path, self.report.format)
            count = 0
            last = 0.0
            for request in self._ordered(report):
                if t0 is None:
                    t0 = request.timestamp
                count += 1
                last = request.timestamp - t0
                offset = (lap * span + last) / scale
                # `not offset < end`: a NaN offset (which the readers refuse) would end the stage, not loop it.
                if not offset < end:
                    return
                # A conversation's turns share one sampling key: a stage keeps whole conversations.
                key = request.id if request.turn is None else request.turn.conversation.key
                if everything or select(key, s.seed, fraction, s.shard, s.shards):
                    yield Planned(offset, request, request.id if lap == 0 else f"{request.id}~{lap}")
            if lap == 0:
                if count == 0 or s.synthetic is not None:
                    return
                # One mean gap after the last request, so the seam of the loop keeps the recorded rate. A
                # recording of one instant (all timestamps equal) loops once a second, never in zero time.
                span = last + (last / (count - 1) if count > 1 else 1.0)
                if not span > 0:
                    span = 1.0
            if not s.loop or s.duration is None:
                return

    def _fault_requests(self) -> Iterator[Planned]:
        """The traffic-side faults' requests, this shard's share: the k-th request of each fault goes to
        shard k mod n."""
        s = self.settings
        streams = []
        for fault in s.traffic_faults:
            mine = (
                Planned(offset, request, request.id)
                for index, (offset, request) in enumerate(generate(fault, s))
                if index % s.shards == s.shard
            )
            streams.append(mine)
        return heapq.merge(*streams, key=lambda p: p.offset)

    def schedule(self) -> Iterator[Planned]:
        """The stage's requests in intended-send order."""
        if not self.settings.traffic_faults:
            return self._recorded()
        return heapq.merge(self._recorded(), self._fault_requests(), key=lambda p: p.offset)


def _traffic_faults_for(experiment: Experiment, stage: int) -> tuple[TrafficFault, ...]:
    return tuple(
        TrafficFault(fault.name, fault.params)
        for fault in experiment.spec.faults
        if fault.type in TRAFFIC_SIDE_TYPES and stage in experiment.fault_stages(fault)
    )


def settings_from_experiment(
    experiment: Experiment, stage: int, base_dir: str | Path = ".", **overrides: Any
) -> ReplaySettings:
    """Replay settings for one stage of an experiment; keyword overrides win (e.g. shard, duration)."""
    spec = experiment.spec
    traffic, target = spec.traffic, spec.target
    if stage not in traffic.stages:
        raise KfchaosError(f"stage {stage} is not among spec.traffic.stages {traffic.stages}")
    credential = None
    if target.auth is not None:
        credential = credential_from_env(target.auth.env, target.auth.type, target.auth.header)
    policy = HeaderPolicy(
        add=tuple(traffic.headers.add.items()),
        strip=frozenset(h.lower() for h in traffic.headers.strip),
        allow_credentials=frozenset(traffic.headers.allow_credentials),
        credential=credential,
    )
    synthetic = traffic.synthetic
    if synthetic is not None and synthetic.fit_from:  # resolved against the experiment's folder, as traffic.file
        synthetic = synthetic.model_copy(update={"fit_from": str(Path(base_dir) / synthetic.fit_from)})
    values: dict[str, Any] = {
        "stage": stage,
        "source": str(Path(base_dir) / traffic.file) if traffic.file else None,
        "format": traffic.format,
        "synthetic": synthetic,
        "seed": traffic.seed,
        "speed": traffic.speed,
        "rate_scale": traffic.rate_scale,
        "loop": traffic.loop,
        "duration": traffic.stage_duration,
        "api": target.api,
        "model": target.model,
        "timeout": target.timeout,
        "concurrency_limit": traffic.concurrency_limit,
        "max_send_lag_p99": traffic.max_send_lag_p99,
        "headers": policy,
        "traffic_faults": _traffic_faults_for(experiment, stage),
        "goodput": GoodputSlo(spec.slo.ttft_p99_max, spec.slo.tpot_p99_max, spec.slo.p99_max),
    }
    values.update(overrides)
    return ReplaySettings(**values)


def plan_stage(
    experiment_or_settings: Experiment | ReplaySettings | str | Path,
    stage_percent: int | None = None,
    *,
    base_dir: str | Path | None = None,
    **overrides: Any,
) -> ReplayPlan:
    """The plan of one stage.

    Give an experiment file path (traffic paths resolve against its folder), an `Experiment` with
    `base_dir`, or ready `ReplaySettings`. Overrides: any ReplaySettings field, e.g. shard=1, shards=4,
    duration=60.0, seed=7.
    """
    if isinstance(experiment_or_settings, ReplaySettings):
        settings = replace(experiment_or_settings, **overrides)
        if stage_percent is not None:
            settings = replace(settings, stage=stage_percent)
        return ReplayPlan(settings)
    if isinstance(experiment_or_settings, str | Path):
        path = Path(experiment_or_settings)
        experiment = load_experiment(path)
        base_dir = path.parent if base_dir is None else base_dir
    else:
        experiment = experiment_or_settings
    if stage_percent is None:
        raise KfchaosError("plan_stage needs stage_percent with an experiment")
    return ReplayPlan(settings_from_experiment(experiment, stage_percent, base_dir or ".", **overrides))
