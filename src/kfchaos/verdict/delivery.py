"""Did each traffic-side fault planned for a stage reach the server? A stage's SLOs pass or fail on what the
fault did to the other traffic; a fault whose requests never arrived did nothing, and a PASS would claim the
server survived a fault it never saw (the same rule as a cluster fault's verified activity,
kfchaos.faults.activity).

- A fault made of requests must have had at least one answered by the server (an HTTP status) or, for a
  client-abort storm, sent and cut off by the client: else INCONCLUSIVE.
- A load fault (long-context burst, batch shock, prefix-cache thrash) loads the server only with requests it
  accepts: when not one of them was answered 2xx (vLLM answers a prompt over --max-model-len with a 400 before
  scheduling it), the KV cache, the batch and the prefix cache never saw it: INCONCLUSIVE.
Each fault's requests are told apart by the records' fault_request (its name). Records without that column
(schema 1: long-context bursts flagged by long_context only) are counted together.
"""

from __future__ import annotations

import numpy as np

from kfchaos.faultspec.kinds import KINDS
from kfchaos.spec import Experiment, FaultBase
from kfchaos.verdict.model import Check, Status
from kfchaos.verdict.requests import CLIENT_ABORT, Requests

# From the table of fault kinds: whose requests the check judges, and which of those must also have been served.
REQUEST_FAULTS = frozenset(kind.name for kind in KINDS if kind.delivery in ("requests", "load"))
LOAD_FAULTS = frozenset(kind.name for kind in KINDS if kind.delivery == "load")


def _counts(mine: Requests) -> tuple[str, int, int, int]:
    """(summary, answered, cut off by the client, 2xx) of one fault's requests."""
    sent = int(np.count_nonzero(mine.was_sent()))
    answered = int(np.count_nonzero(~np.isnan(mine.status)))
    aborted = int(np.count_nonzero(mine.error == CLIENT_ABORT))
    served = int(np.count_nonzero((mine.status >= 200) & (mine.status < 300)))
    summary = f"{len(mine)} planned, {sent} sent, {answered} answered ({served} 2xx), {aborted} cut off by the client"
    return summary, answered, aborted, served


def _problem(fault: FaultBase, mine: Requests) -> tuple[str | None, str]:
    """(why the fault was not seen working, or None; its counts)."""
    summary, answered, aborted, served = _counts(mine)
    if answered + aborted == 0:
        return "none of its requests reached the server", summary
    if fault.type in LOAD_FAULTS and served == 0:
        return "the server accepted none of its requests (no 2xx), so it put no load on it", summary
    return None, summary


def fault_requests_check(experiment: Experiment, stage: int, fault_requests: Requests) -> Check | None:
    """The stage's fault_requests check from the requests its traffic-side faults sent: for each fault planned
    for it, how many it sent and the server answered; None when the stage has none planned and none were sent."""
    planned = [f for f in experiment.spec.faults if f.type in REQUEST_FAULTS and stage in experiment.fault_stages(f)]
    total = len(fault_requests)
    if not planned and not total:
        return None
    named = bool(fault_requests.fault_names) or not total
    problems, lines = [], []
    for fault in planned:
        mine = fault_requests.where(fault_requests.sent_by(fault.name)) if named else fault_requests
        problem, summary = _problem(fault, mine)
        label = f"{fault.name} ({fault.type})" + ("" if named else ", traffic-side faults counted together")
        lines.append(f"{label}: {summary}")
        if problem:
            problems.append(f"{label}: {problem}: {summary}")
    if problems:
        return Check("fault_requests", Status.INCONCLUSIVE, "; ".join(problems), float(total), samples=total)
    reason = "; ".join(lines) or f"{total} request(s) sent by traffic-side faults"
    reason += "; left out of the SLO and replay-fidelity checks: they are the fault"
    return Check("fault_requests", Status.PASS, reason, float(total), samples=total, gating=False)
