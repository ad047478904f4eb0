"""What a stage's replay is asked to do, shared by the plan and the traffic-side faults' generators: the replay's
settings (`ReplaySettings`, with the plan hash's description of them) and a traffic-side fault as the replayer
performs it (`TrafficFault`). Its own module, below both: the plan reads the generators
(kfchaos.traffic.trafficfaults.table) and the generators read the settings.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kfchaos.bounds import MAX_CONCURRENCY, MAX_DURATION, MAX_FACTOR, MAX_TIMEOUT
from kfchaos.errors import KfchaosError
from kfchaos.faultspec.kinds import PARAMS_BY_TYPE, TRAFFIC_SIDE_TYPES
from kfchaos.spec import Synthetic
from kfchaos.traffic.formats import FORMATS
from kfchaos.traffic.tagging import HeaderPolicy
from kfchaos.types import StrictModel

APIS = ("http", "openai-completions", "openai-chat")


@dataclass(frozen=True)
class TrafficFault:
    """A traffic-side fault as the replayer performs it: the experiment's fault name and its params."""

    name: str
    params: StrictModel

    @property
    def type(self) -> str:
        return fault_type(type(self.params))


def fault_type(params: type[StrictModel]) -> str:
    """The traffic-side fault type of a params model (kfchaos.faultspec.params.PARAMS_BY_TYPE)."""
    for name in sorted(TRAFFIC_SIDE_TYPES):
        if PARAMS_BY_TYPE.get(name) is params:
            return name
    raise KeyError(f"no traffic-side fault generator for {params.__name__}")


@dataclass(frozen=True)
class GoodputSlo:
    """Per-request limits a request must all meet to count as good (DistServe / vLLM `--goodput`)."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None


NO_GOODPUT_SLO = GoodputSlo()
NO_HEADER_CHANGES = HeaderPolicy()


@dataclass(frozen=True)
class ReplaySettings:
    stage: int  # percent of the recorded rate, 1..100
    source: str | None = None  # traffic file; None with `synthetic`
    format: str = "jsonl"
    synthetic: Synthetic | None = None
    seed: int = 0
    speed: float = 1.0
    rate_scale: float = 1.0
    loop: bool = True
    duration: float | None = None  # None: the recording once
    shard: int = 0
    shards: int = 1
    api: str = "http"
    model: str | None = None
    timeout: float = 30.0
    concurrency_limit: int = 10_000
    max_send_lag_p99: float = 0.050
    headers: HeaderPolicy = NO_HEADER_CHANGES
    traffic_faults: tuple[TrafficFault, ...] = ()  # faults the replayer performs (kfchaos.traffic.trafficfaults)
    prompt_rate: float = 1.0  # arrivals per second for prompt sets (format sharegpt) at 100 %
    goodput: GoodputSlo = NO_GOODPUT_SLO

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.stage <= 100:
            problems.append(f"stage {self.stage} must be a percentage from 1 to 100")
        if (self.source is None) == (self.synthetic is None):
            problems.append("give exactly one traffic source: a file or synthetic settings")
        if self.source is not None and self.format not in FORMATS:
            problems.append(f"format {self.format!r} is not one of {', '.join(FORMATS)}")
        if not 0 <= self.shard < self.shards:
            problems.append(f"shard {self.shard}/{self.shards}: the index must be below the count")
        if self.api not in APIS:
            problems.append(f"api {self.api!r} is not one of {', '.join(APIS)}")
        if self.api != "http" and not self.model:
            problems.append(f"api {self.api} needs a model name")
        # `not 0 < x <= max` also refuses NaN (every comparison with NaN is false) and infinity.
        for name in ("speed", "rate_scale", "prompt_rate"):
            if not 0 < getattr(self, name) <= MAX_FACTOR:
                problems.append(f"{name} must be a number above 0 and at most {MAX_FACTOR:g}")
        if self.synthetic is not None and self.duration is None:
            problems.append("synthetic traffic needs a duration (it never ends by itself)")
        if self.duration is not None and not 0 < self.duration <= MAX_DURATION:
            problems.append(f"duration must be above zero and at most {MAX_DURATION:g} s")
        if not 0 < self.timeout <= MAX_TIMEOUT:
            problems.append(f"timeout must be above zero and at most {MAX_TIMEOUT:g} s")
        if not 1 <= self.concurrency_limit <= MAX_CONCURRENCY:
            problems.append(f"concurrency_limit must be from 1 to {MAX_CONCURRENCY}")
        if not 0 <= self.max_send_lag_p99 < math.inf:
            problems.append("max_send_lag_p99 must be a finite duration")
        if problems:
            raise KfchaosError("replay settings: " + "; ".join(problems))

    @property
    def fraction(self) -> float:
        """Share of the source's requests kept: stage x rate_scale, capped at all of them."""
        return min(1.0, self.stage / 100.0 * self.rate_scale)

    @property
    def time_scale(self) -> float:
        """Recorded seconds per replayed second. A rate above 100 % of the recording compresses time."""
        return self.speed * max(1.0, self.stage / 100.0 * self.rate_scale)

    def describe(self) -> dict[str, Any]:
        """Everything that decides which requests go out when; the input of the plan hash (no credential)."""
        data = asdict(self)
        # The file's bytes are hashed, not its path: the same recording planned on a laptop and in a pipeline
        # pod (different paths) is the same plan.
        data["source"] = Path(self.source).name if self.source else None
        data["headers"] = {
            "add": [list(h) for h in self.headers.add],
            "strip": sorted(self.headers.strip),
            # False when none is kept: the plan hash of every experiment that keeps none stays what it was.
            "allow_credentials": sorted(self.headers.allow_credentials) or False,
            "credential_header": self.headers.credential[0] if self.headers.credential else None,
        }
        data["synthetic"] = _synthetic_description(self.synthetic) if self.synthetic else None
        data["traffic_faults"] = [
            {"name": f.name, "type": f.type, **f.params.model_dump()} for f in self.traffic_faults
        ]
        return data


# Synthetic settings added with the workload generator: left out of the plan hash while unused, so the plans of
# experiments written before them keep their hash (an audit record's rerun compares it).
_ADDED_FIELDS = ("fit_from", "fit_format", "fit_lengths", "conversations", "system_prompts", "tenants", "tenant_header")


def _synthetic_description(synthetic: Synthetic) -> dict[str, Any]:
    data = synthetic.model_dump()
    for name in _ADDED_FIELDS:
        if getattr(synthetic, name) == Synthetic.model_fields[name].get_default(call_default_factory=True):
            del data[name]
    for name in ("prompt_tokens", "output_tokens"):
        if not data[name]["quantiles"]:
            del data[name]["quantiles"]
    if synthetic.fit_from:  # the file's bytes are hashed (ReplayPlan.hash), not where it lies
        data["fit_from"] = Path(synthetic.fit_from).name
    return data
