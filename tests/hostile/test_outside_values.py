"""Values and text from outside servers are checked before they are believed or printed."""

from __future__ import annotations

import pytest

from kfchaos.doctor.model import Report, Status
from kfchaos.doctor.series import check_series
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.prometheus import PrometheusClient, PromQLError
from kfchaos.netsafe import for_terminal, printable
from tests.support.hostile import Answer, hostile_server, json_answer

# OSC 52 writes the clipboard, CSI 2J clears the screen, OSC 0 retitles the terminal
ESCAPES = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b]0;owned\x07\u202e"


def _count_of(value: str) -> Answer:
    return json_answer(
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1.0, value]}]}}
    )


@pytest.mark.parametrize("value", ["-7", "2.5", "NaN", "+Inf", "-Inf"])
def test_doctor_never_passes_a_series_count_that_is_not_a_count(value: str) -> None:
    with hostile_server(lambda method, path: _count_of(value)) as server:
        report = Report()
        check_series(report, PrometheusClient(server.url, retries=0), Scope("ns", ("pod-a",)), gpu_pods=False)
    assert server.seen
    assert report.checks
    assert all(c.status is not Status.PASS for c in report.checks), report.checks
    assert report.checks[0].status is Status.UNKNOWN
    assert "not a whole number" in report.checks[0].detail


def test_doctor_passes_a_real_count() -> None:
    with hostile_server(lambda method, path: _count_of("3")) as server:
        report = Report()
        check_series(report, PrometheusClient(server.url, retries=0), Scope("ns", ("pod-a",)), gpu_pods=False)
    assert report.checks and all(c.status is Status.PASS for c in report.checks)


def _bad_data(method: str, path: str) -> Answer:
    return json_answer({"status": "error", "errorType": "bad_data", "error": f"parse error {ESCAPES}"}, 400)


def test_prometheus_error_text_reaches_no_terminal_as_escapes() -> None:
    with hostile_server(_bad_data) as server, pytest.raises(PromQLError) as caught:
        PrometheusClient(server.url, retries=0).instant("up")
    text = str(caught.value)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b]52;c;" in text  # shown, escaped, so the operator sees what the server tried


def test_doctor_table_shows_a_hostile_error_escaped() -> None:
    with hostile_server(_bad_data) as server:
        report = Report()
        check_series(report, PrometheusClient(server.url, retries=0), Scope("ns", ("pod-a",)), gpu_pods=False)
    shown = report.table() + report.to_json()
    assert "\x1b" not in shown and "\x07" not in shown


def test_printable_escapes_every_control_and_keeps_text() -> None:
    assert printable("ok é 日本") == "ok é 日本"
    assert printable("a\nb\rc\x00d\x9be") == "a\\nb\\rc\\x00d\\x9be"
    assert for_terminal("line one\nline two\x1b[2J") == "line one\nline two\\x1b[2J"
