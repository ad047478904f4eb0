"""Every check is shown with a value that agrees with its status: an abort rule that PASSes with one window above
its threshold (it trips only on `consecutive` windows in a row) no longer reads "0.384615 / 0.2 PASS"."""

from __future__ import annotations

import numpy as np

from kfchaos.report.page import _value, checks_table
from kfchaos.spec import AbortRule
from kfchaos.verdict.gate import rule_check
from kfchaos.verdict.model import Status
from kfchaos.verdict.requests import Requests, load_requests
from tests.verdict.builders import records

START = 1_000_000.0


def _requests(errors_per_window: list[int], per_window: int = 13, window: float = 5.0) -> Requests:
    """`per_window` requests in each 5 s window, the first `errors` of each failing with a 503."""
    error: list[str | None] = []
    for errors in errors_per_window:
        error += ["http" if k < errors else None for k in range(per_window)]
    status = np.array([503 if e else 200 for e in error])
    latency = np.full(len(error), 0.1)
    return load_requests(records(50, latency, start=START, rate=per_window / window, error=error, status=status))


def test_an_abort_rule_passing_with_one_window_above_says_so_in_its_value() -> None:
    rule = AbortRule.model_validate({"metric": "error_rate", "above": "20%", "window": "5s", "consecutive": 2})
    check = rule_check(rule, _requests([0, 50, 0, 0], per_window=100), None)  # one window at 50 %, then none
    assert check.status is Status.PASS
    shown = _value(check.to_dict())
    assert shown == "1/2 windows > 20%; worst 50%", shown
    assert "0.5 / 0.2" not in checks_table([check.to_dict()])


def test_an_abort_rule_that_trips_shows_the_run_that_tripped_it() -> None:
    rule = AbortRule.model_validate({"metric": "error_rate", "above": "20%", "window": "5s", "consecutive": 2})
    check = rule_check(rule, _requests([0, 50, 60, 0], per_window=100), None)
    assert check.status is Status.FAIL
    assert _value(check.to_dict()) == "2/2 windows > 20%; worst 60%"


def test_a_window_above_on_too_few_requests_is_shown_as_a_blip() -> None:
    # 5 errors of 13 (38.5 %) cannot show a 20 % rate over the run's windows: a blip, which trips nothing.
    rule = AbortRule.model_validate({"metric": "error_rate", "above": "20%", "window": "5s", "consecutive": 1})
    check = rule_check(rule, _requests([0, 5, 0, 0]), None)
    assert check.status is Status.PASS
    assert _value(check.to_dict()) == "0/1 windows > 20% (1 more above on too few requests); worst 38.5%"


def test_a_value_and_limit_check_keeps_value_slash_limit() -> None:
    check = {"name": "error_rate", "status": "PASS", "value": 0.001, "threshold": 0.01, "unit": "fraction"}
    assert _value(check) == "0.1% / 1%"
