"""Issue 46, class 2: history and PR comments.

A run folder planted to mask a regression (a copy of a genuine folder under another name, two different folders of
one run id, a folder whose run.json was rewritten to another pipeline version or from another experiment) is listed
as unverified and never counted. Every string that reaches `kfchaos history --compare`'s Markdown (the PR comment
the gate posts) or its HTML page is inert there: links and images, raw HTML, @mentions, code fences, table pipes and
line breaks from folder names, versions, check names and reasons. All through `kfchaos history`, on folders the
project writes (tests/history/runs.py: nights 7-10 on 1.0.1 and 14-17 on 1.1.0, a target 1.5 times slower, are a
regression at four a side).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import kfp
import pytest

import tests.history.runs as nights
from kfchaos import runseal
from kfchaos.cli import main
from kfchaos.report.mdtext import ZWJ
from kfchaos.rundir import layout
from tests.conftest import ROOT
from tests.history.runs import Night, write_night
from tests.history.test_kfp_history import VERDICT_TASK, _finish, _record
from tests.support.kfpapi import KfpApiServer

pytestmark = pytest.mark.slow

OLD, NEW = "1.0.1", "1.1.0"
INDICES = {7: Night(OLD, 0.08), 8: Night(OLD, 0.08), 9: Night(OLD, 0.08), 10: Night(OLD, 0.08),
           14: Night(NEW, 0.12, oom_kill=True), 15: Night(NEW, 0.12), 16: Night(NEW, 0.12),
           17: Night(NEW, 0.12, oom_kill=True)}  # fmt: skip
# What a planted string tries in a PR comment: a link and an image, raw HTML, mentions, a closing code fence, a table
# pipe and a line break, a bare link, emphasis.
PAYLOAD = (
    "x](http://evil.example/a) ![img](http://evil.example/i.png) [click](http://evil.example) "
    "<img src=x onerror=alert(1)> @octocat @acme/admins\n```\n| cell | **bold** www.evil.example http://evil.example"
)
HOSTILE_CHECK = "p99 [x](http://evil.example) @octocat | row"  # p99, renamed in every night: a regression row
# A folder name (no "/" in one) that closes the code span it was quoted in before issue 46.
FOLDER = "nightly-14` [click](javascript:alert(1)) @octocat <img src=x onerror=alert(1)> ```"


class _Verdicts:
    """Stands in for build_from_files while the nights are written: the verdict with its p99 check renamed (every
    night) and, on NEW, error_rate renamed with a hostile reason. Statuses are left alone, so every folder verifies
    (its re-judgment agrees): the strings are the run's own, as a server's error text in a reason is."""

    def __init__(self, build: Any) -> None:
        self.build = build

    def __call__(self, **kwargs: Any) -> Any:
        verdict = self.build(**kwargs)
        document = verdict.to_dict()
        new = f"version: {NEW}" in Path(kwargs["experiment"]).read_text()
        for stage in document["stages"]:
            for check in stage["checks"]:
                if check["name"] == "p99":
                    check["name"] = HOSTILE_CHECK
                elif check["name"] == "error_rate" and new:
                    check["name"], check["reason"] = PAYLOAD, PAYLOAD
        return _Document(document)


class _Document:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    def to_dict(self) -> dict[str, Any]:
        return self.document


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("planted") / "runs"
    work = tmp_path_factory.mktemp("planted-inputs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nights, "build_from_files", _Verdicts(nights.build_from_files))
        for index, night in INDICES.items():
            write_night(root, work, index, night)
    yield root


@pytest.fixture
def runs(written: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "runs"
    shutil.copytree(written, copy)
    return copy


def _history(capsys: pytest.CaptureFixture[str], runs: Path, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["history", nights.NAME, "--runs", str(runs), *argv])
    return code, capsys.readouterr().out


def _compare(capsys: pytest.CaptureFixture[str], runs: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    code, out = _history(capsys, runs, "--compare", OLD, NEW, "--json", *argv)
    return code, json.loads(out)


def _reseal(folder: Path) -> None:
    """A seal recomputed over the folder's files by whoever edited them: integrity only (no signature)."""
    (folder / runseal.SEAL).write_text(runseal.dumps(runseal.seal(folder, folder.name, layout.SEALED)))


def _edit_manifest(folder: Path, **fields: Any) -> None:
    path = folder / layout.MANIFEST
    manifest = json.loads(path.read_text())
    for key, value in fields.items():
        manifest[key] = value
    path.write_text(json.dumps(manifest))


def _regressions(document: dict[str, Any]) -> int:
    return len([c for c in document["comparisons"][0]["comparisons"] if c["outcome"] == "regression"])


def _counted(document: dict[str, Any], check: str = HOSTILE_CHECK, stage: int = 60) -> tuple[int, int]:
    found = next(c for c in document["comparisons"][0]["comparisons"] if (c["check"], c["stage"]) == (check, stage))
    return found["old_runs"], found["new_runs"]


def test_the_nights_as_written_show_the_regression(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, document = _compare(capsys, runs, "--require-signed")
    assert code == 1 and all(r["verified"] for r in document["runs"])
    assert _counted(document) == (4, 4) and _regressions(document) >= 3


def test_a_genuine_folder_copied_under_other_names_is_listed_and_not_counted(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fastest night of NEW, copied ten times: signed by the runner, every hash holds, only the name is new.
    # Before issue 46 each copy verified and counted, 14 runs of NEW where 4 ran.
    for i in range(10):
        shutil.copytree(runs / "nightly-15", runs / f"nightly-{90 + i}")
    code, document = _compare(capsys, runs, "--require-signed")
    assert code == 1
    copies = [r for r in document["runs"] if r["run_id"].startswith("nightly-9")]
    assert len(copies) == 10 and not any(r["verified"] for r in copies)
    assert all(any("sealed as run 'nightly-15'" in why for why in r["unverified_because"]) for r in copies)
    assert _counted(document) == (4, 4)
    code, text = _history(capsys, runs)
    assert "18 runs, 8 verified, 10 unverified" in text
    capsys.readouterr()
    assert main(["audit", "verify", str(runs / "nightly-90")]) == 1  # the verifier says the same
    assert "MISMATCH run_id: the folder is 'nightly-90', but sealed as run 'nightly-15'" in capsys.readouterr().out


def test_two_different_folders_of_one_run_count_neither_and_identical_copies_count_once(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    downloads = runs / "downloads"
    shutil.copytree(runs / "nightly-16", downloads / "1" / "nightly-16")  # the same run downloaded again
    code, document = _compare(capsys, runs, "--require-signed")
    assert code == 1 and _counted(document) == (4, 4) and all(r["verified"] for r in document["runs"])
    # A second nightly-16 that differs from the first (its seal recomputed: integrity only, which history counts
    # without --require-signed). Before issue 46 the first folder met was counted, whichever it was.
    _reseal(downloads / "1" / "nightly-16")
    code, document = _compare(capsys, runs)
    both = [r for r in document["runs"] if r["run_id"] == "nightly-16"]
    assert len(both) == 2 and not any(r["verified"] for r in both)
    assert all(any("is in 2 folders that differ" in why for why in r["unverified_because"]) for r in both)
    assert _counted(document) == (4, 3)


def test_a_rewritten_version_is_listed_and_not_counted(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Two fast nights of OLD relabelled NEW in run.json, their seal recomputed (integrity only): 4 slow and 2 fast
    # runs of NEW. Before issue 46 both counted as NEW without --require-signed.
    for index in (7, 8):
        folder = runs / f"nightly-{index:02d}"
        _edit_manifest(folder, pipeline={"name": nights.NAME, "version": NEW})
        _reseal(folder)
    _, document = _compare(capsys, runs)  # 2 verified runs of OLD left: too few to test, which is said
    forged = [r for r in document["runs"] if r["run_id"] in ("nightly-07", "nightly-08")]
    assert [r["pipeline_version"] for r in forged] == [NEW, NEW] and not any(r["verified"] for r in forged)
    assert all(any("pipeline version '1.1.0', its experiment.yaml '1.0.1'" in why for why in r["unverified_because"])
               for r in forged)  # fmt: skip
    assert _counted(document) == (2, 4)
    # A forger who rewrites experiment.yaml's version too leaves nothing to disagree: only a signature tells.
    for index in (7, 8):
        folder = runs / f"nightly-{index:02d}"
        text = (folder / layout.EXPERIMENT).read_text()
        (folder / layout.EXPERIMENT).write_text(text.replace(f"version: {OLD}", f"version: {NEW}"))
        _reseal(folder)
    _, document = _compare(capsys, runs, "--require-signed")
    forged = [r for r in document["runs"] if r["run_id"] in ("nightly-07", "nightly-08")]
    assert not any(r["verified"] for r in forged) and _counted(document) == (2, 4)


def test_a_folder_of_another_experiment_is_listed_and_not_counted(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A fast run of another experiment (its experiment.yaml names it), planted with a run.json that names this one.
    planted = runs / "elsewhere-1"
    shutil.copytree(runs / "nightly-09", planted)
    text = (planted / layout.EXPERIMENT).read_text()
    (planted / layout.EXPERIMENT).write_text(text.replace(f"name: {nights.NAME}", "name: another-experiment", 1))
    _edit_manifest(planted, run_id=planted.name, pipeline={"name": nights.NAME, "version": NEW},
                   experiment={"name": nights.NAME, "version": NEW})  # fmt: skip
    _reseal(planted)
    code, document = _compare(capsys, runs)
    assert code == 1  # the regression still shows
    entry = next(r for r in document["runs"] if r["run_id"] == "elsewhere-1")
    assert not entry["verified"]  # before issue 46: verified, counted as a fifth run of NEW
    assert any("experiment name 'verdict-test', its experiment.yaml 'another-experiment'" in why
               for why in entry["unverified_because"])  # fmt: skip
    assert _counted(document) == (4, 4)


def _live(markdown: str) -> str:
    """What of the Markdown is read as syntax: backslash escapes, then code spans, taken out."""
    text = re.sub(r"\\[!-/:-@\[-`{-~]", "", markdown)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text)


def test_every_planted_string_in_the_pr_comment_is_inert(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(runs / "nightly-14", runs / FOLDER)  # unverified (a copy), so named in the comment
    code, comment = _history(capsys, runs, "--compare", OLD, NEW)
    assert code == 1
    live = _live(comment)
    for marker in ("](", "[", "```", "http://", "www.", "**bold**"):
        assert marker not in live, marker
    assert not re.search(r"<[A-Za-z/!?]", live)  # no tag, comment or autolink; "(<= 0.002)" is text
    assert not re.search(r"@[A-Za-z0-9]", comment)  # every @ is followed by a zero-width joiner: no one notified
    assert f"@{ZWJ}octocat" in comment and f"@{ZWJ}acme/admins" in comment
    # Every string arrived, on its line: the hostile check in the regression table, the planted folder in the list
    # of unverified runs, the hostile reason among the failure modes.
    rows = [line for line in comment.splitlines() if line.startswith("| :red_circle: regression")]
    assert rows and all(len(re.findall(r"(?<!\\)\|", row)) == 10 for row in rows)  # no cell added by a pipe
    assert any("p99 \\[x\\](http:\\/\\/evil.example) @\u200doctocat \\| row" in row for row in rows)
    assert "nightly-14\\` \\[click\\](javascript:alert(1)) @\u200doctocat \\<img src=x" in comment
    modes = comment.split("Failure modes seen only since the bump:")[1]
    assert "\\[click\\](http:\\/\\/evil.example)" in modes and "\n```" not in modes
    # The same strings on the command line: a version given to --compare is escaped as well.
    code, comment = _history(capsys, runs, "--compare", OLD, "2.0` [x](http://evil.example) @octocat")
    assert code == 2 and "[x](" not in _live(comment) and not re.search(r"@[A-Za-z0-9]", _live(comment))


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def test_every_planted_string_on_the_page_is_text(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(runs / "nightly-14", runs / FOLDER)
    page = tmp_path / "history.html"
    assert _history(capsys, runs, "--html", str(page))[0] == 1
    html = page.read_text()
    parser = _Elements()
    parser.feed(html)
    assert "img" not in parser.tags and "b" not in parser.tags and parser.tags.count("script") == 1  # the JSON
    data = re.search(r'<script type="application/json" id="kfchaos-history">(.*?)</script>', html, re.S)
    assert data and "<" not in data.group(1)  # neither `</script>` nor `<!--` from a planted string
    document = json.loads(data.group(1))
    assert any(r["run_id"] == FOLDER for r in document["runs"])


def test_a_kfp_run_serving_another_runs_audit_record_is_listed_and_not_counted(
    runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A KFP run planted in the experiment whose verdict task serves a genuine record of another run (signed by the
    pipeline's key, every hash holding): before issue 46 it counted as a second run; its record names the run it
    was made for (`run.id`, the pipeline's run-id placeholder)."""
    monkeypatch.setenv("HOME", str(tmp_path))  # kfp.Client reads ~/.config/kfp/context.json: none here
    with KfpApiServer() as api:
        assert main(["upload", "vllm-network-delay", "--host", api.url, "--root", str(ROOT)]) == 0
        client = kfp.Client(host=api.url)
        pipeline_id = client.get_pipeline_id("vllm-network-delay")
        version_id = client.list_pipeline_versions(pipeline_id).pipeline_versions[0].pipeline_version_id
        nightly = client.create_experiment("nightly").experiment_id
        folder = runs / "nightly-15"
        records = {}
        for name in ("genuine", "planted"):
            api.plan = [("preflight", "SUCCEEDED"), (VERDICT_TASK, "SUCCEEDED")]
            api.final_state = "SUCCEEDED"
            params = {"experiment": (folder / layout.EXPERIMENT).read_text()}
            run = client.run_pipeline(nightly, name, params=params, pipeline_id=pipeline_id, version_id=version_id)
            records[name] = run.run_id
            record = _record(folder, records["genuine"])  # the planted run serves the genuine run's record
            api.run_artifacts[(run.run_id, VERDICT_TASK, "audit")] = json.dumps(record).encode()
            _finish(client, run.run_id)
        capsys.readouterr()
        assert main(["history", nights.NAME, "--host", api.url, "--kfp-experiment", "nightly", "--json"]) == 0
    found = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert found[records["genuine"]]["verified"]
    planted = found[records["planted"]]
    assert not planted["verified"]
    assert any(f"its audit record is of run '{records['genuine']}'" in why for why in planted["unverified_because"])
