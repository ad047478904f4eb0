"""Replay-shard component (sharded stages)."""
