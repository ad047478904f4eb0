"""The real world of tests/verdict/world.py earns its PASS: a well-behaved run of the demo server, judged by
`kfchaos verdict` on the files its real sources wrote, PASSes (exit 0) -- so each class test that changes one
source, and gets another verdict, shows what that one change does."""

from __future__ import annotations

import pytest

from tests.verdict.world import World

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_well_behaved_run_passes(world: World) -> None:
    records = world.run_folder("well-behaved", world.stages)
    code, verdict = world.verdict(records)
    assert (code, verdict["status"]) == (0, "PASS"), verdict["reasons"]
    for stage in verdict["stages"]:
        load = next(c for c in stage["checks"] if c["name"] == "load")
        assert load["status"] == "PASS" and len(load["details"]["windows"]["delivered"]) == 2, load
