"""Which Chaos Mesh object each catalog fault type becomes: kind, REST plural and `spec.action`.

One table so the renderer, the backend (which needs plurals for REST paths) and the documentation agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from kfchaos.faultspec.params import PARAMS_BY_TYPE, TRAFFIC_SIDE_TYPES

GROUP = "chaos-mesh.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


@dataclass(frozen=True)
class CatalogEntry:
    kind: str
    plural: str
    action: str | None
    # One-shot faults (pod-kill, container-kill) never recover: AllInjected is their end state.
    one_shot: bool = False


# Plurals as the CRDs name them (all namespaced); see kfchaos/data/chaos-mesh/crds/.
PLURALS: dict[str, str] = {
    "PodChaos": "podchaos",
    "NetworkChaos": "networkchaos",
    "StressChaos": "stresschaos",
    "HTTPChaos": "httpchaos",
    "IOChaos": "iochaos",
    "TimeChaos": "timechaos",
    "DNSChaos": "dnschaos",
}

CATALOG: dict[str, CatalogEntry] = {
    "pod-kill": CatalogEntry("PodChaos", "podchaos", "pod-kill", one_shot=True),
    "pod-failure": CatalogEntry("PodChaos", "podchaos", "pod-failure"),
    "container-kill": CatalogEntry("PodChaos", "podchaos", "container-kill", one_shot=True),
    "network-delay": CatalogEntry("NetworkChaos", "networkchaos", "delay"),
    "network-loss": CatalogEntry("NetworkChaos", "networkchaos", "loss"),
    "network-duplicate": CatalogEntry("NetworkChaos", "networkchaos", "duplicate"),
    "network-corrupt": CatalogEntry("NetworkChaos", "networkchaos", "corrupt"),
    "network-bandwidth": CatalogEntry("NetworkChaos", "networkchaos", "bandwidth"),
    "network-partition": CatalogEntry("NetworkChaos", "networkchaos", "partition"),
    "stress-memory": CatalogEntry("StressChaos", "stresschaos", None),
    "stress-cpu": CatalogEntry("StressChaos", "stresschaos", None),
    "http-abort": CatalogEntry("HTTPChaos", "httpchaos", None),
    "http-delay": CatalogEntry("HTTPChaos", "httpchaos", None),
    "http-replace": CatalogEntry("HTTPChaos", "httpchaos", None),
    "io-latency": CatalogEntry("IOChaos", "iochaos", "latency"),
    "io-fault": CatalogEntry("IOChaos", "iochaos", "fault"),
    "io-attr-override": CatalogEntry("IOChaos", "iochaos", "attrOverride"),
    "time-offset": CatalogEntry("TimeChaos", "timechaos", None),
    "dns-error": CatalogEntry("DNSChaos", "dnschaos", "error"),
    "dns-random": CatalogEntry("DNSChaos", "dnschaos", "random"),
    # Chaos Mesh has no GPU fault; kfchaos renders a short-lived allocator Pod instead (faults/gpu.py).
    "gpu-memory-pressure": CatalogEntry("Pod", "pods", None),
}

_missing = set(PARAMS_BY_TYPE) - set(CATALOG) - TRAFFIC_SIDE_TYPES
if _missing:  # pragma: no cover - a new params model without a catalog entry is a programming error
    raise RuntimeError(f"fault types without a catalog entry: {sorted(_missing)}")
