"""Counts, per process, the experiment parses and fault renders of a whole pipeline run (issue 44: one parse per step).

Put this folder first on PYTHONPATH of a `kfchaos run --local` and set KFCHAOS_TEST_PARSE_LOG=FILE: Python imports
`sitecustomize` at start-up in every process (the run's and each kfp.local task's, which inherit the environment),
and this wraps `kfchaos.validate.parse_experiment` and `kfchaos.faults.render.render_fault` before anything else
imports them, appending `<pid> <task> parse|render` to FILE. The task is kfp.local's `--function_to_execute`
argument (the component), or `cli` for the kfchaos command itself.
"""

from __future__ import annotations

import os
import sys

LOG = os.environ.get("KFCHAOS_TEST_PARSE_LOG")


def _task() -> str:
    argv = sys.argv
    if "--function_to_execute" in argv:
        return argv[argv.index("--function_to_execute") + 1]
    return "cli"


def _counted(function, event):  # type: ignore[no-untyped-def]
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        with open(LOG, "a") as log:  # type: ignore[arg-type]
            log.write(f"{os.getpid()} {_task()} {event}\n")
        return function(*args, **kwargs)

    return wrapper


if LOG:
    from kfchaos.faults import render  # first: kfchaos.validate binds render_fault when it is imported

    render.render_fault = _counted(render.render_fault, "render")
    from kfchaos import validate

    validate.parse_experiment = _counted(validate.parse_experiment, "parse")
