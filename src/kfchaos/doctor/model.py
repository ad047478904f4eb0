"""The doctor's table: one row per check, with what to do when it does not pass."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from kfchaos.netsafe import printable


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
        return 0 if self.ok else 1

    def to_json(self) -> str:
        rows = [{**asdict(c), "status": c.status.value} for c in self.checks]
        return json.dumps({"ok": self.ok, "checks": rows}, indent=2)

    def table(self) -> str:
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
