"""The demo engine's automatic prefix cache, modelled on vLLM's (v1) block pool.

vLLM (vllm/v1/core/block_pool.py, kv_cache_manager.py, kv_cache_utils.py): every full block of a prompt is
hashed together with its parent block's hash, so a block is shared by every prompt with the same tokens up to
it; a request's computed prefix is the longest run of cached blocks from the start. Freed blocks (reference
count 0) go to the tail of the free queue *with* their hash, and stay hits until the allocator takes them from
the head of the queue and evicts them (`_maybe_evict_cached_block`): a cached block counts as free (the KV
usage gauge does not count it), and the least recently freed are reused first.

Here a prompt is split at its paragraphs (the text up to each `\\n\\n`), not at token blocks: a prompt is a
chain of prefixes, each named by the hash of the text up to it, each adding the full blocks it covers beyond
the one before. A conversation's turn k+1 therefore finds turn k's prefixes (its system prompt and history)
cached even after turn k finished, as on vLLM. Simplifications, said plainly: the unit is a paragraph, not a
16-token block (a prompt shares nothing within a paragraph it does not share whole), and a prefix is evicted
whole; the generated tokens are not cached (vLLM caches the full blocks of the output too; kfchaos's
open-loop conversations never resend them).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

# A prompt's prefixes: (name, full blocks from the start of the prompt up to the end of that prefix).
Chain = tuple[tuple[str, int], ...]
MAX_PREFIXES = 1024  # paragraph breaks looked at per prompt: a prompt of a million blank lines costs no more


def paragraph_prefixes(prompt: str, chars_per_token: int) -> tuple[tuple[str, int], ...]:
    """(name, tokens) of the prompt's text up to each paragraph break (`\n\n`) and of the whole prompt, shortest
    first (vLLM caches every full block of a prompt, so the next turn of a conversation, which resends this
    prompt, finds all of it). The name is a hash of that text, computed incrementally: linear in the prompt,
    as vLLM chains each block's hash to its parent's."""
    digest = hashlib.sha1(usedforsecurity=False)
    out: list[tuple[str, int]] = []
    start = 0
    while len(out) < MAX_PREFIXES and (end := prompt.find("\n\n", start)) != -1:
        digest.update(prompt[start:end].encode("utf-8", "surrogatepass"))
        out.append((digest.copy().hexdigest(), end // chars_per_token))
        digest.update(b"\n\n")
        start = end + 2
    digest.update(prompt[start:].encode("utf-8", "surrogatepass"))
    out.append((digest.hexdigest(), len(prompt) // chars_per_token))
    return tuple(out)


@dataclass
class _Entry:
    blocks: int  # full blocks this prefix adds over the one before it in its chain
    holders: int = 0  # running requests whose prompt contains it


class PrefixCache:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._evictable: OrderedDict[str, None] = OrderedDict()  # held by none, least recently freed first
        self.evictable_blocks = 0  # cached but free: the engine counts them as free, as vLLM's free queue holds them
        self.used_blocks = 0  # blocks of prefixes a running request holds

    def cached_depth(self, chain: Chain) -> int:
        """How many of the chain's prefixes are cached: a run from the start (a prefix whose shorter one was
        evicted is unreachable, as a vLLM block whose parent hash is gone)."""
        depth = 0
        for name, _ in chain:
            if name not in self._entries:
                break
            depth += 1
        return depth

    def cost(self, chain: Chain) -> tuple[int, int]:
        """(blocks the prompt finds cached, blocks it takes from the free pool): the new prefixes' blocks plus
        the cached ones that are free now (evictable) and become used again."""
        depth = self.cached_depth(chain)
        hit = chain[depth - 1][1] if depth else 0
        revived = sum(self._entries[name].blocks for name, _ in chain[:depth] if name in self._evictable)
        new = chain[-1][1] - hit if chain else 0
        return hit, revived + new

    def acquire(self, chain: Chain) -> None:
        """Hold the chain for a running request: its cached prefixes (revived when free) and new ones."""
        depth = self.cached_depth(chain)
        before = 0
        for i, (name, blocks) in enumerate(chain):
            if i >= depth:
                self._drop(name)  # an unreachable leftover of the same text: replaced
                self._entries[name] = _Entry(blocks - before)
            entry = self._entries[name]
            if name in self._evictable:
                del self._evictable[name]
                self.evictable_blocks -= entry.blocks
            if entry.holders == 0:
                self.used_blocks += entry.blocks
            entry.holders += 1
            before = blocks

    def release(self, chain: Chain) -> None:
        """A request holding the chain ended or was preempted. Its prefixes nobody else holds become evictable,
        longest first (vLLM frees a request's blocks tail first, so they are evicted before the shared start)."""
        for name, _ in reversed(chain):
            entry = self._entries[name]
            entry.holders -= 1
            if entry.holders == 0:
                self.used_blocks -= entry.blocks
                self._evictable[name] = None
                self.evictable_blocks += entry.blocks

    def evict(self, blocks: int) -> int:
        """Evict least recently freed prefixes until at least `blocks` blocks are reclaimed (or none is left);
        the blocks reclaimed."""
        reclaimed = 0
        while reclaimed < blocks and self._evictable:
            name = next(iter(self._evictable))
            reclaimed += self._drop(name)
        return reclaimed

    def _drop(self, name: str) -> int:
        entry = self._entries.pop(name, None)
        if entry is None:
            return 0
        if self._evictable.pop(name, False) is None:
            self.evictable_blocks -= entry.blocks
        return entry.blocks

    def __len__(self) -> int:
        return len(self._entries)
