"""The pipeline's replay step in a process of its own, as a component runs it in its pod:
`python -m tests.hostile.stage_step EXPERIMENT TARGET RUN_ID STAGE RECORDS`. The fault backend comes from the
environment (kfchaos.steps.seams), as in a pod. Prints the step's JSON output when it ends normally.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kfchaos.steps import stages


def main(experiment: str, target: str, run_id: str, stage: str, records: str) -> None:
    path = Path(experiment)
    print(stages.replay(path.read_text(), str(path.parent), target, run_id, int(stage), records), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
