"""The failure-mode knowledge base: every fault type kfchaos injects has a mode, every mode has a checklist and
names only checks the verdict gives and signals the evidence bundle finds, and evidence re-ranks the matches."""

from __future__ import annotations

from kfchaos.evidence.model import FINDINGS
from kfchaos.faultspec.kinds import PARAMS_BY_TYPE
from kfchaos.knowledge import failure_modes, match

# The serving-chain faults of issue 15 (their params land from other branches; the knowledge base is ready).
SERVING_CHAIN = {"tokenizer-stress", "lora-adapter-churn", "batch-shock", "client-abort-storm", "prefix-cache-thrash"}
# The check names the verdict gives (kfchaos.verdict: evaluate, checks, gate, recovery).
CHECKS = {"p99", "p99_drift", "error_rate", "timeout_rate", "ttft_p99", "itl_request_p99", "tpot_p99",
          "oom_kill_rate", "recovery", "replay", "fault_active",
          *(f"abort.{m}" for m in ("timeout_rate", "error_rate", "p99_latency", "ttft_p99", "oom_kills",
                                   "dependency_p99"))}  # fmt: skip
OOM_PATHS = {
    "host-cgroup-oom-kill",
    "gpu-cuda-oom-crash",
    "kv-cache-preemption-storm",
    "cpu-offload-pinned-memory-growth",
}


def test_every_fault_type_has_a_failure_mode() -> None:
    named = {f for mode in failure_modes() for f in mode.faults}
    assert sorted((set(PARAMS_BY_TYPE) | SERVING_CHAIN) - named) == []


def test_modes_are_well_formed() -> None:
    modes = failure_modes()
    assert len({m.id for m in modes}) == len(modes)
    assert {m.id for m in modes} >= OOM_PATHS
    for mode in modes:
        assert set(mode.checks) <= CHECKS, (mode.id, set(mode.checks) - CHECKS)
        assert set(mode.signals) <= set(FINDINGS)
        assert len(mode.evidence) >= 2 or mode.id == "clock-skew", mode.id  # a checklist, not a single hint
    for mode_id in OOM_PATHS:
        (mode,) = [m for m in modes if m.id == mode_id]
        assert mode.signals and mode.sources, mode_id  # confirmable by the bundle, and cited


def test_a_cuda_oom_in_the_log_puts_the_gpu_path_first() -> None:
    verdict = {"checks": [], "stages": [{"checks": [{"name": "oom_kill_rate", "status": "FAIL"}]}]}
    findings = {"cuda_oom_log": True, "crash_restart": True, "host_oom_kill": False, "working_set_near_limit": False}
    ranked = match(verdict, ["stress-memory"], findings)
    assert ranked[0].mode.id == "gpu-cuda-oom-crash"
    assert ranked[0].found == ["cuda_oom_log", "crash_restart"]
    assert ranked[0].not_collected == ["gpu_memory_full", "gpu_process_memory"]
    host = next(m for m in ranked if m.mode.id == "host-cgroup-oom-kill")
    assert host.found == [] and "host_oom_kill" in host.not_seen  # the fault type alone no longer wins


def test_evidence_alone_can_name_a_mode_no_check_pointed_at() -> None:
    verdict = {"checks": [], "stages": [{"checks": [{"name": "replay", "status": "PASS"}]}]}
    assert match(verdict, [], None) == []
    (first, *_) = match(verdict, [], {"kv_cache_full": True, "preemptions": True})
    assert first.checks == [] and set(first.found) == {"kv_cache_full", "preemptions"}


def test_a_dependency_abort_matches_its_per_dependency_check() -> None:
    verdict = {"checks": [], "stages": [{"checks": [{"name": "abort.dependency_p99.redis", "status": "FAIL"}]}]}
    assert [m.mode.id for m in match(verdict, ["dns-error"])] == ["dependency-dns-failure"]


def test_absent_signals_rank_the_contradicted_mode_lower() -> None:
    # The demo's unsafe run: OOMKilled, the working set's peak missed by the scrapes, no preemptions.
    verdict = {"checks": [], "stages": [{"checks": [{"name": "oom_kill_rate", "status": "FAIL"}]}]}
    findings = {"host_oom_kill": True, "working_set_near_limit": False, "cgroup_oom_events": False,
                "backoff_events": False, "preemptions": False, "kv_cache_full": False}  # fmt: skip
    ranked = match(verdict, ["long-context-burst"], findings)
    assert [m.mode.id for m in ranked[:2]] == ["host-cgroup-oom-kill", "cpu-offload-pinned-memory-growth"]
    assert ranked[0].contradicted == 1  # cAdvisor's lost count and a missing BackOff prove little
