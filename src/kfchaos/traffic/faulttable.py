"""The table of traffic-side fault generators the replay plan reads: fault type -> the generator of its requests.

An explicit table rather than registration on import, so which generator runs for a type is read here, and the
generators (kfchaos.traffic.faultload, kfchaos.traffic.faults_chain) import nothing above them. Its keys are
exactly the traffic-side types of the experiment format (kfchaos.faultspec.params.TRAFFIC_SIDE_TYPES), checked
at import: a type without a generator would plan a stage without its fault.
"""

from __future__ import annotations

from kfchaos.faultspec.params import TRAFFIC_SIDE_TYPES
from kfchaos.traffic import faults_chain
from kfchaos.traffic.faultload import (
    FaultRequests,
    Generator,
    client_abort_storm,
    long_context_burst,
    lora_adapter_churn,
)
from kfchaos.traffic.settings import ReplaySettings, TrafficFault

GENERATORS: dict[str, Generator] = {
    "long-context-burst": long_context_burst,
    "lora-adapter-churn": lora_adapter_churn,
    "client-abort-storm": client_abort_storm,
    "tokenizer-stress": faults_chain.tokenizer_stress,
    "batch-shock": faults_chain.batch_shock,
    "prefix-cache-thrash": faults_chain.prefix_cache_thrash,
}
if set(GENERATORS) != TRAFFIC_SIDE_TYPES:
    raise AssertionError(f"traffic-side fault types without a generator: {TRAFFIC_SIDE_TYPES ^ set(GENERATORS)}")


def generate(fault: TrafficFault, settings: ReplaySettings) -> FaultRequests:
    """The fault's requests in one stage, all shards together."""
    return GENERATORS[fault.type](fault, settings)
