"""The fault kinds kfchaos knows: one row each, and every other table of fault types derived from or checked
against this one.

A row says what a kind is: its name in the experiment format, its parameter model (kfchaos.faultspec.params),
which side performs it (a Chaos Mesh object, a Pod kfchaos makes itself, or the replayer's own requests), the
Chaos Mesh kind and `spec.action` it becomes, whether it acts once (no recovery: AllInjected is its end state),
whether its params may be left out, and how the verdict judges that it was delivered.

Derived here: the params table the experiment format builds its union from, the optional-params set and the
traffic-side set. Derived elsewhere: the Chaos Mesh catalog (kfchaos.faults.catalog) and the verdict's delivery
sets (kfchaos.verdict.delivery). Checked at import against these rows: the renderer's spec builders
(kfchaos.faults.render), the traffic faults' generators (kfchaos.traffic.trafficfaults.table) and the demo's
local and proxy kinds (kfchaos.demo). A new kind is its row here, its parameter model and one builder or
generator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from kfchaos.faultspec import params as p
from kfchaos.types import StrictModel

Side = Literal["chaos-mesh", "pod", "traffic"]
# How the verdict's fault_requests check judges a traffic-side kind (kfchaos.verdict.delivery): "requests": some of
# its requests must reach the server; "load": and some must be served (a 2xx), or it put no load on it; "none": its
# requests are not judged there (lora-adapter-churn's loads and unloads are judged by the churn's own line).
Delivery = Literal["none", "requests", "load"]


@dataclass(frozen=True)
class FaultKind:
    name: str
    params: type[StrictModel]
    side: Side
    chaos_kind: str | None = None  # the Chaos Mesh kind ("Pod" for a Pod kfchaos makes); None on the traffic side
    action: str | None = None  # Chaos Mesh's spec.action, where the kind has one
    one_shot: bool = False  # acts once and never recovers (pod-kill, container-kill)
    params_optional: bool = False  # `params` may be left out of the experiment file
    delivery: Delivery = "none"


def _chaos(
    name: str,
    params: type[StrictModel],
    kind: str,
    action: str | None = None,
    *,
    one_shot: bool = False,
    params_optional: bool = False,
) -> FaultKind:
    return FaultKind(name, params, "chaos-mesh", kind, action, one_shot=one_shot, params_optional=params_optional)


def _traffic(name: str, params: type[StrictModel], delivery: Delivery) -> FaultKind:
    return FaultKind(name, params, "traffic", delivery=delivery)


KINDS: tuple[FaultKind, ...] = (
    _chaos("pod-kill", p.PodKillParams, "PodChaos", "pod-kill", one_shot=True, params_optional=True),
    _chaos("pod-failure", p.NoParams, "PodChaos", "pod-failure", params_optional=True),
    _chaos("container-kill", p.NoParams, "PodChaos", "container-kill", one_shot=True, params_optional=True),
    _chaos("network-delay", p.NetworkDelayParams, "NetworkChaos", "delay"),
    _chaos("network-loss", p.NetworkLossParams, "NetworkChaos", "loss"),
    _chaos("network-duplicate", p.NetworkDuplicateParams, "NetworkChaos", "duplicate"),
    _chaos("network-corrupt", p.NetworkCorruptParams, "NetworkChaos", "corrupt"),
    _chaos("network-bandwidth", p.NetworkBandwidthParams, "NetworkChaos", "bandwidth"),
    _chaos("network-partition", p.NetworkPartitionParams, "NetworkChaos", "partition"),
    _chaos("stress-memory", p.StressMemoryParams, "StressChaos"),
    _chaos("stress-cpu", p.StressCpuParams, "StressChaos", params_optional=True),
    _chaos("http-abort", p.HttpAbortParams, "HTTPChaos"),
    _chaos("http-delay", p.HttpDelayParams, "HTTPChaos"),
    _chaos("http-replace", p.HttpReplaceParams, "HTTPChaos"),
    _chaos("io-latency", p.IoLatencyParams, "IOChaos", "latency"),
    _chaos("io-fault", p.IoFaultParams, "IOChaos", "fault"),
    _chaos("io-attr-override", p.IoAttrOverrideParams, "IOChaos", "attrOverride"),
    _chaos("io-mistake", p.IoMistakeParams, "IOChaos", "mistake"),
    _chaos("time-offset", p.TimeOffsetParams, "TimeChaos"),
    _chaos("dns-error", p.DnsParams, "DNSChaos", "error"),
    _chaos("dns-random", p.DnsParams, "DNSChaos", "random"),
    # Chaos Mesh has no GPU fault; kfchaos renders a short-lived allocator Pod instead (kfchaos.faults.gpu).
    FaultKind("gpu-memory-pressure", p.GpuMemoryPressureParams, "pod", "Pod"),
    _traffic("long-context-burst", p.LongContextBurstParams, "load"),
    _traffic("lora-adapter-churn", p.LoraAdapterChurnParams, "none"),
    _traffic("client-abort-storm", p.ClientAbortStormParams, "requests"),
    _traffic("tokenizer-stress", p.TokenizerStressParams, "requests"),
    _traffic("batch-shock", p.BatchShockParams, "load"),
    _traffic("prefix-cache-thrash", p.PrefixCacheThrashParams, "load"),
)

BY_NAME: dict[str, FaultKind] = {kind.name: kind for kind in KINDS}
PARAMS_BY_TYPE: dict[str, type[StrictModel]] = {kind.name: kind.params for kind in KINDS}
PARAMS_OPTIONAL = frozenset(kind.name for kind in KINDS if kind.params_optional)
TRAFFIC_SIDE_TYPES = frozenset(kind.name for kind in KINDS if kind.side == "traffic")
CLUSTER_SIDE_TYPES = frozenset(kind.name for kind in KINDS if kind.side != "traffic")

if len(BY_NAME) != len(KINDS):  # pragma: no cover - a programming error, caught at import
    raise AssertionError("two fault kinds share a name")


def check_covers(table: str, names: Iterable[str], expected: Iterable[str]) -> None:
    """At import of a table keyed by kind name: it holds exactly the `expected` kinds (a programming error
    otherwise, raised at once rather than met in a run)."""
    have, want = set(names), set(expected)
    if have != want:
        raise AssertionError(
            f"{table}: missing {sorted(want - have)}, unknown {sorted(have - want)} (kfchaos.faultspec.kinds)"
        )


def check_known(table: str, names: Iterable[str]) -> None:
    """At import of a table naming some kinds: every name is a kind."""
    unknown = set(names) - set(BY_NAME)
    if unknown:
        raise AssertionError(f"{table}: not fault kinds: {sorted(unknown)} (kfchaos.faultspec.kinds)")
