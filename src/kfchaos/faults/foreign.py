"""Foreign interference during a stage: what acted on the target's pods that this run did not do.

A run that holds its target's lease (kfchaos.lease) keeps out other kfchaos runs of the same target; it cannot keep
out a Chaos Mesh object made by hand, by another tool, or by a run of another selector over the same pods, nor a
pod deleted by a rollout or an operator. Each of those changes what the stage measures, so a stage that saw one is
INCONCLUSIVE, naming it (kfchaos.steps.stages.collect). While the stage replays, the watch looks, at its start,
every `interval` seconds and at its end, for

- chaos objects in the target's namespace that this run did not create (their `kfchaos.io/run-id` label is not
  this run's) whose selector can reach a target pod, and that were not recovered when seen (AllRecovered with
  desiredPhase Stop: a fault already over is not one). A selector "can reach" a pod unless one of its parts rules
  the pod out: `namespaces` (empty: the object's own namespace, Chaos Mesh docs "Define the Scope of Chaos
  Experiments"), `pods`, `labelSelectors`, `expressionSelectors`, `annotationSelectors`, `podPhaseSelectors`,
  `nodes`; `fieldSelectors` on fields it does not read and `nodeSelectors` (node labels: the run identity may
  not read nodes) are taken as reaching it. A NetworkChaos's `target` selector counts as well (its other side).
  Only the target's namespace is listed: the run identity may list chaos objects there alone
  (manifests/target-namespace/role.yaml), so an object elsewhere that names these pods in `namespaces` is not seen.
- target pods deleted (gone, or given a deletionTimestamp) or containers restarted, where no fault of this run
  alive in the stage reaches the pod. A container killed for memory (OOMKilled) is left to the OOM check: the
  run's own load can do that, and judging it is that check's work. So is every later restart of that container in
  the stage: a server coming back from the kill may fail its start and restart again, and the kubelet's last state
  then shows that exit, not the kill. Seen on the real node (tests/cluster/node/test_vllm_node.py): vLLM 0.32's CPU
  worker takes the container's free memory as its limit less `memory.usage_in_bytes` (vllm-project/vllm
  vllm/utils/cpu_resource_utils.py `get_memory_node_info`, `get_cgroup_memory_usage`), which on cgroup v1 counts the
  page cache of the libraries it has just read; a start that reads them afresh finds too little for its KV cache and
  exits 1 from `determine_available_memory`. A kill and a second end both between two looks (`interval` apart)
  would show only the second: the kubelet's back-off after a restart and a server's start make that unlikely, not
  impossible.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kfchaos.errors import KfchaosError
from kfchaos.faults.catalog import PLURALS
from kfchaos.faults.naming import LABEL_RUN_ID

PLURAL_KINDS = {plural: kind for kind, plural in PLURALS.items()}


@dataclass(frozen=True)
class Finding:
    key: str  # one per object or event, so a poll that sees it again adds nothing
    reason: str
    at: float


def _expression_holds(labels: dict[str, str], expression: dict[str, Any]) -> bool:
    key, op, values = expression.get("key"), expression.get("operator"), set(expression.get("values") or [])
    return {
        "In": key in labels and labels.get(str(key)) in values,
        "NotIn": labels.get(str(key)) not in values,
        "Exists": key in labels,
        "DoesNotExist": key not in labels,
    }.get(str(op), True)  # an operator it does not know: taken as reaching (never a missed interference)


_FIELDS = {
    "metadata.name": lambda pod: pod["metadata"].get("name"),
    "metadata.namespace": lambda pod: pod["metadata"].get("namespace"),
    "spec.nodeName": lambda pod: (pod.get("spec") or {}).get("nodeName"),
    "status.phase": lambda pod: (pod.get("status") or {}).get("phase"),
}


def selector_reaches(selector: dict[str, Any] | None, object_namespace: str, pod: dict[str, Any]) -> bool:
    """Whether a Chaos Mesh PodSelectorSpec can select `pod` (see the module docstring for what is read)."""
    if not isinstance(selector, dict):
        return False
    meta = pod.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    namespaces = selector.get("namespaces") or [object_namespace]
    if namespace not in namespaces:
        return False
    listed = selector.get("pods")
    if isinstance(listed, dict) and listed and name not in (listed.get(namespace) or []):
        return False
    if any(labels.get(k) != v for k, v in (selector.get("labelSelectors") or {}).items()):
        return False
    if any(annotations.get(k) != v for k, v in (selector.get("annotationSelectors") or {}).items()):
        return False
    if not all(_expression_holds(labels, e) for e in selector.get("expressionSelectors") or [] if isinstance(e, dict)):
        return False
    phases = selector.get("podPhaseSelectors") or []
    if phases and (pod.get("status") or {}).get("phase") not in phases:
        return False
    nodes = selector.get("nodes") or []
    if nodes and (pod.get("spec") or {}).get("nodeName") not in nodes:
        return False
    for key, value in (selector.get("fieldSelectors") or {}).items():
        read = _FIELDS.get(key)
        if read is not None and read(pod) != value:
            return False
    return True


def object_reaches(obj: dict[str, Any], pod: dict[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    namespace = (obj.get("metadata") or {}).get("namespace", "")
    target = spec.get("target")
    other: dict[str, Any] = target if isinstance(target, dict) else {}
    reaches_own = selector_reaches(spec.get("selector"), namespace, pod)
    return reaches_own or selector_reaches(other.get("selector"), namespace, pod)


def described_pod(selector: dict[str, Any]) -> dict[str, Any]:
    """The pod a selector of one target describes (kfchaos.faults.render.pod_selector: one namespace, labels,
    expressions): its labels, and a label for each expression that needs one (In: its first value; Exists: the key,
    empty). A takeover's sweep (ChaosMeshBackend.sweep_at_target) counts it among the target's pods, so that an
    object aimed at the target reaches it even while none of its pods runs. It has no name, node or phase: a
    selector that lists pods, nodes or phases reaches it only through a running pod."""
    labels = dict(selector.get("labelSelectors") or {})
    for expression in selector.get("expressionSelectors") or []:
        key, op, values = str(expression.get("key")), expression.get("operator"), expression.get("values") or []
        if op == "In" and values:
            labels.setdefault(key, str(values[0]))
        elif op == "Exists":
            labels.setdefault(key, "")
    namespace = (selector.get("namespaces") or [""])[0]
    return {"metadata": {"namespace": namespace, "name": "", "labels": labels}, "spec": {}, "status": {}}


def _over(obj: dict[str, Any]) -> bool:
    """A fault that is over: recovered and meant to stay stopped (what kfchaos's own removal waits for)."""
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or [] if isinstance(c, dict)}
    phase = (status.get("experiment") or {}).get("desiredPhase")
    return conditions.get("AllRecovered") == "True" and phase == "Stop"


@dataclass
class PodState:
    pod: dict[str, Any]  # as seen first in the stage: a pod gone is judged by its labels then
    restarts: dict[str, int]
    deleting: bool

    @classmethod
    def of(cls, pod: dict[str, Any]) -> PodState:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        restarts = {str(s.get("name")): int(s.get("restartCount") or 0) for s in statuses if isinstance(s, dict)}
        return cls(pod, restarts, bool(pod["metadata"].get("deletionTimestamp")))

    @property
    def name(self) -> str:
        return str(self.pod["metadata"].get("name", ""))


def _last_termination(pod: dict[str, Any], container: str) -> dict[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(status, dict) and status.get("name") == container:
            return ((status.get("lastState") or {}).get("terminated")) or {}
    return {}


@dataclass
class ForeignWatch:
    """One stage's watch. `backend`: a ChaosMeshBackend (its bounded, paged lists); `own`: this run's manifests
    alive in the stage (their selectors say which pod events the run's own faults explain)."""

    backend: Any
    run_id: str
    namespace: str
    pod_selector: str
    own: list[dict[str, Any]]
    interval: float = 5.0
    findings: dict[str, Finding] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _pods: dict[str, PodState] | None = None
    _oom_killed: set[tuple[str, str]] = field(default_factory=set)  # (pod uid, container) killed for memory

    def reasons(self) -> list[str]:
        return [f.reason for f in sorted(self.findings.values(), key=lambda f: f.at)]

    def _add(self, key: str, reason: str) -> None:
        self.findings.setdefault(key, Finding(key, reason, time.time()))

    def poll(self) -> None:
        """One look; a failed list is a note (the stage's other checks still stand), never a finding."""
        try:
            pods = self.backend.list_objects("pods", self.namespace, self.pod_selector) or []
            self._look_at_objects(pods)
            self._look_at_pods(pods)
        except KfchaosError as exc:
            if len(self.notes) < 20:
                self.notes.append(f"foreign interference not checked at {time.strftime('%H:%M:%S')}: {exc}")

    def _look_at_objects(self, pods: list[dict[str, Any]]) -> None:
        for plural, kind in PLURAL_KINDS.items():
            for obj in self.backend.list_objects(plural, self.namespace, "") or []:
                meta = obj.get("metadata") or {}
                made_by = (meta.get("labels") or {}).get(LABEL_RUN_ID)
                if made_by == self.run_id or _over(obj):
                    continue
                reached = sorted(p["metadata"]["name"] for p in pods if object_reaches(obj, p))
                if pods and not reached:
                    continue
                whose = f"made by kfchaos run {made_by}" if made_by else "not made by kfchaos"
                action = (obj.get("spec") or {}).get("action")
                what = f"{kind} {meta.get('namespace')}/{meta.get('name')}" + (f" ({action})" if action else "")
                pods_text = ", ".join(reached[:5]) if reached else "the target's pods (none running to compare)"
                self._add(
                    f"object/{plural}/{meta.get('uid') or meta.get('name')}",
                    f"foreign interference: {what}, {whose}, can reach {pods_text} during this stage",
                )

    def _explained(self, pod: dict[str, Any]) -> bool:
        return any(object_reaches(manifest, pod) for manifest in self.own)

    def _look_at_pods(self, pods: list[dict[str, Any]]) -> None:
        current = {str(p["metadata"].get("uid") or p["metadata"].get("name")): p for p in pods}
        if self._pods is None:
            self._pods = {uid: PodState.of(p) for uid, p in current.items()}
            return
        for uid, before in self._pods.items():
            pod = current.get(uid)
            if pod is None or (pod["metadata"].get("deletionTimestamp") and not before.deleting):
                if not self._explained(pod or before.pod):
                    gone = "was deleted" if pod is None else "is being deleted"
                    self._add(f"deleted/{uid}", f"foreign interference: target pod {self.namespace}/{before.name} "
                              f"{gone} during this stage, and no fault of this run reaches it")  # fmt: skip
                continue
            for container, count in PodState.of(pod).restarts.items():
                if count <= before.restarts.get(container, 0) or self._explained(pod):
                    continue
                ended = _last_termination(pod, container)
                if ended.get("reason") == "OOMKilled":
                    self._oom_killed.add((uid, container))
                if (uid, container) in self._oom_killed:
                    continue  # the kill, or the server coming back from it: the OOM check's to judge
                how = ", ".join(str(x) for x in (ended.get("reason"), f"exit {ended.get('exitCode')}") if x)
                self._add(
                    f"restart/{uid}/{container}/{count}",
                    f"foreign interference: container {container} of target pod {self.namespace}/{before.name} "
                    f"restarted during this stage ({how}), and no fault of this run reaches it",
                )
        self._pods.update({uid: PodState.of(p) for uid, p in current.items() if uid not in self._pods})

    @contextmanager
    def watching(self) -> Iterator[ForeignWatch]:
        """Poll at the start, every `interval` on a thread of its own, and at the end."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.interval):
                self.poll()

        self.poll()
        thread = threading.Thread(target=loop, name="kfchaos-foreign", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=self.interval + 30)
            self.poll()
