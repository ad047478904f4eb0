"""Collect the bundle: find the killed containers, then gather each item with its own bounds. Any failure
of one item is that item's `why_not`; nothing here raises into the run, and nothing here judges."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kfchaos.evidence import prom
from kfchaos.evidence.kube import KubeReader, Unavailable
from kfchaos.evidence.model import Bundle, Item
from kfchaos.metrics import oom
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.source import MetricsSource
from kfchaos.netsafe import printable
from kfchaos.redact import redact

NVIDIA_SMI = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv"]
BEFORE_KILL, AFTER_KILL = 120.0, 30.0  # "around the kill": the build-up and the restart
EVENTS_KEPT = 50
MESSAGE_CHARS = 500
# How vLLM's log says its engine died (vllm-project/vllm, as installed for 0.32): the engine process's own fatal error
# (vllm/v1/engine/core.py "EngineCore encountered a fatal error."), the API server's monitor when the engine process
# is gone without one, as after the kernel kills it (vllm/v1/engine/core_client.py "engine core exited unexpectedly"),
# and what every request then raises (vllm/v1/engine/exceptions.py EngineDeadError).
ENGINE_DEATH_LOG = re.compile(
    r"EngineDeadError|EngineCore encountered (?:a fatal error|an issue)|engine core exited unexpectedly"
    r"|Engine core process \S+ died unexpectedly"
)
ENGINE_LINES_KEPT = 10


@dataclass(frozen=True)
class Options:
    exec_nvidia_smi: bool = False  # spec.evidence.exec_nvidia_smi: exec into the serving pod (opt-in)
    log_tail_lines: int = 200
    log_limit_bytes: int = 64 * 1024
    max_containers: int = 4  # killed containers examined (the first ones by kill time)
    budget_s: float = 90.0  # the whole collection; items past it are listed as not collected


@dataclass(frozen=True)
class Kill:
    namespace: str
    pod: str
    container: str
    time: float | None  # the restart's time in the series; None when only the pod status tells
    reason: str | None


def killed_containers(source: MetricsSource, scope: Scope, window: tuple[float, float], step: float) -> list[Kill]:
    """The restarted containers in the window, from kube-state-metrics (kfchaos.metrics.oom), last kill each."""
    queries = oom.queries(scope)
    restarts = oom.restarts(source.range(queries["restarts"], *window, step),
                            source.range(queries["reasons"], *window, step), window[0])  # fmt: skip
    last: dict[tuple[str, str, str], Kill] = {}
    for r in sorted(restarts, key=lambda r: r.time):
        key = r.key[:3]
        if r.reason is not None or key not in last:
            last[key] = Kill(key[0], key[1], key[2], r.time, r.reason)
    return sorted(last.values(), key=lambda k: k.time or 0.0)


def _guarded(deadline: float, budget: float, item: Item, gather: Callable[[], Item]) -> Item:
    if time.monotonic() > deadline:
        return item.skipped(f"not collected: the bundle's time budget ({budget:g} s) was spent on earlier items")
    try:
        return gather()
    except Unavailable as exc:
        return item.skipped(str(exc), item.source)
    except Exception as exc:  # one unreadable item never stops the bundle or the run
        return item.skipped(f"error while collecting: {type(exc).__name__}: {str(exc)[:300]}", item.source)


def last_state(kube: KubeReader, kill: Kill) -> Item:
    item = Item("last-state", "Last terminated state of the container", f"{kill.namespace}/{kill.pod}/{kill.container}")
    pod = kube.pod(kill.namespace, kill.pod)
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status = next((s for s in statuses if isinstance(s, dict) and s.get("name") == kill.container), None)
    source = f"{kube.source}: pod {kill.namespace}/{kill.pod} status.containerStatuses[{kill.container}]"
    if status is None:
        return item.skipped(f"the pod has no status for container {kill.container}", source)
    terminated = (status.get("lastState") or {}).get("terminated")
    data = {"restartCount": status.get("restartCount"), "state": status.get("state"),
            "lastState": {"terminated": _terminated(terminated)} if terminated else {}}  # fmt: skip
    if not isinstance(terminated, dict):
        return item.got(source, f"no lastState.terminated; restartCount {status.get('restartCount')}", data)
    reason = terminated.get("reason")
    shows = (f"lastState.terminated: reason {reason}, exit code {terminated.get('exitCode')}, finished "
             f"{terminated.get('finishedAt')}; restartCount {status.get('restartCount')}")  # fmt: skip
    findings = {"host_oom_kill": reason == oom.OOM_REASON, "crash_restart": reason != oom.OOM_REASON}
    return item.got(source, shows, data, findings)


def _terminated(terminated: dict[str, Any]) -> dict[str, Any]:
    keep = ("reason", "exitCode", "signal", "startedAt", "finishedAt", "containerID")
    out = {k: terminated.get(k) for k in keep if k in terminated}
    if terminated.get("message"):
        out["message"] = redact(str(terminated["message"]))[:MESSAGE_CHARS]
    return out


def events(kube: KubeReader, namespace: str, pod: str) -> Item:
    item = Item("events", "Events of the pod", f"{namespace}/{pod}")
    found = kube.events(namespace, pod)
    source = f"{kube.source}: events in {namespace} with fieldSelector involvedObject.name={pod}"

    def when(e: dict[str, Any]) -> str:
        return str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or "")

    kept = [
        {
            "type": e.get("type"),
            "reason": e.get("reason"),
            "message": redact(str(e.get("message") or ""))[:MESSAGE_CHARS],
            "count": e.get("count"),
            "lastTimestamp": when(e),
            "fieldPath": (e.get("involvedObject") or {}).get("fieldPath"),
            "source": (e.get("source") or {}).get("component") or e.get("reportingComponent"),
        }
        for e in sorted(found, key=when)[-EVENTS_KEPT:]
    ]
    reasons = Counter(str(e["reason"]) for e in kept)
    shows = f"{len(found)} event(s)" + (": " + ", ".join(f"{r} x{n}" for r, n in reasons.most_common()) if kept else "")
    if not found:
        shows += " (events expire after the API server's --event-ttl, 1 h by default)"
    return item.got(source, shows, kept, {"backoff_events": "BackOff" in reasons})


def previous_log(kube: KubeReader, kill: Kill, options: Options) -> Item:
    item = Item("previous-log", "Previous log of the killed container (tail, secrets redacted)",
                f"{kill.namespace}/{kill.pod}/{kill.container}")  # fmt: skip
    item.source = f"{kube.source}: pods/log previous=true tailLines={options.log_tail_lines}"
    text = kube.previous_log(kill.namespace, kill.pod, kill.container, options.log_tail_lines, options.log_limit_bytes)
    lines = text.splitlines()[-options.log_tail_lines :]
    body = redact("\n".join(lines))[: options.log_limit_bytes]
    cuda = bool(oom.GPU_OOM_LOG.search(body))
    shows = f"last {len(lines)} line(s)" + ("; shows CUDA out of memory" if cuda else "; no CUDA out-of-memory line")
    death = [line for line in body.splitlines() if ENGINE_DEATH_LOG.search(line)]
    if death:
        shown = "; ".join(printable(line.strip()[:200]) for line in death[:ENGINE_LINES_KEPT])
        shows += f"; {len(death)} vLLM engine-death line(s): {shown}"
    findings = {"cuda_oom_log": cuda, "engine_death_log": bool(death)}
    return item.got(item.source, shows, body + ("\n" if body else ""), findings)


def nvidia_smi(kube: KubeReader | None, namespace: str, pod: str, container: str, options: Options) -> Item:
    item = Item(
        "nvidia-smi", "GPU memory per process (nvidia-smi --query-compute-apps)", f"{namespace}/{pod}/{container}"
    )
    item.source = f"exec {' '.join(NVIDIA_SMI)} in {namespace}/{pod}/{container}"
    if not options.exec_nvidia_smi:
        return item.skipped("not opted in: set spec.evidence.exec_nvidia_smi: true and grant "
                            "manifests/optional/evidence-exec.yaml (create pods/exec)", item.source)  # fmt: skip
    if kube is None:
        return item.skipped("no Kubernetes API to exec through", item.source)
    text = kube.exec(namespace, pod, container, NVIDIA_SMI, 15.0)[:16384]
    rows = [line.split(",") for line in text.strip().splitlines()[1:] if line.strip()]
    processes = [{"pid": r[0].strip(), "used_memory": r[1].strip()} for r in rows if len(r) >= 2]
    shows = f"{len(processes)} compute process(es): " + ", ".join(
        f"pid {p['pid']} {p['used_memory']}" for p in processes
    )
    return item.got(f"{kube.source}: {item.source}", shows, {"csv": text, "processes": processes},
                    {"gpu_process_memory": bool(processes)})  # fmt: skip


Gather = Callable[[], Item]


def collect(
    *,
    trigger: list[str],
    namespace: str,
    window: tuple[float, float],
    kube: KubeReader | None,
    kube_why_not: str,
    source: MetricsSource | None,
    source_why_not: str,
    kills: list[Kill],
    pods: list[str],
    options: Options = Options(),
) -> Bundle:
    """Every item for the killed containers `kills` (or, where none is known, the pods `pods`).
    `kube`/`source` None: their items are listed as not collected, with `kube_why_not`/`source_why_not`."""
    bundle = Bundle(trigger=trigger, window=window)
    if len(kills) > options.max_containers:
        bundle.notes.append(f"{len(kills)} killed containers; the first {options.max_containers} are examined")
    examined = kills[: options.max_containers] or [
        Kill(namespace, p, "", None, None) for p in pods[: options.max_containers]
    ]
    if not examined:
        bundle.notes.append("no killed container and no target pod found: nothing to examine")
    step = max(1.0, (window[1] - window[0]) / 300)
    planned: list[tuple[Item, Gather]] = []
    seen_pods: set[str] = set()
    for kill in examined:
        planned += _plan(kill, _around(kill.time, window), step, kube, source, options, kill.pod not in seen_pods)
        seen_pods.add(kill.pod)
    deadline = time.monotonic() + options.budget_s
    for item, gather in planned:
        if gather is _KUBE_MISSING:
            bundle.items.append(item.skipped(kube_why_not))
        elif gather is _SOURCE_MISSING:
            bundle.items.append(item.skipped(source_why_not))
        else:
            bundle.items.append(_guarded(deadline, options.budget_s, item, gather))
    return bundle


def _kube_missing() -> Item:
    raise AssertionError("never called")


def _source_missing() -> Item:
    raise AssertionError("never called")


_KUBE_MISSING: Gather = _kube_missing
_SOURCE_MISSING: Gather = _source_missing


def _plan(kill: Kill, around: tuple[float, float], step: float, kube: KubeReader | None,
          source: MetricsSource | None, options: Options, first_of_pod: bool) -> list[tuple[Item, Gather]]:  # fmt: skip
    """The items for one killed container (or one pod, `kill.container` empty), each with how to gather it."""
    ns, pod, name = kill.namespace, kill.pod, kill.container
    container, where = f"{ns}/{pod}/{name}", f"{ns}/{pod}"
    planned: list[tuple[Item, Gather]] = []

    def k(item: Item, gather: Callable[[KubeReader], Item]) -> None:
        planned.append((item, _KUBE_MISSING if kube is None else (lambda: gather(kube))))

    def p(item: Item, gather: Callable[[MetricsSource], Item]) -> None:
        planned.append((item, _SOURCE_MISSING if source is None else (lambda: gather(source))))

    if name:
        k(Item("last-state", "Last terminated state of the container", container), lambda c: last_state(c, kill))
    if first_of_pod:
        k(Item("events", "Events of the pod", where), lambda c: events(c, ns, pod))
    if name:
        k(Item("previous-log", "Previous log of the killed container (tail, secrets redacted)", container),
          lambda c: previous_log(c, kill, options))  # fmt: skip
        p(Item("memory", "Container memory working set against its limit", container),
          lambda s: prom.memory(s, ns, pod, name, around, step, kill.time))  # fmt: skip
        p(Item("cgroup-oom-events", "cgroup OOM events (cAdvisor, memory.events oom_kill)", container),
          lambda s: prom.cgroup_oom_events(s, ns, pod, name, around, step))  # fmt: skip
        p(Item("node-oom-kills", "The node kernel's OOM kills (node-exporter node_vmstat_oom_kill)", where),
          lambda s: prom.node_oom_kills(s, ns, pod, around, step))  # fmt: skip
    if first_of_pod:
        p(Item("gpu-memory", "GPU framebuffer used and free (DCGM)", where),
          lambda s: prom.gpu_memory(s, ns, pod, around, step, kill.time))  # fmt: skip
        p(Item("kv-cache", "vLLM KV-cache usage and preemptions", where),
          lambda s: prom.kv_cache(s, ns, pod, around, step, kill.time))  # fmt: skip
        planned.append((Item("nvidia-smi", "GPU memory per process (nvidia-smi --query-compute-apps)", container),
                        lambda: nvidia_smi(kube, ns, pod, name, options)))  # fmt: skip
    return planned


def _around(kill: float | None, window: tuple[float, float]) -> tuple[float, float]:
    """The build-up before the kill and the restart after it, inside the run (plus its scrape slack)."""
    if kill is None:
        return window
    return max(window[0], kill - BEFORE_KILL), min(max(window[1], kill), kill + AFTER_KILL)
