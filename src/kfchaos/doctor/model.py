"""The doctor's table: one row per check, with what to do when it does not pass."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from kfchaos.netsafe import printable

# `kfchaos doctor`'s exit codes: 0 every check passes, 1 a check failed or could not be made, 5 no cluster at all
# (the API server cannot be reached, or no cluster is configured): nothing could be checked, which is neither
# "ready" nor a FAIL of the cluster's setup.
EXIT_READY = 0
EXIT_NOT_READY = 1
EXIT_NO_CLUSTER = 5


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"  # could not be checked: never counts as passing


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    # Set when no cluster could be reached at all: the one line to print instead of a row per check.
    no_cluster: str | None = None

    def add(self, name: str, status: Status, detail: str, fix: str = "") -> Check:
        # details quote servers (Prometheus errors, Kubernetes messages, the target): one printable line each
        check = Check(name, status, printable(detail), "" if status is Status.PASS else printable(fix))
        self.checks.append(check)
        return check

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.status is Status.PASS for c in self.checks)

    @property
    def exit_code(self) -> int:
        if self.no_cluster is not None:
            return EXIT_NO_CLUSTER
        return EXIT_READY if self.ok else EXIT_NOT_READY

    def to_json(self) -> str:
        rows = [{**asdict(c), "status": c.status.value} for c in self.checks]
        return json.dumps({"ok": self.ok, "no_cluster": self.no_cluster, "checks": rows}, indent=2)

    def table(self) -> str:
        if self.no_cluster is not None:
            return f"kfchaos doctor: {self.no_cluster}"
        header = ("CHECK", "STATUS", "DETAIL / FIX")
        width = max([len(header[0])] + [len(c.name) for c in self.checks])
        lines = [f"{header[0]:<{width}}  {header[1]:<7}  {header[2]}"]
        for check in self.checks:
            lines.append(f"{check.name:<{width}}  {check.status.value:<7}  {check.detail}")
            if check.fix:
                lines.append(f"{'':<{width}}  {'':<7}  fix: {check.fix}")
        passed = sum(c.status is Status.PASS for c in self.checks)
        lines.append(f"{passed}/{len(self.checks)} checks pass" + ("" if self.ok else ": not ready for a run"))
        return "\n".join(lines)
