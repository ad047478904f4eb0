"""The demo engine's prefix cache: shared while running, kept after (counted free), evicted oldest first."""

from __future__ import annotations

from kfchaos.demo.server.engine import Engine, EngineConfig, Sequence
from kfchaos.demo.server.prefixcache import paragraph_prefixes

BLOCK = 16


def turn(engine: Engine, name: str, prompt: str, max_tokens: int = 4) -> Sequence:
    seq = Sequence(name, len(prompt) // 4, max_tokens, prefixes=paragraph_prefixes(prompt, 4))
    engine.add(seq)
    return seq


def drain(engine: Engine) -> None:
    for _ in range(10_000):
        if not engine.running and not engine.waiting:
            return
        engine.step()
    raise AssertionError("engine did not drain")


SYSTEM = "s" * 4000  # 1000 tokens
Q0, A0, Q1 = "q" * 400, "a" * 400, "r" * 400


def test_a_later_turn_finds_the_earlier_turn_cached_after_it_finished() -> None:
    engine = Engine(EngineConfig(enable_prefix_caching=True))
    turn(engine, "t0", f"{SYSTEM}\n\n{Q0}")
    drain(engine)
    # Finished: its blocks are free again (KV usage 0), but its prompt is still cached.
    assert engine.free_blocks == engine.total_blocks and engine.kv_cache_usage == 0
    assert engine.prefix_cache.evictable_blocks == (4000 + 2 + 400) // 4 // BLOCK
    queried, hit = engine.prefix_queries, engine.prefix_hits
    assert hit == 0
    second = turn(engine, "t1", f"{SYSTEM}\n\n{Q0}\n\n{A0}\n\n{Q1}")
    engine.step()
    # The whole first prompt (system prompt and question) is a hit: its full blocks.
    assert engine.prefix_hits - hit == (4000 + 2 + 400) // 4 // BLOCK * BLOCK
    assert engine.prefix_queries - queried == second.prompt_tokens
    drain(engine)
    assert engine.free_blocks == engine.total_blocks


def test_shared_prefixes_are_held_once_while_running() -> None:
    engine = Engine(EngineConfig(enable_prefix_caching=True))
    for i in range(4):
        turn(engine, f"r{i}", f"{SYSTEM}\n\nquestion {i}", max_tokens=50)
    engine.step()
    system_blocks = 1000 // BLOCK
    # One copy of the system prompt's blocks, plus each request's own (its question and the decode block).
    assert engine.used_blocks < system_blocks + 4 * 3
    assert engine.prefix_hits == 3 * system_blocks * BLOCK  # the first request missed, three hit


def test_cached_prefixes_are_evicted_oldest_first_when_blocks_are_needed() -> None:
    config = EngineConfig(enable_prefix_caching=True, gpu_memory_utilization=0.6, memory_limit_bytes=10**12)
    engine = Engine(config)
    total = engine.total_blocks
    doc_tokens = (total // 4) * BLOCK
    for name in ("old", "new"):
        turn(engine, name, name[0] * (doc_tokens * 4) + f"\n\n{name}")
        drain(engine)
    assert engine.prefix_cache.evictable_blocks >= 2 * (total // 4)
    # A request needing more than the free blocks not cached: the oldest prefix goes first.
    turn(engine, "big", "y" * ((total - total // 4 - 20) * BLOCK * 4), max_tokens=1)
    engine.step()
    kept = [engine.prefix_cache.cached_depth(engine._chain(Sequence(n, doc_tokens + 1, 1, prefixes=paragraph_prefixes(
        n[0] * (doc_tokens * 4) + f"\n\n{n}", 4)))) for n in ("old", "new")]  # fmt: skip
    assert kept == [0, 1]
    drain(engine)
    assert engine.free_blocks == engine.total_blocks


def test_no_prefix_caching_no_queries_and_nothing_kept() -> None:
    engine = Engine(EngineConfig(enable_prefix_caching=False))
    turn(engine, "t0", f"{SYSTEM}\n\n{Q0}")
    drain(engine)
    turn(engine, "t1", f"{SYSTEM}\n\n{Q0}\n\n{A0}\n\n{Q1}")
    drain(engine)
    assert engine.prefix_queries == engine.prefix_hits == 0 and len(engine.prefix_cache) == 0


def test_prefix_names_chain_like_block_hashes() -> None:
    first = paragraph_prefixes("sys\n\nq0", 1)
    later = paragraph_prefixes("sys\n\nq0\n\na0\n\nq1", 1)
    assert later[: len(first)] == first  # turn 2 resends turn 1's whole prompt: the same names
    assert paragraph_prefixes("other\n\nq0", 1)[1] != first[1]  # same paragraph after a different one: not shared
    assert len(paragraph_prefixes("\n\n" * 100_000, 1)) == 1025  # bounded work for a hostile prompt
