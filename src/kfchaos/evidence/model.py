"""The evidence bundle and its items, as JSON: what the run folder's evidence/index.json holds and what the
report lists. An item is collected (with its source and what it shows) or not (with why not)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

KIND = "kfchaos.EvidenceBundle"
VERSION = 1
TEXT_KINDS = {"previous-log"}  # items whose data is text (a .log file), not JSON

# Findings: facts the items establish, read by the knowledge base to rank failure modes (kfchaos.knowledge).
# True: collected and seen; False: collected and not seen; absent: not collected.
FINDINGS = {
    "host_oom_kill": "a container's last terminated reason is OOMKilled (the cgroup's OOM killer ended it)",
    "crash_restart": "a container restarted for another reason (Error/Completed): a crash, not a cgroup OOM kill",
    "cuda_oom_log": "the killed container's previous log shows CUDA out of memory",
    "working_set_near_limit": "the container's memory working set reached >= 90 % of its memory limit",
    "cgroup_oom_events": "cAdvisor counted OOM events of the container's cgroup (memory.events oom_kill)",
    "backoff_events": "the kubelet reported BackOff restarting the failed container",
    "gpu_memory_full": "GPU framebuffer used >= 95 % of the total (DCGM FB_USED / (FB_USED + FB_FREE))",
    "kv_cache_full": "vLLM KV-cache usage reached >= 99 %",
    "preemptions": "vLLM preempted running requests (vllm:num_preemptions_total rose)",
    "gpu_process_memory": "nvidia-smi listed the compute processes and their GPU memory in the serving pod",
}


# Findings whose absence means little: cAdvisor's OOM count goes with the killed container's cgroup
# (google/cadvisor#3015), and the kubelet reports BackOff only from the second crash in its back-off window.
WEAK_ABSENCE = {"cgroup_oom_events", "backoff_events"}


@dataclass
class Item:
    """One piece of evidence. `collected` False always comes with `why_not`."""

    kind: str  # last-state, events, previous-log, memory, cgroup-oom-events, node-oom-kills, gpu-memory, kv-cache,
    # nvidia-smi
    title: str
    target: str  # namespace/pod[/container]
    collected: bool = False
    source: str = ""  # where it came from (API path, PromQL), or where it would have
    shows: str = ""  # one line: what it shows
    why_not: str | None = None
    data: Any = None  # JSON, or text for logs
    findings: dict[str, bool] = field(default_factory=dict)

    @property
    def file(self) -> str:
        """The item's file name in evidence/: kind and target, made safe."""
        stem = f"{self.kind}-{self.target}".replace("/", "_")
        safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in stem)[:150]
        return f"{safe}.log" if self.kind in TEXT_KINDS else f"{safe}.json"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "file": self.file if self.collected else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Item:
        return cls(
            kind=str(data.get("kind") or ""),
            title=str(data.get("title") or ""),
            target=str(data.get("target") or ""),
            collected=bool(data.get("collected")),
            source=str(data.get("source") or ""),
            shows=str(data.get("shows") or ""),
            why_not=None if data.get("why_not") is None else str(data["why_not"]),
            data=data.get("data"),
            findings={str(k): bool(v) for k, v in (data.get("findings") or {}).items()},
        )

    def skipped(self, why: str, source: str = "") -> Item:
        self.collected, self.why_not = False, why
        if source:
            self.source = source
        return self

    def got(self, source: str, shows: str, data: Any, findings: dict[str, bool] | None = None) -> Item:
        self.collected, self.source, self.shows, self.data, self.why_not = True, source, shows, data, None
        self.findings = findings or {}
        return self


@dataclass
class Bundle:
    trigger: list[str]  # why the bundle was collected
    window: tuple[float, float]
    items: list[Item] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # limits met (items left out), options not taken

    def findings(self) -> dict[str, bool]:
        """Each finding over all collected items: seen anywhere -> True; only collected-not-seen -> False."""
        out: dict[str, bool] = {}
        for item in self.items:
            for name, seen in item.findings.items():
                out[name] = out.get(name, False) or seen
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "version": VERSION,
            "trigger": self.trigger,
            "window": list(self.window),
            "findings": self.findings(),
            "notes": self.notes,
            "items": [item.to_dict() for item in self.items],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Bundle | None:
        """A bundle from its JSON; None for anything else (an old or foreign document is not evidence)."""
        if not isinstance(data, dict) or data.get("kind") != KIND or not isinstance(data.get("items"), list):
            return None
        window = data.get("window") or [0.0, 0.0]
        return cls(
            trigger=[str(t) for t in data.get("trigger") or []],
            window=(float(window[0]), float(window[1])),
            items=[Item.from_dict(i) for i in data["items"] if isinstance(i, dict)],
            notes=[str(n) for n in data.get("notes") or []],
        )
