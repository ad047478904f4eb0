"""The nights every history test reads: 21 run folders of one experiment (tests/history/runs.py), seven each on
pipeline versions 1.0.0 and 1.0.1 against the same target, then seven on 1.1.0 against a target 1.5 times slower
that is also OOM-killed in three of them. The slower target is the planted regression; 1.0.0 -> 1.0.1 is a bump
that changed nothing. Written once a session: writing them is most of these tests' time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.history.runs import Night, write_nights

NIGHTS = (
    [Night("1.0.0", 0.08)] * 7
    + [Night("1.0.1", 0.08)] * 7
    + [Night("1.1.0", 0.12, oom_kill=i % 3 == 0) for i in range(7)]
)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("history") / "runs"
    write_nights(root, tmp_path_factory.mktemp("inputs"), NIGHTS)
    return root
