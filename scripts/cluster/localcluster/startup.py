"""Starting the local cluster as a list of named steps, as kind creates a cluster (kubernetes-sigs/kind,
pkg/cluster/internal/create/create.go: a list of actions, each behind one interface, run in order with a status
line each). Each step here is one function of the shared `Boot` record; `run` prints the step it starts, times it
into `<state>/up-steps.tsv` (name, seconds) and names the step in the error of one that fails, so a slow or broken
start says where. Building is not a step: the binaries (build.sh) and the node's images (images.py) are cached by
their inputs and cost nothing once built.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

B = TypeVar("B")


@dataclass(frozen=True)
class Step(Generic[B]):
    name: str
    run: Callable[[B], None]


def run(steps: Sequence[Step[B]], boot: B, state: Path, *, fail: type[Exception]) -> None:
    """Run the steps in order on `boot`; the error of a failing one is raised again as `fail`, naming the step."""
    timings = state / "up-steps.tsv"
    for number, step in enumerate(steps, 1):
        where = f"[{number}/{len(steps)}] {step.name}"
        print(f"localcluster: {where}", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            step.run(boot)
        except Exception as error:
            raise fail(f"{where}: {error}") from error
        with timings.open("a") as out:
            out.write(f"{step.name}\t{time.monotonic() - started:.2f}\n")
