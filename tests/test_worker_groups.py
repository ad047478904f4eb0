"""tests/support/groups.py: which tests share a pytest-xdist worker in `make test`. A file's tests stay together,
files that share one of this suite's session fixtures join (so one real engine starts, not one per worker), and
pytest's own session fixtures or an autouse one join nothing (else every file would be one group)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.groups import mark_groups


@dataclass
class _Definition:
    scope: str
    baseid: str
    _autouse: bool = False


@dataclass
class _Info:
    name2fixturedefs: dict[str, tuple[_Definition, ...]]


@dataclass
class _Item:
    nodeid: str
    fixtures: dict[str, _Definition]
    markers: list[Any] = field(default_factory=list)

    @property
    def _fixtureinfo(self) -> _Info:
        return _Info({name: (definition,) for name, definition in self.fixtures.items()})

    def add_marker(self, marker: Any) -> None:
        self.markers.append(marker)

    @property
    def group(self) -> str:
        (marker,) = [m for m in self.markers if m.name == "xdist_group"]
        return str(marker.args[0])


ENGINE = _Definition("session", "tests/engine")
TMP = _Definition("session", "")  # pytest's tmp_path_factory: no base id
CONFIG = _Definition("session", "tests", _autouse=True)
STACK = _Definition("module", "tests/demo/test_a.py")


def test_files_sharing_a_session_fixture_are_one_group_and_others_one_each() -> None:
    items = [
        _Item("tests/engine/test_a.py::one", {"engine": ENGINE, "tmp_path_factory": TMP, "_config": CONFIG}),
        _Item("tests/engine/test_a.py::two", {"tmp_path_factory": TMP, "_config": CONFIG}),
        _Item("tests/engine/test_b.py::three", {"engine": ENGINE, "_config": CONFIG}),
        _Item("tests/demo/test_a.py::four", {"stack": STACK, "tmp_path_factory": TMP, "_config": CONFIG}),
        _Item("tests/demo/test_b.py::five", {"tmp_path_factory": TMP, "_config": CONFIG}),
    ]
    mark_groups(items)  # type: ignore[arg-type]  # the attributes mark_groups reads
    groups = [item.group for item in items]
    assert groups[0] == groups[1] == groups[2]  # one engine: test_a's tests and test_b's on one worker
    assert len({groups[0], groups[3], groups[4]}) == 3  # pytest's, an autouse and a module fixture join nothing
    assert groups[3] == "tests/demo/test_a.py" and groups[4] == "tests/demo/test_b.py"


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_a_group_is_the_same_whatever_the_order_of_collection(order: tuple[int, int, int]) -> None:
    base = [
        _Item("tests/x/test_a.py::one", {"engine": ENGINE}),
        _Item("tests/x/test_b.py::two", {"engine": ENGINE}),
        _Item("tests/x/test_c.py::three", {}),
    ]
    items = [base[i] for i in order]
    mark_groups(items)  # type: ignore[arg-type]
    assert base[0].group == base[1].group == "fixture:engine"
    assert base[2].group == "tests/x/test_c.py"
