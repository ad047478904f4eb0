"""Deterministic stage sampling and shard partition, both from one hash of (seed, request id).

A request's `unit` is a number in [0, 1) fixed by its id and the seed; a stage at fraction f keeps the
requests with unit < f. So a rerun with the same seed keeps the same requests, and the 30 % subset
contains the 10 % subset (unit < 0.1 implies unit < 0.3). The shard index comes from other bits of the
same digest, so each shard's share of a stage is an independent, even split, and the shards of one
stage are disjoint and together complete.
"""

from __future__ import annotations

from hashlib import blake2b

_SCALE = float(1 << 64)


def _digest(request_id: str, seed: int) -> bytes:
    return blake2b(f"{seed}\x00{request_id}".encode(), digest_size=16).digest()


def unit(request_id: str, seed: int) -> float:
    """The request's position in [0, 1): kept by every stage whose fraction is above it."""
    return int.from_bytes(_digest(request_id, seed)[:8], "big") / _SCALE


def shard_of(request_id: str, seed: int, shards: int) -> int:
    return int.from_bytes(_digest(request_id, seed)[8:], "big") % shards


def select(request_id: str, seed: int, fraction: float, shard: int = 0, shards: int = 1) -> bool:
    """Whether this request belongs to the stage (fraction of all requests) and to this shard."""
    digest = _digest(request_id, seed)
    if int.from_bytes(digest[:8], "big") / _SCALE >= fraction:
        return False
    return shards == 1 or int.from_bytes(digest[8:], "big") % shards == shard
