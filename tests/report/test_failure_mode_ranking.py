"""Failure modes ranked by the evidence the run holds: for each demo scenario that FAILs, the cause it was
designed to show (its experiment file's `# demo-cause:` line, kfchaos.demo.runner.scenarios.CAUSES for the built-in
unsafe one) ranks in the report's top 3. scripts/measure-scenarios.py measures the same on fresh runs (docs/report.md).

The report's data per scenario: the checks that failed (docs/demo.md's measured table and the README's demo
output), the experiment's own fault types, and, where the verdict collected the OOM evidence bundle (OOM kills
or KV-cache exhaustion), what the bundle saw. PASS scenarios (tuned, client-abort-storm, demo-llm-chaos) have no
failing check and so no failure mode to rank."""

from __future__ import annotations

from typing import Any

import pytest

from kfchaos.demo.runner.scenarios import EXPERIMENTS_DIR, read_expectation, resolve
from kfchaos.evidence.model import Bundle, Item
from kfchaos.report.facts import known_modes
from kfchaos.validate import load_experiment
from tests.conftest import ROOT

DEMO = ROOT / "src/kfchaos/demo/experiments"

# scenario: (experiment file, failing checks, evidence bundle findings or None when none was collected)
SCENARIOS: dict[str, tuple[str, list[str], dict[str, bool] | None]] = {
    # OOM-killed by the first burst: the KV pool's host-memory mirror passes the 7.5 GiB limit; the KV cache itself
    # peaked near a third full, with no preemption (the bundle's KV item saw neither).
    "unsafe": (
        "demo-llm-chaos.yaml",
        ["abort.oom_kills", "p99_drift", "error_rate", "oom_kill_rate", "ttft_p99"],
        {
            "host_oom_kill": True,
            "working_set_near_limit": True,
            "cgroup_oom_events": True,
            "backoff_events": False,
            "crash_restart": False,
            "cuda_oom_log": False,
            "kv_cache_full": False,
            "preemptions": False,
        },
    ),
    "batch-shock": (
        "batch-shock.yaml",
        ["p99_drift"],
        {"kv_cache_full": True, "preemptions": True},
    ),
    "lora-adapter-churn": ("lora-adapter-churn.yaml", ["p99_drift"], None),
    "prefix-cache-thrash": ("prefix-cache-thrash.yaml", ["ttft_p99", "p99_drift"], None),
    "tokenizer-stress": ("tokenizer-stress.yaml", ["p99_drift"], None),
}


def _bundle(findings: dict[str, bool]) -> Bundle:
    item = Item("kv-cache", "what the bundle saw", "demo/demo-llm").got("test", "findings", None, findings)
    return Bundle(trigger=["oom_kills"], window=(0.0, 1.0), items=[item])


def _context(file: str, findings: dict[str, bool] | None) -> dict[str, Any]:
    context: dict[str, Any] = {"experiment": load_experiment(DEMO / file)}
    if findings is not None:
        context["evidence"] = _bundle(findings)
    return context


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_designed_cause_ranks_in_the_top_3(scenario: str) -> None:
    file, failing, findings = SCENARIOS[scenario]
    designed = resolve(scenario).cause
    document = {"status": "FAIL", "checks": [], "stages": [{"stage": 75, "checks": [{"name": c, "status": "FAIL"}
                                                                                   for c in failing]}]}  # fmt: skip
    ranked = [m.mode.id for m in known_modes(document, _context(file, findings))]
    assert designed in ranked[:3], (scenario, ranked)


def test_every_scenario_designed_to_fail_names_its_cause_and_each_is_ranked_above() -> None:
    failing = {p.stem for p in EXPERIMENTS_DIR.glob("*.yaml") if read_expectation(p) == "FAIL"} | {"unsafe"}
    assert failing == set(SCENARIOS)
    assert all(resolve(name).cause for name in failing)
