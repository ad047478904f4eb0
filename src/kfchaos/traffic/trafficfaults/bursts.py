"""The generators of the faults that add load from outside the serving chain: long-context bursts, LoRA adapter
churn's requests, client-abort storms (kfchaos.traffic.trafficfaults, the package's docstring, says how a
generator's requests are merged and marked)."""

from __future__ import annotations

from kfchaos.errors import KfchaosError
from kfchaos.faultspec.params import (
    ClientAbortStormParams,
    LongContextBurstParams,
    LoraAdapterChurnParams,
)
from kfchaos.traffic.request import ClientBehaviour, TrafficRequest
from kfchaos.traffic.settings import ReplaySettings, TrafficFault
from kfchaos.traffic.trafficfaults.base import FaultRequests, api_path, repeat_starts


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
                    ignore_eos=p.ignore_eos,
                    long_context=True,
                    fault=fault.name,
                ),
            )


DEFAULT_LORA_SHARE = 0.1


def lora_adapter_churn(fault: TrafficFault, settings: ReplaySettings) -> FaultRequests:
    """Requests naming the churned adapters (round robin, so a batch keeps needing other GPU slots), Poisson
    arrivals at `rate`, or at `share` of the synthetic traffic's rate, scaled to the stage like the traffic. The
    loads and unloads themselves run beside the replay (kfchaos.faults.lorachurn)."""
    import hashlib

    import numpy as np

    p = fault.params
    assert isinstance(p, LoraAdapterChurnParams)
    if settings.api == "http":
        raise KfchaosError(f"{fault.name}: lora-adapter-churn needs target.api openai-completions or openai-chat")
    if p.rate is not None:
        rate = p.rate * settings.fraction * settings.time_scale
    elif settings.synthetic is not None and settings.synthetic.rate is not None:
        share = DEFAULT_LORA_SHARE if p.share is None else p.share
        rate = share * settings.synthetic.rate * settings.fraction * settings.time_scale
    else:
        raise KfchaosError(
            f"{fault.name}: share needs synthetic traffic with a set rate; with a traffic file or fit_from give rate"
        )
    if rate <= 0 or settings.duration is None:
        return
    names = [a.wire_name for a in p.resolved()]
    seed = int.from_bytes(hashlib.sha256(f"{settings.seed}/{fault.name}".encode()).digest()[:8], "big")
    rng = np.random.default_rng(seed)
    path = api_path(settings)
    offset, k = 0.0, 0
    while True:
        offset += float(rng.exponential(1.0 / rate))
        if offset >= settings.duration:
            return
        yield (
            offset,
            TrafficRequest(
                id=f"lora-{fault.name}-{k}",
                timestamp=offset,
                method="POST",
                path=path,
                prompt_tokens=p.prompt_tokens,
                max_tokens=p.max_tokens,
                fault=fault.name,
                model=names[k % len(names)],
            ),
        )
        k += 1


def client_abort_storm(fault: TrafficFault, settings: ReplaySettings) -> FaultRequests:
    """At each storm: `requests` streams whose client closes them mid-generation, and `slow_readers` streams
    read at `read_rate` bytes/s (kfchaos.traffic.trafficfaults.client performs both)."""
    p = fault.params
    assert isinstance(p, ClientAbortStormParams)
    path = api_path(settings)
    abort = ClientBehaviour(abort_after_tokens=p.abort_tokens, abort_after_s=p.abort_after)
    slow = ClientBehaviour(read_rate=float(p.read_rate))
    for k, start in enumerate(repeat_starts(p.start, p.every, settings.duration)):
        for kind, count, client in (("abort", p.requests, abort), ("slow", p.slow_readers, slow)):
            for j in range(count):
                yield (
                    start,
                    TrafficRequest(
                        id=f"{kind}-{fault.name}-{k}-{j}",
                        timestamp=start,
                        method="POST",
                        path=path,
                        prompt_tokens=p.prompt_tokens,
                        max_tokens=p.max_tokens,
                        ignore_eos=p.ignore_eos,
                        fault=fault.name,
                        client=client,
                    ),
                )
