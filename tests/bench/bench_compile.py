"""Compile cost: `kfchaos compile` work (every pipeline, sealed, plus every component) against a reference
measured in the same run -- the KFP compiler on a one-task pipeline -- so the ratio says what our pipeline
shape costs relative to KFP's fixed overhead."""

# No `from __future__ import annotations`: KFP reads the component signature's annotations as types.

import statistics
import tempfile
import time
from pathlib import Path

from kfp import compiler, dsl

from kfchaos.kfp.compile import compile_target, component_outputs, discover
from tests.conftest import ROOT

REPEATS = 5


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def _noop() -> None:
    pass


@dsl.pipeline(name="reference")
def _reference() -> None:
    _noop()


def _best(work: object) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        work()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        reference = _best(lambda: compiler.Compiler().compile(_reference, str(Path(tmp) / "r.yaml")))
    targets = discover(ROOT)
    per_pipeline = [_best(lambda t=t: compile_target(t)) for t in targets]
    components = _best(lambda: component_outputs(ROOT))
    total = sum(per_pipeline) + components
    print(f"reference (1-task pipeline)      {reference * 1000:8.1f} ms")
    for target, seconds in zip(targets, per_pipeline, strict=True):
        print(f"{target.name:32s} {seconds * 1000:8.1f} ms  ({seconds / reference:5.1f}x reference)")
    print(f"11 component.yaml files           {components * 1000:8.1f} ms")
    print(f"all (what `kfchaos compile` does) {total * 1000:8.1f} ms  ({total / reference:5.1f}x reference)")
    print(f"median pipeline                   {statistics.median(per_pipeline) * 1000:8.1f} ms")
