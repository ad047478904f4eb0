"""The real vLLM engine as one container of a Deployment: vLLM's flags, the container's memory limit and the
restart delay, as the demo stack (kfchaos.demo.stack.demostack) hands them to the engine's supervisor
(kfchaos.demo.stack.enginesupervisor) on its command line, in JSON."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from kfchaos.demo.stack.vllmengine import EngineSettings
from kfchaos.traffic.wire import filler_text

GiB = 1 << 30


@dataclass(frozen=True)
class EngineDeployment:
    settings: EngineSettings = field(default_factory=EngineSettings)
    memory_limit_bytes: int = 2 * GiB + GiB // 2
    # The kubelet's first back-off is 10 s (pkg/kubelet/kubelet.go backOffPeriod); the demo waits less, the engine's
    # own start (~35 s on 2 cores, minutes when the machine is busy) is the long part of a restart anyway.
    restart_delay_s: float = 3.0
    connect_retry_s: float = 0.0  # the fault proxy holds requests this long while the engine restarts

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> EngineDeployment:
        document = json.loads(text)
        settings = dict(document.pop("settings"))
        settings["extra"] = tuple(settings.get("extra") or ())
        return cls(settings=EngineSettings(**settings), **document)

    def flags(self) -> str:
        """The settings that decide the scenario, as a team would write them on its Deployment."""
        s = self.settings
        parts = [f"--max-num-seqs {s.max_num_seqs}", f"--kv-cache-memory-bytes {s.kv_cache_bytes >> 20}Mi"]
        if s.max_num_batched_tokens is not None:
            parts.append(f"--max-num-batched-tokens {s.max_num_batched_tokens}")
        parts.append("--enable-prefix-caching" if s.prefix_caching else "--no-enable-prefix-caching")
        limit = self.memory_limit_bytes / GiB
        return " ".join(parts) + f" (memory limit {limit:g}Gi)"


# Prompt lengths and how many at once the warm-up sends: the shapes the demo's traffic and its bursts bring.
WARM_UP = ((16, 4), (256, 8), (1024, 2), (4000, 1))


def warm_up(url: str, model: str, timeout: float = 300.0) -> None:
    """A few requests of each shape before the first measured one, as a readiness gate does before traffic comes.

    A fresh engine's first batches of each size are slow on CPU (kernels and buffers made on first use): in a run
    without this, the control baseline's first requests took seconds where the rest took tens of milliseconds, its
    P99 came out above anything vLLM's own histogram had seen, and the drift check could not use it (INCONCLUSIVE,
    kfchaos.verdict.drift). A warm-up answer's status is not checked: a failure here shows in what comes next."""

    def one(index: int, tokens: int) -> None:
        body = {"model": model, "prompt": filler_text(tokens) + f"\n\n[warm-up {index}]", "max_tokens": 4}
        request = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                response.read()
        except OSError:
            pass

    for tokens, at_once in WARM_UP:
        with ThreadPoolExecutor(at_once) as pool:
            list(pool.map(lambda i: one(i, tokens), range(at_once)))  # noqa: B023 (used before the loop moves on)
