"""The run folder layout: `kfchaos verdict --out` writes it whole, re-judging it gives the same verdict, and a
folder that lacks what a re-judgment needs is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfchaos.cli import main
from kfchaos.rundir import kfpimport, layout
from tests.report.sample import write_sample


def _strip(verdict: dict) -> dict:
    """The verdict without the fields that name where it was written."""
    return {k: v for k, v in verdict.items() if k not in ("run_id",)}


def test_verdict_out_writes_the_whole_layout_and_rejudging_it_gives_the_same_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = write_sample(tmp_path / "in")
    out = tmp_path / "runs" / "run-7"
    assert main([*sample.verdict_argv(), "--out", str(out)]) == 1
    run = layout.open_run(out)
    for name in (layout.EXPERIMENT, layout.RECORDS, layout.BASELINE, layout.METRICS, layout.VERDICT,
                 layout.REPORT_HTML, layout.REPORT_MD, layout.MANIFEST):  # fmt: skip
        assert run.has(name), name
    assert not run.has("summary.md") and not run.has("report_md")  # one name for the Markdown report
    manifest = run.manifest()
    assert manifest["run_id"] == "run-7" == run.verdict()["run_id"]
    assert manifest["experiment"] == {"name": "verdict-test", "version": "1.0.0"}
    assert manifest["rejudged"] == {"status": "FAIL", "matches": True}
    assert manifest["started"] and manifest["finished"] > manifest["started"]
    assert sorted(manifest["files"]) == sorted(n for n in layout.FILES if run.has(n))
    written = run.verdict()
    assert written["kind"] == "kfchaos.Verdict" and written["status"] == "FAIL"

    capsys.readouterr()
    assert main(["verdict", "--run", str(out), "--json"]) == 1
    again = json.loads(capsys.readouterr().out)
    assert _strip(again) == _strip(written)  # the same checks, figures and reasons, not only the same status
    assert main(run.verdict_argv()) == 1


def test_faults_verified_by_hand_is_kept_so_the_folder_rejudges_the_same(tmp_path: Path) -> None:
    sample = write_sample(tmp_path / "in", with_timeouts=False)
    out = tmp_path / "run"
    code = main([*sample.verdict_argv(), "--faults-verified", "--out", str(out)])
    run = layout.open_run(out)
    assert json.loads(run.file(layout.RUN_STATE).read_text()) == {"faults_verified": True}
    assert run.manifest()["rejudged"]["matches"] is True
    assert main(["verdict", "--run", str(out)]) == code


def test_a_folder_without_records_or_manifest_is_refused_by_name(tmp_path: Path) -> None:
    sample = write_sample(tmp_path / "in")
    out = tmp_path / "run"
    main([*sample.verdict_argv(), "--out", str(out)])
    (out / layout.RECORDS).unlink()
    with pytest.raises(layout.RunDirError, match=r"missing records\.parquet"):
        layout.open_run(out)
    assert main(["verdict", "--run", str(out)]) == 3
    assert main(["verdict", "--run", str(tmp_path / "nowhere")]) == 3


def test_a_pipeline_audit_becomes_a_documented_verdict_with_stages_and_run_state() -> None:
    stage = {"stage": 30, "status": "FAIL", "requests": 10, "window": [1.0, 2.0], "reasons": [], "checks": []}
    audit = {
        "parameters": {"experiment": "metadata: {name: x, version: 1.2.3}\n", "baseline": ""},
        "steps": [
            {"step": "inject", "stage": 0, "status": "PASS", "proceed": True, "reasons": [], "detail": {}},
            {
                "step": "stage",
                "stage": 30,
                "status": "FAIL",
                "proceed": False,
                "reasons": ["p99"],
                "detail": {"stage": stage, "replay": {"valid": "send lag 80ms"}},
            },
        ],
        "recovery": {"removed_at": 123.0, "recovery": None},
        "verdict": {"status": "FAIL", "reasons": ["stage 30%: p99"]},
    }
    verdict = kfpimport.verdict_from_pipeline(audit, None)
    assert verdict["kind"] == "kfchaos.Verdict" and verdict["experiment"] == {"name": "x", "version": "1.2.3"}
    assert verdict["stages"] == [stage] and verdict["status"] == "FAIL"
    assert [c["name"] for c in verdict["checks"]] == ["inject"]
    state = kfpimport.run_state_from_pipeline(audit)
    assert state == {"faults_verified": True, "stage_valid": {"30": "send lag 80ms"}, "faults_removed_at": 123.0}


def test_the_metrics_a_pipeline_report_embeds_come_back_out() -> None:
    from kfchaos.report.page import html

    metrics = {"source": "p", "series": {"oom_kills": {"kind": "counter", "points": [[1.0, 0.0]]}}, "errors": {}}
    page = html({"status": "PASS", "experiment": {"name": "x", "version": "1"}, "stages": []}, {"metrics": metrics})
    found = kfpimport.embedded_metrics(page)
    assert found is not None and found["series"]["oom_kills"]["points"] == [[1.0, 0.0]]
    assert kfpimport.embedded_metrics("<html></html>") is None


def test_run_ids_become_safe_folder_names() -> None:
    assert layout.safe_id("demo-llm-chaos-2026-12-03-07-26-13-123456") == "demo-llm-chaos-2026-12-03-07-26-13-123456"
    assert layout.safe_id("../../etc/passwd") == "etc-passwd"
    with pytest.raises(layout.RunDirError):
        layout.safe_id("/..")
