"""The metrics window's cross-check when the server restarted inside it (kfchaos.metrics.served, kfchaos.verdict.clock).

On the real node, the real vLLM engine OOM-killed mid-stage took the counts it had made since its last scrape with it
(Prometheus counted 686 finished requests against the records' 773 completions, tests/cluster/node/test_vllm_node.py),
which the check read as clocks that disagree. The collector now keeps where the server's counter dropped; the
completions in the scrape interval before each drop are not held against the server, and a shortfall beyond them
still is."""

from __future__ import annotations

import numpy as np

from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.served import served
from kfchaos.metrics.source import RangeSeries, Sample
from kfchaos.verdict.clock import metrics_window_check
from kfchaos.verdict.model import Status
from kfchaos.verdict.requests import Requests

SCRAPE = 15.0  # the scrape interval: Prometheus's samples, held between scrapes as a range query shows them
STEP = 5.0
FINISHED = np.arange(1.0, 91.0, 0.1)  # 900 completions, 10 a second, in 1..91 s


def requests() -> Requests:
    n = len(FINISHED)
    nan = np.full(n, np.nan)
    sent = FINISHED - 0.05
    return Requests(
        stage=np.full(n, 100, dtype=np.int16), intended=sent, sent=sent, status=np.full(n, 200.0),
        error=np.full(n, -1, dtype=np.int8), latency=np.full(n, 0.05), ttft=nan, itl_p99=nan, tpot=nan,
        fault_active=np.zeros(n, bool), injected=np.zeros(n, bool),
    )  # fmt: skip


class Counter:
    """A Prometheus holding vLLM's finished-request counter of one pod: a process killed at `killed_at` was last
    scraped before it; its successor starts from 0 at `restarted_at` and counts what finishes after, less
    `missing` (requests the server never counted, for no restart's sake)."""

    url = "http://prometheus.test"

    def __init__(self, killed_at: float | None, restarted_at: float = 0.0, missing: int = 0) -> None:
        self.killed_at, self.restarted_at, self.missing = killed_at, restarted_at, missing

    def count(self, scraped: float) -> float:
        finished = FINISHED
        if self.killed_at is None or scraped < self.killed_at:
            return float(np.count_nonzero(finished <= scraped))
        since = np.count_nonzero((finished > self.restarted_at) & (finished <= scraped))
        return float(max(0, int(since) - self.missing))

    def instant(self, query: str, at: float | None = None) -> list[Sample]:
        return []

    def range(self, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        if "e2e_request_latency_seconds_count" not in query:
            return []
        times = np.arange(start, end + step / 2, step)
        values = np.array([self.count(SCRAPE * np.floor(t / SCRAPE)) for t in times])
        return [RangeSeries({"namespace": "serving", "pod": "vllm-0"}, times, values)]


def check(source: Counter) -> tuple[Status, str, object]:
    snapshot = served(source, Scope("serving"), -30.0, 150.0, STEP)
    snapshot.grace = SCRAPE
    found = metrics_window_check(requests(), np.ones(len(FINISHED), bool), snapshot)
    assert found is not None
    return found.status, found.reason, found.details["lost_with_restarts"]


def test_a_server_that_was_never_restarted_is_cross_checked_as_before() -> None:
    status, reason, lost = check(Counter(None))
    assert status is Status.PASS, reason
    assert lost == 0 and "restarted" not in reason


def test_the_counts_a_killed_server_took_with_it_are_not_read_as_another_window() -> None:
    # Killed at 50 s (last scraped at 45 s), back at 58 s: 13 s of completions (45..58 s) never counted, 14 % of 900.
    status, reason, lost = check(Counter(50.0, restarted_at=58.0))
    assert status is Status.PASS, reason
    assert isinstance(lost, int) and 130 <= lost <= 200  # a scrape interval and a step before the drop seen at 60 s
    assert "restarted" in reason


def test_a_shortfall_beyond_the_restarts_scrape_interval_is_still_inconclusive() -> None:
    # The same restart, and 300 more completions never counted: no restart explains those.
    status, reason, lost = check(Counter(50.0, restarted_at=58.0, missing=300))
    assert status is Status.INCONCLUSIVE, reason
    assert f"{lost} of them in the scrape intervals where the server restarted" in reason
