"""Stage-start component (sharded stages)."""
