"""The Chaos Mesh backend reading a fault whose status lists a flood of records, in a process of its own so that its
memory can be measured: `python -m tests.hostile.flood_reader URL MODE`, MODE `wait` (wait_injected), `active`
(is_active, as the stage's poll does), `sweep` (the run's sweep, which lists) or `plain` (the plain kubernetes client's
get of the object, unbounded: the reference). Prints one JSON line: VmRSS before
the call, VmHWM after it (kB, /proc/self/status), the error the call raised (None: it returned), and its seconds."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import kubernetes.client

from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.faults.retry import RetryPolicy
from tests.faults.experiments import experiment_with
from tests.support.kubeapi import kubernetes_client

RUN_ID = "run-flood"
FAULT = {"name": "delay", "type": "network-delay", "mode": "all", "params": {"latency": "100ms"}}


def memory(field: str) -> int:
    """A field of /proc/self/status in kB."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(f"{field}:"))
    return int(line.split()[1])


def backend(url: str) -> ChaosMeshBackend:
    """As a step makes it: through kfchaos.kubeconnect (the client every command and step uses)."""
    return ChaosMeshBackend.from_config(
        host=url,
        retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.05),
        poll_interval=0.05,
        request_timeout=30,
        experiment=experiment_with(FAULT),
        run_id=RUN_ID,
        inject_timeout=20,
    )


def main(url: str, mode: str) -> None:
    chaos = backend(url)
    handle = chaos.handle_of(chaos.experiment.spec.faults[0])  # type: ignore[union-attr]
    before = memory("VmRSS")
    started = time.monotonic()
    error = None
    try:
        if mode == "wait":
            chaos.wait_injected(handle)
        elif mode == "active":
            chaos.is_active(handle)
        elif mode == "plain":
            kubernetes.client.CustomObjectsApi(kubernetes_client(url)).get_namespaced_custom_object(
                handle.group, handle.version, handle.namespace, handle.plural, handle.name
            )
        else:
            chaos.sweep(RUN_ID, timeout=20)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    took = time.monotonic() - started
    print(json.dumps({"rss_before_kb": before, "hwm_kb": memory("VmHWM"), "error": error, "seconds": took}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
