"""The demo engine's arithmetic: what the two demo scenarios rely on."""

from __future__ import annotations

import pytest

from kfchaos.demo.server.engine import GIB, Engine, EngineConfig, Sequence

UNSAFE = EngineConfig(max_num_seqs=256, gpu_memory_utilization=0.95)
TUNED = EngineConfig(max_num_seqs=32, gpu_memory_utilization=0.85, enable_prefix_caching=True)


def drain(engine: Engine, limit: int = 5000) -> tuple[bool, float]:
    elapsed = 0.0
    for _ in range(limit):
        result = engine.step()
        elapsed += result.duration_s
        if result.oom:
            return True, elapsed
        if not engine.running and not engine.waiting:
            return False, elapsed
    raise AssertionError("engine did not drain")


def burst(engine: Engine, count: int = 64, tokens: int = 16000) -> None:
    for i in range(count):
        engine.add(Sequence(f"long-{i}", tokens + 50, 64, prefix_id="doc", prefix_tokens=tokens))


def test_kv_pool_is_sized_from_gpu_memory_utilization() -> None:
    # (0.95 * 24 GiB - 14 GiB) / (16 tokens * 32 KiB) blocks
    assert UNSAFE.num_gpu_blocks == int((0.95 * 24 * GIB - 14 * GIB) // (16 * 32 * 1024))
    assert TUNED.num_gpu_blocks < UNSAFE.num_gpu_blocks


def test_unsafe_settings_can_outgrow_the_memory_limit_and_tuned_cannot() -> None:
    assert UNSAFE.host_peak_bytes > UNSAFE.memory_limit_bytes
    assert TUNED.host_peak_bytes < TUNED.memory_limit_bytes


def test_long_context_burst_oom_kills_unsafe_settings() -> None:
    engine = Engine(UNSAFE)
    burst(engine)
    oom, _ = drain(engine)
    assert oom


def test_tuned_settings_survive_the_same_burst() -> None:
    engine = Engine(TUNED)
    burst(engine)
    oom, _ = drain(engine)
    assert not oom
    assert engine.free_blocks == engine.total_blocks  # everything released


def test_prefix_caching_shares_the_document_blocks() -> None:
    shared = Engine(EngineConfig(enable_prefix_caching=True))
    private = Engine(EngineConfig(enable_prefix_caching=False))
    for engine in (shared, private):
        burst(engine, count=4, tokens=1600)
        engine.step()
    assert len(shared.running) == len(private.running) == 4
    assert shared.used_blocks < private.used_blocks / 3


def test_max_num_seqs_bounds_the_running_batch() -> None:
    engine = Engine(EngineConfig(max_num_seqs=8))
    for i in range(20):
        engine.add(Sequence(f"r{i}", 100, 10))
    engine.step()
    assert len(engine.running) == 8 and len(engine.waiting) == 12


def test_a_full_cache_preempts_the_newest_request() -> None:
    config = EngineConfig(gpu_memory_utilization=0.6, memory_limit_bytes=100 * GIB)  # tiny pool, no OOM
    engine = Engine(config)
    blocks = config.num_gpu_blocks
    for i in range(3):
        engine.add(Sequence(f"r{i}", (blocks // 3) * config.block_size - 1, 10_000))
    preempted = []
    for _ in range(200):
        preempted += engine.step().preempted
    assert preempted and preempted[0] == "r2"
    assert engine.preemptions == len(preempted)


def test_step_time_grows_with_the_batch_and_prefill() -> None:
    small, large = Engine(EngineConfig()), Engine(EngineConfig())
    small.add(Sequence("a", 10, 5))
    for i in range(100):
        large.add(Sequence(f"b{i}", 400, 5))
    assert large.step().duration_s > small.step().duration_s


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="gpu-memory-utilization"):
        EngineConfig(gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="no memory for the KV cache"):
        _ = EngineConfig(gpu_memory_utilization=0.5).num_gpu_blocks
