"""The verdict tests' shared real world (tests/verdict/world.py): started once, for the tests that ask for it."""

from tests.verdict.world import world

__all__ = ["world"]
