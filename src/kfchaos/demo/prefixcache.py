"""The demo engine's prefix cache (`--enable-prefix-caching`): cached prefix blocks outlive their requests
until the free pool reaches them, as in vLLM.

vLLM (vllm-project/vllm vllm/v1/core/block_pool.py, `BlockPool`): free blocks wait in one queue,
`free_block_queue`, "in eviction order"; allocation pops from its head and, when the popped block still
carries a prefix hash, evicts it from the cache (`_maybe_evict_cached_block`). A finished request's blocks are
appended at the tail, its last blocks first (`free_blocks`: "ordered by their eviction priority"), so its
prefix blocks are evicted after its private ones. A new request that finds its prefix cached while the blocks
wait in the queue takes them back out (`touch`), and the blocks of a prefix some running request holds are
never in the queue. Free cached blocks count as free: `vllm:kv_cache_usage_perc` leaves them out.
The counters (vllm/v1/metrics/loggers.py): `vllm:prefix_cache_queries` "in terms of number of queried tokens",
`vllm:prefix_cache_hits` "in terms of number of cached tokens" (`vllm:gpu_prefix_cache_*` before 0.9),
counted only with prefix caching on.

Simplifications: a prefix (everything before the prompt's last blank line, kfchaos.demo.server) is cached and
evicted as a whole, so a partly evicted prefix is a miss (vLLM would still hit its first blocks). vLLM counts a
query each time the scheduler looks a waiting request up (it may look again after a failed allocation); the
demo counts once per admission, preempted requests again when they are admitted again -- a guess on the low
side of the queries.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

# A stretch of the free queue: [prefix id or None for plain blocks, block count].
Segment = list


@dataclass
class _Entry:
    blocks: int
    refs: int = 0
    segment: Segment | None = None  # its place in the free queue while no request holds it


class PrefixCache:
    def __init__(self, total_blocks: int) -> None:
        self._queue: deque[Segment] = deque([[None, total_blocks]])
        self._entries: dict[str, _Entry] = {}
        self.queries = 0  # tokens looked up
        self.hits = 0  # tokens found cached
        self.evictions = 0  # prefixes evicted

    def __contains__(self, prefix_id: object) -> bool:
        return prefix_id in self._entries

    def pool_cost(self, prefix_id: str | None, blocks: int) -> int:
        """Blocks the prefix takes out of the free pool: none when a running request already holds it."""
        entry = self._entries.get(prefix_id or "")
        return 0 if entry is not None and entry.refs > 0 else blocks

    def acquire(self, prefix_id: str | None, blocks: int, prompt_tokens: int, block_size: int) -> bool:
        """Admit a request: count the lookup, take its prefix (touching it or filling new blocks). True: a hit."""
        self.queries += prompt_tokens
        if not blocks or prefix_id is None:
            return False
        entry = self._entries.get(prefix_id)
        if entry is not None:
            if entry.segment is not None:  # waiting in the free queue: take it back out (vLLM `touch`)
                entry.segment[0], entry.segment[1] = None, 0
                entry.segment = None
            entry.refs += 1
            self.hits += blocks * block_size
            return True
        self.take(blocks)
        self._entries[prefix_id] = _Entry(blocks, refs=1)
        return False

    def release(self, prefix_id: str | None) -> int:
        """A request that held the prefix is done; returns the blocks that went back to the free queue."""
        entry = self._entries.get(prefix_id or "")
        if entry is None:
            return 0
        entry.refs -= 1
        if entry.refs > 0:
            return 0
        entry.segment = [prefix_id, entry.blocks]
        self._queue.append(entry.segment)
        return entry.blocks

    def give(self, blocks: int) -> None:
        """Plain blocks back to the tail of the free queue."""
        if blocks <= 0:
            return
        tail = self._queue[-1] if self._queue else None
        if tail is not None and tail[0] is None:
            tail[1] += blocks
        else:
            self._queue.append([None, blocks])

    def take(self, blocks: int) -> None:
        """Pop `blocks` from the head of the free queue, evicting the cached prefixes met on the way."""
        while blocks > 0 and self._queue:
            head = self._queue[0]
            if head[0] is not None:  # a cached prefix reaches the head: evicted (vLLM `_maybe_evict_cached_block`)
                del self._entries[head[0]]
                head[0] = None
                self.evictions += 1
            used = min(blocks, head[1])
            head[1] -= used
            blocks -= used
            if head[1] == 0:
                self._queue.popleft()


class PrefixMetrics:
    """vLLM's prefix-cache counters on the server's registry, fed from the engine's totals."""

    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        labels = ["model_name"]
        self._queries = Counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in queried tokens", labels, registry=registry
        ).labels(model)
        self._hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in cached tokens", labels, registry=registry
        ).labels(model)
        self._seen = (0, 0)

    def update(self, cache: PrefixCache | None) -> None:
        if cache is None:
            return
        queries, hits = self._seen
        self._queries.inc(cache.queries - queries)
        self._hits.inc(cache.hits - hits)
        self._seen = (cache.queries, cache.hits)
