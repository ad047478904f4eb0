"""Traffic-side faults: the requests a fault adds to a stage's traffic, performed by the replayer itself.

Chaos Mesh has no fault for what an LLM server meets from its clients (long-context bursts, prompts that are
costly to tokenize, a step of concurrency, clients that abort in bulk, ...). Such a fault is a generator of
extra requests for the stages it is active in, registered here by its params model; the replay plan merges
them into the stage's schedule.

Every request a fault generates carries `TrafficRequest.fault` (the fault's name). The records keep it in the
`fault_request` column, and everything that judges the *traffic* (the verdict's checks, the stage gate, the
control baseline) leaves those requests out: they are the fault, not the service's users. A generator yields
`(offset, request)` in non-decreasing offset order; the plan splits the fault's requests over shards by their
index in that order (request k goes to shard k mod n), so the shards together send each request once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kfchaos.faults.params import LongContextBurstParams
from kfchaos.traffic.request import TrafficRequest
from kfchaos.types import StrictModel

if TYPE_CHECKING:  # the plan imports this module
    from kfchaos.traffic.plan import ReplaySettings


@dataclass(frozen=True)
class TrafficFault:
    """A traffic-side fault as the replayer performs it: the experiment's fault name and its params."""

    name: str
    params: StrictModel

    @property
    def type(self) -> str:
        return fault_type(type(self.params))


FaultRequests = Iterator[tuple[float, TrafficRequest]]
Generator = Callable[[TrafficFault, "ReplaySettings"], FaultRequests]

# Fault type -> (params model, generator). One entry per traffic-side fault type.
GENERATORS: dict[str, tuple[type[StrictModel], Generator]] = {}


def register(fault_type: str, params: type[StrictModel]) -> Callable[[Generator], Generator]:
    def add(generator: Generator) -> Generator:
        GENERATORS[fault_type] = (params, generator)
        return generator

    return add


def fault_type(params: type[StrictModel]) -> str:
    for name, (model, _) in GENERATORS.items():
        if model is params:
            return name
    raise KeyError(f"no traffic-side fault generator for {params.__name__}")


def generate(fault: TrafficFault, settings: ReplaySettings) -> FaultRequests:
    """The fault's requests in one stage, all shards together."""
    return GENERATORS[fault.type][1](fault, settings)


def api_path(settings: ReplaySettings) -> str:
    from kfchaos.traffic.plan import API_PATHS

    return API_PATHS.get(settings.api, "/")


def repeat_starts(start: float, every: float | None, duration: float | None) -> list[float]:
    """Offsets of a fault that starts at `start` into the stage and repeats `every` seconds until it ends."""
    if duration is not None and start >= duration:
        return []
    if not every or duration is None:
        return [start]
    return [start + k * every for k in range(int((duration - start) // every) + 1) if start + k * every < duration]


@register("long-context-burst", LongContextBurstParams)
def long_context_burst(fault: TrafficFault, settings: ReplaySettings) -> FaultRequests:
    """k concurrent requests with m-token contexts sharing one document (wire.py builds the prompt)."""
    p = fault.params
    assert isinstance(p, LongContextBurstParams)
    path = api_path(settings)
    for k, start in enumerate(repeat_starts(p.start, p.every, settings.duration)):
        for j in range(p.requests):
            yield (
                start,
                TrafficRequest(
                    id=f"burst-{fault.name}-{k}-{j}",
                    timestamp=start,
                    method="POST",
                    path=path,
                    prompt_tokens=p.context_tokens,
                    max_tokens=p.max_tokens,
                    long_context=True,
                    fault=fault.name,
                ),
            )


# The serving-chain faults register themselves on import (they use register, api_path and repeat_starts above).
from kfchaos.traffic import faults_chain  # noqa: E402,F401
