"""Load the run did not send (docs/verdict.md, "Load the run did not send"): the server's own count of finished
requests over a stage against what the run itself could have made it finish.

Another client's traffic on the target during a stage is in every latency the run measured: a FAIL it causes is
blamed on the fault, a PASS it rides along with was measured on a server that was not the one the experiment
describes. The lease (kfchaos.lease) keeps other kfchaos runs away; this check sees everyone else.

The server counts each finished request once (vLLM observes `vllm:e2e_request_latency_seconds` per finished
request: vllm-project/vllm vllm/v1/metrics/loggers.py; kfchaos.metrics.served differences it per series). Over
the stage's window the run's share is bounded from above: every record of the run (any stage, the fault's own
requests included) sent by the window's end and not finished before its start, widened by one collector step
and one scrape interval for the sample times Prometheus reads the counter at. What the server counted beyond
that bound was sent by someone else. The target's normal traffic is what its baseline saw it serve (the median
interval's requests per second, `Baseline.precision`: captured from the target's own series); a run against a
server with users rides along with them. Load beyond that normal traffic (and beyond a tolerance for counts
that arrive late) is reported: a non-gating check that says how much and a warning on the verdict. It does not
change the verdict: the server's count cannot say whose requests were slow, and a staging server's normal
traffic is a guess until its baseline is captured there (the threshold is kfchaos's own, not a peer's).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from kfchaos.baseline import Baseline
from kfchaos.metrics import names
from kfchaos.metrics.served import COUNTER
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.verdict.model import Check, Status
from kfchaos.verdict.requests import Requests

NAME = "foreign_load"
# Requests the server may count beyond the run's bound without a report: the bound's edges (a scrape that lands
# just after a request finished) and the server's own probes. A guess, stated in docs/verdict.md.
MIN_FOREIGN = 10
FOREIGN_SHARE = 0.10  # ... or this share of the run's own requests in the window, whichever is larger


def normal_rate(baseline: Baseline | None) -> float | None:
    """Requests per second the target served in its baseline's median interval; None when not recorded."""
    precision = baseline.precision if baseline is not None else None
    if precision is None or precision.intervals == 0:
        return None
    return precision.requests_median / precision.step


def foreign_load_check(
    requests: Requests, stage: NDArray[np.bool_], metrics: MetricsSnapshot | None, baseline: Baseline | None
) -> Check | None:
    """The check for the rows of `stage`; None without the server's counter (not vLLM, no metrics, unreachable:
    the metrics_window check says so)."""
    if metrics is None or metrics.unreachable or not stage.any() or metrics.missing(names.SERVER_REQUESTS):
        return None
    counted = metrics.series[names.SERVER_REQUESTS]
    intended, latency = requests.intended[stage], requests.latency[stage]
    finished = np.where(np.isfinite(latency), requests.sent[stage] + latency, intended)
    start, end = float(np.nanmin(intended)), float(np.nanmax(finished))
    server = counted.increase(start, end)
    if server is None:
        return None  # metrics_window says the metrics hold no count around the stage
    step = float(np.median(np.diff(counted.times))) if len(counted.times) > 1 else 0.0
    earliest = start - step - metrics.grace
    sent = requests.was_sent()
    done_at = requests.sent + np.where(np.isfinite(requests.latency), requests.latency, np.inf)
    own = int(np.count_nonzero(sent & (requests.sent <= end) & (done_at > earliest)))
    window = end - earliest
    foreign = max(0.0, server - own)
    rate = normal_rate(baseline)
    normal = (rate or 0.0) * window
    allowed = normal + max(MIN_FOREIGN, FOREIGN_SHARE * own)
    details: dict[str, object] = {
        "server_finished": server,
        "run_requests_bound": own,
        "foreign": foreign,
        "window_s": window,
        "normal_rate": rate,
        "allowed": allowed,
    }
    said = (
        f"the server ({COUNTER}) finished {server:.0f} requests in the stage's window, the run sent at most {own} of "
        f"them: {foreign:.0f} from other clients ({foreign / window:.3g}/s)"
    )
    normal_said = (
        "the baseline records no normal traffic" if rate is None else f"the target's normal traffic {rate:.3g}/s"
    )
    if foreign > allowed:
        reason = (
            f"{said}, beyond {normal_said} (its baseline): another client's load is in this stage's latencies, and "
            "neither the fault nor the run made it"
        )
        return Check(NAME, Status.INCONCLUSIVE, reason, foreign, allowed, samples=own, gating=False, details=details)
    return Check(
        NAME, Status.PASS, f"{said}, within {normal_said}", foreign, allowed, samples=own, gating=False, details=details
    )
