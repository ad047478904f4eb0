"""The table of traffic-side fault generators the replay plan reads: fault type -> the generator of its requests.

An explicit table rather than registration on import, so which generator runs for a type is read here, and the
generators (bursts, chain: this package's modules) import nothing above them. Its keys are
exactly the traffic-side types of the experiment format (kfchaos.faultspec.params.TRAFFIC_SIDE_TYPES), checked
at import: a type without a generator would plan a stage without its fault.
"""

from __future__ import annotations

from kfchaos.faultspec.params import TRAFFIC_SIDE_TYPES
from kfchaos.traffic.settings import ReplaySettings, TrafficFault
from kfchaos.traffic.trafficfaults import chain
from kfchaos.traffic.trafficfaults.base import FaultRequests, Generator
from kfchaos.traffic.trafficfaults.bursts import (
    client_abort_storm,
    long_context_burst,
    lora_adapter_churn,
)

GENERATORS: dict[str, Generator] = {
    "long-context-burst": long_context_burst,
    "lora-adapter-churn": lora_adapter_churn,
    "client-abort-storm": client_abort_storm,
    "tokenizer-stress": chain.tokenizer_stress,
    "batch-shock": chain.batch_shock,
    "prefix-cache-thrash": chain.prefix_cache_thrash,
}
if set(GENERATORS) != TRAFFIC_SIDE_TYPES:
    raise AssertionError(f"traffic-side fault types without a generator: {TRAFFIC_SIDE_TYPES ^ set(GENERATORS)}")


def generate(fault: TrafficFault, settings: ReplaySettings) -> FaultRequests:
    """The fault's requests in one stage, all shards together."""
    return GENERATORS[fault.type](fault, settings)
