"""The sweep's page in a real browser (headless Chromium, tests/report/browser.py): it fetches nothing, logs no error
and draws its one chart, the frontier, under its own Content-Security-Policy. Skipped, with the reason, where
Chromium is not installed (`make test` installs it); under CI=true that fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report.browser import open_page, require_chromium
from tests.tune.test_page import draw, outcomes

pytestmark = pytest.mark.integration


def test_the_tune_page_opens_offline_without_errors_and_draws_the_frontier(tmp_path: Path) -> None:
    require_chromium()
    code, _ = draw(tmp_path, outcomes())
    assert code == 0
    page = open_page(tmp_path / "tune.html")
    assert page.outside_requests((tmp_path / "tune.html").resolve().as_uri()) == []
    assert page.errors == []
    assert page.plots == 1
    (tmp_path / "tune.png").write_bytes(page.screenshot)
