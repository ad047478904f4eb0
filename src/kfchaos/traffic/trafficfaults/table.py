"""The table of traffic-side fault generators the replay plan reads: fault type -> the generator of its requests.

An explicit table rather than registration on import, so which generator runs for a type is read here, and the
generators (bursts, chain: this package's modules) import nothing above them. Its keys are
exactly the traffic-side kinds of the table of fault kinds (kfchaos.faultspec.kinds), checked
at import: a type without a generator would plan a stage without its fault.
"""

from __future__ import annotations

from kfchaos.faultspec.kinds import TRAFFIC_SIDE_TYPES, check_covers
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
check_covers("kfchaos.traffic.trafficfaults.table GENERATORS", GENERATORS, TRAFFIC_SIDE_TYPES)


def generate(fault: TrafficFault, settings: ReplaySettings) -> FaultRequests:
    """The fault's requests in one stage, all shards together."""
    return GENERATORS[fault.type](fault, settings)
