"""The target's lease as one record: a coordination.k8s.io/v1 Lease object, whether it lives on the API server or
in a file under the user's cache folder (kfchaos.lease.local).

The Lease's spec is what client-go's leader election writes (kubernetes/client-go tools/leaderelection/
resourcelock/leaselock.go, LeaderElectionRecordToLeaseSpec): holderIdentity (here the run id; "" once released),
leaseDurationSeconds, acquireTime, renewTime, leaseTransitions. What a person asks of a shared target besides
(whose run it is, where to look at it, who queues behind it, how the last runs ended) rides in annotations, as JSON:

- kfchaos.io/holder: the holding run (experiment, where it runs, since when, the namespaces of its faults, its
  process on this host for a local run, its verdict once the verdict step wrote it);
- kfchaos.io/waiting: the runs queued for the target, each with when it began to wait and when it last said so;
- kfchaos.io/history: the last runs that held (or gave up on) the target, newest last, and how each ended.

Everything read back is outside input (any user with `update` on leases can write it): the spec's fields are
checked, annotations that do not parse are read as empty, and the lists are cut to their bounds. A Lease kfchaos
wrote carries the label app.kubernetes.io/managed-by=kfchaos and names its holder in kfchaos.io/holder; one that
does not (`not_kfchaos`, `foreign_holder`) is queued for and taken over by the same rules, named as such in every
message, and its holder's objects are never swept (kfchaos.lease.queue; docs/reliability.md, "round 4, class 1").
Labels and annotations that are not kfchaos's are written back as read: a PUT replaces the whole object.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import time
import urllib.parse
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any

from kfchaos.errors import KfchaosError
from kfchaos.netsafe import printable
from kfchaos.types import check_label

API_VERSION = "coordination.k8s.io/v1"
KIND = "Lease"
ANNOTATION_TARGET = "kfchaos.io/target"
ANNOTATION_HOLDER = "kfchaos.io/holder"
ANNOTATION_WAITING = "kfchaos.io/waiting"
ANNOTATION_HISTORY = "kfchaos.io/history"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "kfchaos"
LABEL_RUN_ID = "kfchaos.io/run-id"  # the label a run's chaos objects carry (kfchaos.faults.naming, a layer above)
OURS = (ANNOTATION_TARGET, ANNOTATION_HOLDER, ANNOTATION_WAITING, ANNOTATION_HISTORY)
MAX_KEPT = 64  # labels and annotations of others kept (and written back) from a Lease kfchaos did not write
MAX_WAITING = 50  # queued runs kept in the record (annotations share 256 KiB: k8s.io/apimachinery ValidateAnnotations)
MAX_HISTORY = 20  # ended runs kept
MAX_TEXT = 500  # characters kept of any one text field read back

# The times of a Lease's spec are MicroTime: RFC 3339 with six decimals (k8s.io/apimachinery pkg/apis/meta/v1/
# micro_time.go, RFC3339Micro "2006-01-02T15:04:05.000000Z07:00").
_MICRO = "%Y-%m-%dT%H:%M:%S.%fZ"


def micro_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime(_MICRO)


def parse_time(text: object) -> float | None:
    """Epoch seconds of a MicroTime or RFC 3339 time; None for anything else."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.timestamp() if parsed.tzinfo is not None else None


def clock(epoch: float | None) -> str:
    """An epoch as people read it in a message (UTC, to the second)."""
    if epoch is None:
        return "an unknown time"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# ---------------------------------------------------------------------- names


def lease_name(namespace: str, labels: dict[str, str], expressions: list[dict[str, Any]]) -> str:
    """The Lease of the pods one selector picks in one namespace: `kfchaos-target-` and 16 hex digits of the
    canonical selector's sha256 (a DNS subdomain of 31 characters, whatever the labels' length). Two experiments
    naming the same pods with the same selector share it; one written otherwise (another label, an expression)
    gets another lease, and what the two then do to each other is foreign interference (kfchaos.faults.foreign)."""
    canonical = json.dumps(
        {"namespace": namespace, "labels": dict(sorted(labels.items())), "expressions": expressions}, sort_keys=True
    )
    return "kfchaos-target-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def url_key(url: str) -> str:
    """The key of a local run's lock: the target URL with its scheme and host in lower case, the scheme's default
    port written out and no trailing slash, so that http://Demo:80/ and http://demo are one target."""
    parts = urllib.parse.urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme, 0)
    path = parts.path.rstrip("/")
    return f"{scheme}://{host}:{port}{path}"


# ---------------------------------------------------------------------- the parts


@dataclass
class RunInfo:
    """A run as the record names it: what holds or waits for the target."""

    run_id: str
    experiment: str = ""
    where: str = ""  # the run's KFP run id and pod, or a local run's host, process and outputs
    since: float | None = None  # holder: when it acquired; waiting: when it began to wait
    seen: float | None = None  # waiting: when it last said it still waits
    namespaces: list[str] = field(default_factory=list)  # where its chaos objects live (a takeover sweeps there)
    host: str = ""  # a local run's host and owner process (kfchaos.steps.seams.FAULT_OWNER_ENV)
    pid: int | None = None
    verdict: str = ""  # the holder's verdict, once its verdict step ran

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "", [])}

    @classmethod
    def from_dict(cls, data: object) -> RunInfo | None:
        if not isinstance(data, dict) or not isinstance(data.get("run_id"), str) or not data["run_id"]:
            return None
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                continue
            if key in ("since", "seen"):
                values[key] = _number(value)
            elif key == "pid":
                values[key] = value if isinstance(value, int) and not isinstance(value, bool) else None
            elif key == "namespaces":
                values[key] = [str(n)[:63] for n in value if isinstance(n, str)][:20] if isinstance(value, list) else []
            else:
                values[key] = str(value)[:MAX_TEXT]
        return cls(**values)

    def describe(self) -> str:
        what = f"run {self.run_id}" + (f" of {self.experiment}" if self.experiment else "")
        return what + (f" ({self.where})" if self.where else "")


@dataclass
class Ended:
    """A run whose turn at the target is over, and how it ended."""

    run_id: str
    experiment: str = ""
    where: str = ""
    started: float | None = None
    ended: float | None = None
    outcome: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}

    @classmethod
    def from_dict(cls, data: object) -> Ended | None:
        if not isinstance(data, dict) or not isinstance(data.get("run_id"), str) or not data["run_id"]:
            return None
        return cls(
            run_id=str(data["run_id"])[:MAX_TEXT],
            experiment=str(data.get("experiment") or "")[:MAX_TEXT],
            where=str(data.get("where") or "")[:MAX_TEXT],
            started=_number(data.get("started")),
            ended=_number(data.get("ended")),
            outcome=str(data.get("outcome") or "")[:MAX_TEXT],
        )


@dataclass
class LeaseRecord:
    """One target's lease: the Lease spec client-go writes, with kfchaos's annotations read into their parts."""

    name: str
    namespace: str
    target: str
    holder_identity: str = ""
    lease_duration: int = 0
    acquire_time: float | None = None
    renew_time: float | None = None
    transitions: int = 0
    holder: RunInfo | None = None
    waiting: list[RunInfo] = field(default_factory=list)
    history: list[Ended] = field(default_factory=list)
    resource_version: str = ""
    labels: dict[str, str] = field(default_factory=lambda: {LABEL_MANAGED_BY: MANAGED_BY})
    annotations: dict[str, str] = field(default_factory=dict)  # others' annotations, kept as read

    @property
    def held(self) -> bool:
        return bool(self.holder_identity)

    def not_kfchaos(self) -> str:
        """Why kfchaos did not write this Lease ('' when it did), to follow the Lease's name in a message: every
        Lease kfchaos creates or takes carries its managed-by label (to_object), so one without it is another's."""
        if self.labels.get(LABEL_MANAGED_BY) == MANAGED_BY:
            return ""
        return f"is not kfchaos's (it has no label {LABEL_MANAGED_BY}={MANAGED_BY})"

    def foreign_holder(self) -> str:
        """Why the holder is not a kfchaos run that took this Lease ('' when it is), to follow the Lease's name in
        a message. kfchaos writes holderIdentity and kfchaos.io/holder together (queue.TargetLease._mine), and a
        run id is a label value (kfchaos.faults.naming.check_run_id): a holder string alone, however much it looks
        like a run id, is not a run whose chaos objects a takeover may sweep."""
        if not self.held:
            return ""
        if why := self.not_kfchaos():
            return why
        identity = printable(self.holder_identity[:80])
        if self.holder is None or self.holder.run_id != self.holder_identity:
            return f"names a holder kfchaos did not write ({ANNOTATION_HOLDER} does not name '{identity}')"
        try:
            check_label(LABEL_RUN_ID, self.holder_identity)
        except ValueError:
            return f"names a holder that is no kfchaos run id ('{identity}' is not a Kubernetes label value)"
        return ""

    def holder_info(self) -> RunInfo:
        """The holder as the annotation names it, or by its identity alone when the annotation says another."""
        if self.holder is not None and self.holder.run_id == self.holder_identity:
            return self.holder
        return RunInfo(self.holder_identity, since=self.acquire_time)

    def ended(self, run_id: str) -> Ended | None:
        return next((e for e in reversed(self.history) if e.run_id == run_id), None)

    def renewal(self) -> tuple[str, float | None, int]:
        """What a renewal changes: a waiter that sees this unchanged for leaseDurationSeconds of its own clock
        may take over (client-go compares the whole raw record; waiters here write the record too, so only
        the holder's part is compared)."""
        return self.holder_identity, self.renew_time, self.lease_duration

    def with_history(self, entry: Ended) -> LeaseRecord:
        return replace(self, history=[*self.history, entry][-MAX_HISTORY:])

    def without_waiter(self, run_id: str) -> LeaseRecord:
        return replace(self, waiting=[w for w in self.waiting if w.run_id != run_id])

    # ------------------------------------------------------------------ the Lease object

    def to_object(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": max(1, int(self.lease_duration)),
            "leaseTransitions": int(self.transitions),
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = micro_time(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = micro_time(self.renew_time)
        annotations = {
            **self.annotations,
            ANNOTATION_TARGET: self.target,
            ANNOTATION_HOLDER: json.dumps(self.holder.to_dict() if self.holder else {}, sort_keys=True),
            ANNOTATION_WAITING: json.dumps([w.to_dict() for w in self.waiting[-MAX_WAITING:]], sort_keys=True),
            ANNOTATION_HISTORY: json.dumps([e.to_dict() for e in self.history[-MAX_HISTORY:]], sort_keys=True),
        }
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": dict(self.labels),
            "annotations": annotations,
        }
        if self.resource_version:
            metadata["resourceVersion"] = self.resource_version
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}

    @classmethod
    def from_object(cls, obj: object) -> LeaseRecord:
        """The record of a Lease object as the API server (or the lock file) gives it back."""
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise KfchaosError("the target's lease is not a Lease object")
        meta: dict[str, Any] = obj["metadata"]
        spec: dict[str, Any] = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
        annotations: dict[str, Any] = meta["annotations"] if isinstance(meta.get("annotations"), dict) else {}
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        holder_identity = spec.get("holderIdentity")
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            target=str(annotations.get(ANNOTATION_TARGET) or "")[:MAX_TEXT],
            holder_identity=str(holder_identity)[:MAX_TEXT] if isinstance(holder_identity, str) else "",
            lease_duration=duration if isinstance(duration, int) and not isinstance(duration, bool) else 0,
            acquire_time=parse_time(spec.get("acquireTime")),
            renew_time=parse_time(spec.get("renewTime")),
            transitions=transitions if isinstance(transitions, int) and not isinstance(transitions, bool) else 0,
            holder=RunInfo.from_dict(_json(annotations.get(ANNOTATION_HOLDER), {})),
            waiting=_parsed_list(annotations.get(ANNOTATION_WAITING), RunInfo.from_dict)[-MAX_WAITING:],
            history=_parsed_list(annotations.get(ANNOTATION_HISTORY), Ended.from_dict)[-MAX_HISTORY:],
            resource_version=str(meta.get("resourceVersion") or ""),
            labels=_strings(meta.get("labels")),
            annotations={k: v for k, v in _strings(annotations).items() if k not in OURS},
        )


def this_host() -> str:
    return socket.gethostname()


def process_alive(pid: int) -> bool:
    """Whether a process with this id lives on this host (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def now() -> float:
    return time.time()


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _strings(data: object) -> dict[str, str]:
    """A label or annotation map read back: its string entries, at most MAX_KEPT of them."""
    if not isinstance(data, dict):
        return {}
    kept = [(k, v) for k, v in data.items() if isinstance(k, str) and isinstance(v, str)]
    return dict(kept[:MAX_KEPT])


def _json(text: object, default: Any) -> Any:
    if not isinstance(text, str) or len(text) > 256 * 1024:
        return default
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return default


def _parsed_list(text: object, parse: Any) -> list[Any]:
    items = _json(text, [])
    if not isinstance(items, list):
        return []
    return [parsed for parsed in (parse(item) for item in items) if parsed is not None]
