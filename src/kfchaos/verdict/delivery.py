"""Did a traffic-side fault planned for a stage reach the server? A stage's SLOs pass or fail on what the fault
did to the other traffic; a fault whose requests never arrived did nothing, and a PASS would claim the server
survived a fault it never saw (the same rule as a cluster fault's verified activity, kfchaos.faults.activity).

- Every fault made of requests must have had at least one answered by the server (an HTTP status) or, for a
  client-abort storm, sent and cut off by the client: else INCONCLUSIVE.
- A load fault (long-context burst, batch shock, prefix-cache thrash) loads the server only with requests it
  accepts: when not one of them was answered 2xx (vLLM answers a prompt over --max-model-len with a 400 before
  scheduling it), the KV cache, the batch and the prefix cache never saw it: INCONCLUSIVE.
The records carry one flag for "sent by a traffic-side fault", not which one, so with several such faults in a
stage the counts are theirs together (said in the reason).
"""

from __future__ import annotations

import numpy as np

from kfchaos.spec import Experiment
from kfchaos.verdict.model import Check, Status
from kfchaos.verdict.requests import CLIENT_ABORT, Requests

REQUEST_FAULTS = {"long-context-burst", "tokenizer-stress", "batch-shock", "prefix-cache-thrash", "client-abort-storm"}
LOAD_FAULTS = {"long-context-burst", "batch-shock", "prefix-cache-thrash"}


def fault_requests_check(experiment: Experiment, stage: int, stage_requests: Requests) -> Check | None:
    """The stage's fault_requests check: how many requests its traffic-side faults sent and the server answered;
    None when the stage has none planned and none were sent."""
    planned = [f for f in experiment.spec.faults if f.type in REQUEST_FAULTS and stage in experiment.fault_stages(f)]
    mine = stage_requests.where(stage_requests.injected)
    sent = int(np.count_nonzero(mine.was_sent()))
    if not planned and not len(mine):
        return None
    answered = int(np.count_nonzero(~np.isnan(mine.status)))
    aborted = int(np.count_nonzero(mine.error == CLIENT_ABORT))
    served = int(np.count_nonzero((mine.status >= 200) & (mine.status < 300)))
    names = ", ".join(f"{f.name} ({f.type})" for f in planned) or "traffic-side faults"
    counts = f"{len(mine)} planned, {sent} sent, {answered} answered ({served} 2xx), {aborted} cut off by the client"
    together = " (counted together)" if len(planned) > 1 else ""
    if planned and answered + aborted == 0:
        reason = f"{names}: none of its requests reached the server{together}: {counts}"
        return Check("fault_requests", Status.INCONCLUSIVE, reason, float(answered), samples=len(mine))
    loads = [f.name for f in planned if f.type in LOAD_FAULTS]
    if loads and served == 0:
        reason = (
            f"{', '.join(loads)}: the server accepted none of its requests (no 2xx), so it put no load on it"
            f"{together}: {counts}"
        )
        return Check("fault_requests", Status.INCONCLUSIVE, reason, float(served), samples=len(mine))
    reason = f"{names}{together}: {counts}; left out of the SLO and replay-fidelity checks: they are the fault"
    return Check("fault_requests", Status.PASS, reason, float(len(mine)), samples=len(mine), gating=False)
