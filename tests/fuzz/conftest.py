"""Hypothesis profiles for the fuzz suite.

`ci` (the default): a fixed, derandomized budget, so `make test` runs the same cases every time and the whole
fuzz suite stays under about a minute. `fuzz` (`make fuzz`, or HYPOTHESIS_PROFILE=fuzz): many more cases, random
seeds, for a person hunting bugs. Each test asks for its CI budget through `harness.budget(n)`; the fuzz
profile multiplies it by `harness.FUZZ_SCALE`.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from tests.fuzz.harness import PROFILE

_COMMON = {
    # Hostile inputs are big on purpose and some readers are slow to start (pyarrow); the time bound is
    # enforced by the harness (tests/fuzz/harness.py), not by hypothesis' per-example deadline.
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    "print_blob": True,
}
settings.register_profile("ci", derandomize=True, database=None, **_COMMON)
settings.register_profile("fuzz", **_COMMON)
settings.load_profile(PROFILE if PROFILE in ("ci", "fuzz") else "ci")
