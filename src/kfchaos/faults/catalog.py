"""Which Chaos Mesh object each catalog fault type becomes: kind, REST plural and `spec.action`.

Derived from the table of fault kinds (kfchaos.faultspec.kinds), with the plurals the REST paths need, so the
renderer, the backend and the documentation agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from kfchaos.faultspec.kinds import CLUSTER_SIDE_TYPES, KINDS, check_covers

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

# Derived from the table of fault kinds: every kind a cluster object (a Chaos Mesh object, or the Pod kfchaos makes for
# gpu-memory-pressure: kfchaos.faults.gpu) becomes. A Chaos Mesh kind without a plural above fails here, at import.
CATALOG: dict[str, CatalogEntry] = {
    kind.name: CatalogEntry(
        kind.chaos_kind, "pods" if kind.side == "pod" else PLURALS[kind.chaos_kind], kind.action, kind.one_shot
    )
    for kind in KINDS
    if kind.chaos_kind is not None
}
check_covers("kfchaos.faults.catalog CATALOG", CATALOG, CLUSTER_SIDE_TYPES)
