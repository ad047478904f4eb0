"""Cleanup component (the exit handler)."""
