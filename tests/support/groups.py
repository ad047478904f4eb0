"""Which tests share a worker when the suite runs in parallel (`make test`: pytest-xdist, `--dist loadgroup`).

A file's tests stay together (their module fixtures: a Prometheus with history, a demo stack, are made once), and
files that share a session fixture (the real engine of tests/engine, the installed wheel of tests/package, the
replayed world of tests/verdict) are one group: a session fixture is made once per worker, and two real engines on
two cores would each measure the other. Autouse session fixtures (every test has them) do not join files.
"""

from __future__ import annotations

import pytest


class _Groups:
    """Union-find over files and the session fixtures they use."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, name: str) -> str:
        self.parent.setdefault(name, name)
        while self.parent[name] != name:
            self.parent[name] = self.parent[self.parent[name]]
            name = self.parent[name]
        return name

    def join(self, a: str, b: str) -> None:
        first, second = sorted((self.find(a), self.find(b)))
        self.parent[second] = first


def _shared_session_fixtures(item: pytest.Item) -> set[str]:
    """The session fixtures of this suite's own (pytest's and plugins' have no base id) that the test uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    shared = set()
    for name, definitions in info.name2fixturedefs.items():
        definition = definitions[-1]
        if definition.scope == "session" and definition.baseid and not definition._autouse:
            shared.add(f"fixture:{name}")
    return shared


def mark_groups(items: list[pytest.Item]) -> None:
    groups = _Groups()
    for item in items:
        file = item.nodeid.split("::")[0]
        groups.find(file)
        for fixture in _shared_session_fixtures(item):
            groups.join(file, fixture)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups.find(item.nodeid.split("::")[0])))
