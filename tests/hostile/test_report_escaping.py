"""report.html: every string that comes from outside is escaped wherever it lands, and the page's
Content-Security-Policy runs its own scripts only (kfchaos.report.selfcontained.with_policy).

The payload stands in every field a run folder or a server fills: the experiment's description, owner and model, a
fault's name, Prometheus' error text and a label value, a pod's log and the evidence's notes, a pipeline step's
reasons, the verdict's reasons and warnings, the target and the commit. The page is read as HTML (what elements
it makes) and opened in headless Chromium (what runs); then an escaping bug is simulated by planting a script
and an event handler in the page, which the policy must stop.
"""

from __future__ import annotations

import json
import re
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from kfchaos.cli import main
from kfchaos.evidence.model import Bundle, Item
from kfchaos.report.selfcontained import script_hashes
from kfchaos.rundir import layout, writing
from tests.report.browser import open_page, require_chromium
from tests.report.sample import START, write_sample

MARK = "__kfchaos_pwned"
PAYLOAD = (
    f"<img src=x onerror=\"window.{MARK}='img'\"><script>window.{MARK}='script'</script>"
    f"<a href=\"javascript:window.{MARK}='link'\">x</a><b>bold</b>&amp;"
)
PWNED = f"typeof window.{MARK} === 'undefined' ? 'clean' : String(window.{MARK})"


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _hostile_folder(root: Path) -> Path:
    sample = write_sample(root / "in")
    experiment = yaml.safe_load(sample.experiment.read_text())
    experiment["metadata"].update(description=PAYLOAD, owner=PAYLOAD)
    experiment["spec"]["target"].update(api="openai-chat", model=PAYLOAD)
    metrics = json.loads(sample.metrics.read_text())
    metrics["unreachable"] = PAYLOAD  # Prometheus' own error text
    for series in metrics.get("series", {}).values() if isinstance(metrics.get("series"), dict) else []:
        series["query"] = f'vllm:gpu_cache_usage_perc{{pod="{PAYLOAD}"}}'  # a label value
    assert main([*sample.verdict_argv(), "--json"]) == 1
    log = Item(kind="previous-log", title=PAYLOAD, target="serving/vllm-0/vllm")
    bundle = Bundle(trigger=[PAYLOAD], window=(START, START + 120), items=[log.got(PAYLOAD, PAYLOAD, PAYLOAD)],
                    notes=[PAYLOAD])  # fmt: skip
    verdict = {
        "kind": "kfchaos.Verdict",
        "version": 1,
        "experiment": {"name": "sample", "version": "1.0.0"},
        "status": "FAIL",
        "reasons": [PAYLOAD],
        "warnings": [PAYLOAD],
        "checks": [{"name": PAYLOAD, "status": "FAIL", "gating": True, "reason": PAYLOAD, "value": None}],
        "stages": [],
        "fault_windows": [{"fault": PAYLOAD, "applied_at": START + 20, "removed_at": START + 100}],
    }
    folder = root / "runs" / "run-1"
    writing.write(
        folder,
        experiment_text=yaml.safe_dump(experiment),
        records=sample.records,
        verdict=verdict,
        baseline_text=sample.baseline.read_text(),
        metrics=metrics,
        stages=[{"step": "stage", "stage": 10, "status": "FAIL", "reasons": [PAYLOAD], "detail": {}}],
        evidence=bundle.to_dict(),
        info={"target": PAYLOAD, "commit": PAYLOAD},
    )
    return folder / layout.REPORT_HTML


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _hostile_folder(tmp_path_factory.mktemp("hostile-report"))


def test_outside_text_makes_no_element_and_every_script_is_the_reports_own(report: Path) -> None:
    page = report.read_text()
    parser = _Elements()
    parser.feed(page)
    assert not [attrs for tag, attrs in parser.tags if tag == "img"], "an <img> came from outside text"
    assert not [attrs for tag, attrs in parser.tags if any(name.startswith("on") for name in attrs)]
    assert not [a for tag, a in parser.tags if tag == "a" and (a.get("href") or "").startswith("javascript:")]
    assert escape(PAYLOAD) in page  # shown, as text
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
    assert policy is not None and page.index(policy.group(0)) < page.index("<script")
    sources = policy.group(1).replace("&#x27;", "'")
    script_src = next(d for d in sources.split("; ") if d.startswith("script-src ")).split()[1:]
    running = [attrs for tag, attrs in parser.tags if tag == "script" and attrs.get("type") != "application/json"]
    assert len(running) == len(script_hashes(page)) == len(script_src) >= 2  # plotly.js and the plots' calls
    assert "default-src 'none'" in sources and "'unsafe-inline'" not in sources.split("script-src")[1].split(";")[0]


def test_in_a_browser_nothing_from_outside_runs_and_the_page_draws(report: Path) -> None:
    require_chromium()
    # The fault's name over the timeline: Plotly shows it as written (its labels read <a href>, <b>, <span style>).
    label = "Array.from(document.querySelectorAll('.annotation-text')).map(e => e.textContent).join('|')"
    page = open_page(report, check_js=f"JSON.stringify([{PWNED}, {label}])")
    pwned, labels = json.loads(page.checked)
    assert pwned == "clean"
    assert "<b>bold</b>" in labels and "javascript:" in labels  # literal text, not markup
    assert page.errors == []  # no policy violation either: nothing tried to run
    assert page.plots == 2


def test_a_script_that_slipped_through_is_stopped_by_the_policy(report: Path, tmp_path: Path) -> None:
    require_chromium()
    planted = tmp_path / "planted.html"
    raw = f"<script>window.{MARK}='planted'</script><img src=x onerror=\"window.{MARK}='handler'\">"
    planted.write_text(report.read_text().replace("</body>", raw + "</body>", 1))
    page = open_page(planted, check_js=PWNED)
    assert page.checked == "clean"
    assert any("Content Security Policy" in error for error in page.errors), page.errors
    assert page.plots == 2  # the report's own scripts still ran
