"""report.md: every string a run folder carries reaches the Markdown summary through the one escaping function
(kfchaos.report.mdtext.markdown_text), so a planted verdict, run.json or evidence bundle makes no link, image, HTML,
mention, heading, code block or table cell when the summary is pasted into a ticket or a pull request (issue 46).

The payload stands in the experiment's name and version, the verdict's reasons and warnings, the run's target, and
the evidence bundle's item title, target, text, source, trigger and notes; the folder is written by the real writer
(kfchaos.rundir.writing) as `kfchaos verdict --out` writes it."""

from __future__ import annotations

import re

import pytest
import yaml

from kfchaos.evidence.model import Bundle, Item
from kfchaos.knowledge import failure_modes
from kfchaos.report.markdown import markdown
from kfchaos.report.mdtext import PROSE_LIMIT, ZWJ, markdown_text
from kfchaos.rundir import layout, writing
from tests.hostile.test_history_planted import _live
from tests.report.sample import START, write_sample

PAYLOAD = (
    "x\n\n```\n# owned [click](javascript:alert(1)) ![i](http://evil.example/p.png) <img src=x onerror=alert(1)> "
    "@octocat #12 www.evil.example | cell **bold** `code`\u202e"
)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("hostile-md")
    sample = write_sample(root / "in")
    experiment = yaml.safe_load(sample.experiment.read_text())
    experiment["metadata"]["description"] = PAYLOAD
    log = Item(kind="previous-log", title=PAYLOAD, target=PAYLOAD)
    missing = Item(kind="kv-cache", title="kv cache", target="serving/vllm-0")
    items = [log.got(PAYLOAD, PAYLOAD, PAYLOAD), missing.skipped(PAYLOAD, PAYLOAD)]
    bundle = Bundle(trigger=[PAYLOAD], window=(START, START + 120), items=items, notes=[PAYLOAD])
    verdict = {
        "kind": "kfchaos.Verdict",
        "version": 1,
        "experiment": {"name": PAYLOAD, "version": PAYLOAD},
        "status": "FAIL",
        "reasons": [PAYLOAD, "error_rate: 3.1% > 1%"],
        "warnings": [PAYLOAD],
        "checks": [{"name": "oom_kill_rate", "status": "FAIL", "gating": True, "reason": PAYLOAD, "value": None}],
        "stages": [],
        "fault_windows": [],
    }
    folder = root / "runs" / "run-1"
    writing.write(
        folder,
        experiment_text=yaml.safe_dump(experiment),
        records=sample.records,
        verdict=verdict,
        baseline_text=sample.baseline.read_text(),
        evidence=bundle.to_dict(),
        info={"target": PAYLOAD, "commit": PAYLOAD},
    )
    return (folder / layout.REPORT_MD).read_text()


def test_no_planted_string_is_read_as_markdown(report: str) -> None:
    live = _live(report)
    for marker in ("](", "[", "```", "http://", "www.", "**bold**", "\u202e"):
        assert marker not in live, marker
    assert not re.search(r"<[A-Za-z/!?]", live)  # no tag, comment or autolink
    assert not re.search(r"@[A-Za-z0-9]", report) and f"@{ZWJ}octocat" in report  # no one notified
    assert not re.search(r"#[0-9]", report)  # no issue cross-referenced


def test_the_planted_strings_arrive_each_on_its_own_line(report: str) -> None:
    headings = [line for line in report.splitlines() if line.startswith("#")]
    assert headings[0].startswith("# kfchaos verdict: x ") and headings[0].endswith("— **FAIL**")
    assert not [h for h in headings if "owned" in h and not h.startswith("# kfchaos verdict:")]
    shown = markdown_text(PAYLOAD, limit=PROSE_LIMIT)
    assert "\\[click\\](javascript:alert(1))" in shown and "\n" not in shown
    assert f"- {shown}\n" in report  # the reason: one list item, on one line
    assert "- error\\_rate: 3.1% > 1%" in report  # a real reason reads as it was
    assert f"> warning: {shown}\n" in report
    assert "Collected because: x " in report and ", target x " in report
    rows = [line for line in report.splitlines() if line.startswith("| ") and "|---" not in line]
    evidence = rows[rows.index(next(r for r in rows if r.startswith("| item |"))) :]
    assert len(evidence) == 3  # the header and the two items: no row broken, none added
    assert all(len(re.findall(r"(?<!\\)\|", row)) == 6 for row in evidence)  # no cell added by a planted pipe


def test_failure_mode_text_goes_through_the_same_function(report: str) -> None:
    assert "## Known failure modes that fit" in report
    shown = [m for m in failure_modes() if f"### {markdown_text(m.title, limit=PROSE_LIMIT)}" in report]
    assert shown
    for mode in shown:
        assert markdown_text(mode.explanation, limit=PROSE_LIMIT) in report
        assert all(f"- {markdown_text(step, limit=PROSE_LIMIT)}" in report for step in mode.evidence + mode.remediation)


def test_a_long_planted_reason_is_cut() -> None:
    text = markdown({"experiment": {"name": "e", "version": "1"}, "status": "FAIL", "reasons": ["y" * 100_000],
                     "checks": [], "stages": []})  # fmt: skip
    assert len(text) < PROSE_LIMIT + 500
