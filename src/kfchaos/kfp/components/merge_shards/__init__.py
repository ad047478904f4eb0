"""Merge-shards component (sharded stages)."""
