"""Failure modes ranked by the evidence the run holds: for each demo scenario that FAILs, the cause it was
designed to show (its experiment file's header says which) ranks in the report's top 3.

The report's data per scenario: the checks that failed (docs/demo.md's measured table and the README's demo
output), the experiment's own fault types, and, where the verdict collected the OOM evidence bundle (OOM kills
or KV-cache exhaustion), what the bundle saw. PASS scenarios (tuned, client-abort-storm, demo-llm-chaos) have no
failing check and so no failure mode to rank."""

from __future__ import annotations

from typing import Any

import pytest

from kfchaos.evidence.model import Bundle, Item
from kfchaos.report import _matches
from kfchaos.validate import load_experiment
from tests.conftest import ROOT

DEMO = ROOT / "src/kfchaos/demo/experiments"

# scenario: (experiment file, failing checks, evidence bundle findings or None when none was collected, designed)
SCENARIOS: dict[str, tuple[str, list[str], dict[str, bool] | None, str]] = {
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
        "host-cgroup-oom-kill",
    ),
    "batch-shock": (
        "batch-shock.yaml",
        ["p99_drift"],
        {"kv_cache_full": True, "preemptions": True},
        "kv-cache-preemption-storm",
    ),
    "lora-adapter-churn": ("lora-adapter-churn.yaml", ["p99_drift"], None, "lora-adapter-swap"),
    "prefix-cache-thrash": ("prefix-cache-thrash.yaml", ["ttft_p99", "p99_drift"], None, "prefix-cache-thrash"),
    "tokenizer-stress": ("tokenizer-stress.yaml", ["p99_drift", "timeout_rate"], None, "tokenizer-stall"),
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
    file, failing, findings, designed = SCENARIOS[scenario]
    document = {"status": "FAIL", "checks": [], "stages": [{"stage": 75, "checks": [{"name": c, "status": "FAIL"}
                                                                                   for c in failing]}]}  # fmt: skip
    ranked = [m.mode.id for m in _matches(document, _context(file, findings))]
    assert designed in ranked[:3], (scenario, ranked)
