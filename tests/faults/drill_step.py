"""A pipeline step that misbehaves, for the failure drills: `python -m tests.faults.drill_step URL MODE RUN_ID`.

crash: apply every fault, then die without cleaning up (os._exit, as an OOM-killed or evicted step would).
wait: apply every fault, then wait for injection until killed (the drill sends SIGTERM).
apply: apply every fault and exit normally, printing the uids (a retried step).
"""

from __future__ import annotations

import os
import sys

from tests.faults.conftest import make_backend, manifests


def main(url: str, mode: str, run_id: str) -> None:
    backend = make_backend(url)
    handles = [backend.apply(manifest) for manifest in manifests(run_id)]
    print("applied " + " ".join(h.uid for h in handles), flush=True)
    if mode == "crash":
        os._exit(17)
    if mode == "wait":
        for handle in handles:
            backend.wait_injected(handle, timeout=120)


if __name__ == "__main__":
    main(*sys.argv[1:4])
