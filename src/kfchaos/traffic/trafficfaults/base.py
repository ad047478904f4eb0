"""What every traffic-side fault generator shares: the type of a generator and of what it yields, the API path
its requests go to, and the start offsets of a repeating fault."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kfchaos.traffic.request import API_PATHS, TrafficRequest
from kfchaos.traffic.settings import ReplaySettings, TrafficFault

FaultRequests = Iterator[tuple[float, TrafficRequest]]
Generator = Callable[[TrafficFault, ReplaySettings], FaultRequests]


def api_path(settings: ReplaySettings) -> str:
    return API_PATHS.get(settings.api, "/")


def repeat_starts(start: float, every: float | None, duration: float | None) -> list[float]:
    """Offsets of a fault that starts at `start` into the stage and repeats `every` seconds until it ends."""
    if duration is not None and start >= duration:
        return []
    if not every or duration is None:
        return [start]
    return [start + k * every for k in range(int((duration - start) // every) + 1) if start + k * every < duration]
