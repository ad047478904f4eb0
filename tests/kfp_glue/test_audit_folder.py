"""Issue 20 §3 and issue 25 class 9: a run folder cannot be changed quietly. Every file a verdict or report of
the folder reads is sealed (seal.json); `kfchaos audit verify DIR` recomputes each hash, re-judges the verdict and
says what it can and cannot prove; `kfchaos verdict --run` refuses a folder that does not verify (exit 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from kfchaos import runseal
from kfchaos.cli import main
from kfchaos.rundir import layout
from tests.report.sample import write_sample


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    sample = write_sample(tmp_path / "in")
    out = tmp_path / "runs" / "run-1"
    assert main([*sample.verdict_argv(), "--out", str(out)]) == 1  # a FAIL, as the sample is built
    return out


def _verify(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["audit", "verify", str(path), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _reseal(folder: Path, run_id: str) -> None:
    """What a forger with write access to the folder does: recompute the seal over the edited files."""
    (folder / runseal.SEAL).write_text(runseal.dumps(runseal.seal(folder, run_id, layout.SEALED)))


def test_a_fresh_folder_verifies_and_says_what_it_cannot_prove(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seal = json.loads((folder / runseal.SEAL).read_text())
    for name in (layout.EXPERIMENT, layout.RECORDS, layout.BASELINE, layout.METRICS, layout.VERDICT,
                 layout.REPORT_HTML, layout.REPORT_MD, layout.MANIFEST):  # fmt: skip
        assert seal["files"][name].startswith("sha256:"), name
    code, report = _verify(folder, capsys)
    assert code == 0 and report["ok"], report
    assert any(f["what"] == "rejudge" and f["ok"] for f in report["findings"])
    # Signed with this user's own key (made on first use), which this verifier trusts.
    assert report["authenticated"] and seal["signature"]["key_id"].startswith("sha256:")
    assert any(line.startswith("proves: the seal was signed by key sha256:") for line in report["proves"])
    assert any(line.startswith("cannot prove: that the records are what the target") for line in report["proves"])


@pytest.mark.parametrize("name", [layout.EXPERIMENT, layout.BASELINE, layout.METRICS, layout.VERDICT, layout.REPORT_MD])
def test_an_edited_file_is_a_mismatch_and_verdict_run_refuses_the_folder(
    folder: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = folder / name
    tail = "\n" if name.endswith(".json") else "\n# loosened\n"  # JSON stays valid JSON
    path.write_text(path.read_text().replace("FAIL", "PASS") + tail)
    code, report = _verify(folder, capsys)
    assert code == 1 and any(f["what"] == name and not f["ok"] for f in report["findings"])
    assert main(["verdict", "--run", str(folder)]) == 3
    assert f"{name}: recorded sha256:" in capsys.readouterr().err


def test_records_edited_and_the_seal_rewritten_still_fail_the_rejudge(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A forger who makes every request fast and reseals: the hashes agree, but verdict.json (FAIL) is no longer
    # what the folder's inputs give, so the re-judge check catches it; editing verdict.json too is what a key stops.
    table = pq.read_table(folder / layout.RECORDS)
    fast = pc.multiply(table["latency"], 0.01)
    table = table.set_column(table.schema.get_field_index("latency"), "latency", fast)
    pq.write_table(table, folder / layout.RECORDS)
    _reseal(folder, "run-1")
    code, report = _verify(folder, capsys)
    assert code == 1
    rejudge = next(f for f in report["findings"] if f["what"] == "rejudge")
    assert not rejudge["ok"] and "verdict.json FAIL" in rejudge["detail"]


def test_a_file_added_or_removed_after_sealing_is_a_mismatch(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (folder / layout.RUN_STATE).write_text(json.dumps({"faults_verified": True}))
    code, report = _verify(folder, capsys)
    assert code == 1 and any(f["what"] == layout.RUN_STATE and "not sealed" in f["detail"] for f in report["findings"])
    (folder / layout.RUN_STATE).unlink()
    (folder / layout.METRICS).unlink()
    code, report = _verify(folder, capsys)
    assert code == 1 and any(f["what"] == layout.METRICS and "missing" in f["detail"] for f in report["findings"])


def test_an_unsealed_folder_is_refused_unless_asked(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (folder / runseal.SEAL).unlink()
    assert main(["verdict", "--run", str(folder)]) == 3
    assert "not sealed" in capsys.readouterr().err
    assert main(["verdict", "--run", str(folder), "--unsealed", "--json"]) == 1
    assert "does not verify, judged anyway" in capsys.readouterr().out


def test_with_a_key_the_seal_is_signed_and_a_resealed_forgery_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(runseal.KEY_ENV, "runner-secret")
    sample = write_sample(tmp_path / "in")
    folder = tmp_path / "runs" / "run-2"
    main([*sample.verdict_argv(), "--out", str(folder)])
    code, report = _verify(folder, capsys)
    assert code == 0 and any(f["what"] == "hmac" and f["detail"] == "matches the key" for f in report["findings"])
    assert any(line.startswith("proves: the HMAC was made by a holder of KFCHAOS_SEAL_KEY; it is symmetric")
               for line in report["proves"])  # fmt: skip
    # The forger has no key: a reseal without it (or with another) no longer matches.
    verdict = folder / layout.VERDICT
    verdict.write_text(verdict.read_text().replace('"FAIL"', '"PASS"'))
    monkeypatch.setenv(runseal.KEY_ENV, "forger-guess")
    _reseal(folder, "run-2")
    monkeypatch.setenv(runseal.KEY_ENV, "runner-secret")
    code, report = _verify(folder, capsys)
    assert code == 1 and any(f["what"] == "hmac" and not f["ok"] for f in report["findings"])


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"kind": "kfchaos.RunSeal", "files": []}',
        "{",
        "[" * 100_000,
        '{"kind": "kfchaos.RunSeal", "files": {"../x": "sha256:0"}}',
    ],
)
def test_a_hostile_seal_is_a_mismatch_never_a_crash_or_a_pass(
    folder: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / runseal.SEAL).write_text(text)
    code, report = _verify(folder, capsys)
    assert code == 1 and not report["ok"]
    assert main(["verdict", "--run", str(folder)]) == 3
