"""Benchmarks (`make bench`): each `bench_*.py` here has `run() -> None`, printing its figures and the
ratio against a reference measured in the same run. Never timed assertions in tests."""
