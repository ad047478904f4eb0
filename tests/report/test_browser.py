"""The report in a real browser (headless Chromium over the DevTools protocol): it fetches nothing, logs no
error, draws every plot, directly and inside the KFP UI's sandboxed HTML viewer; the full-page screenshot is
kept in the test's folder. Skipped, with the reason, where Chromium is not installed (Debian: chromium; `make
test` installs it); under CI=true that fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfchaos.cli import main
from tests.report.browser import VIEWER_DRAWN, kfp_viewer_page, open_page, require_chromium
from tests.report.sample import write_sample

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("browser")]


@pytest.fixture(scope="module")
def browser() -> str:
    return require_chromium()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    sample = write_sample(root / "in")
    main([*sample.verdict_argv(), "--out", str(root / "run")])
    return root / "run" / "report.html"


def test_the_report_opens_offline_without_errors_and_draws_every_plot(report: Path) -> None:
    page = open_page(report)
    assert page.outside_requests(report.resolve().as_uri()) == []
    assert page.errors == []
    assert page.plots == 2  # the run's time axis and the stages' latency CDFs
    assert page.screenshot.startswith(b"\x89PNG") and page.height > 3000  # full page, not one screen
    (report.parent / "report.png").write_bytes(page.screenshot)


def test_the_report_draws_inside_the_kfp_ui_html_viewer(report: Path, tmp_path: Path) -> None:
    host = kfp_viewer_page(report, tmp_path)
    page = open_page(host, drawn_js=VIEWER_DRAWN, wanted_js="2")
    assert page.errors == []
    assert page.outside_requests(host.resolve().as_uri()) == []
    assert page.plots == 2


def test_the_check_sees_a_page_that_fetches_or_breaks(tmp_path: Path) -> None:
    # Loopback discard port: the request is attempted (and seen) but goes nowhere beyond this machine.
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!doctype html><img src='http://127.0.0.1:9/x.png'>"
        "<script>console.error('boom'); undefinedFunction();</script>"
    )
    page = open_page(bad, wanted_js="0", timeout=10)
    assert page.outside_requests(bad.resolve().as_uri()) == ["http://127.0.0.1:9/x.png"]
    assert any("boom" in e for e in page.errors) and any("undefinedFunction" in e for e in page.errors)
