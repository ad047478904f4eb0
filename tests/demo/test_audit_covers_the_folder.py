"""Issue 35 §3: the audit of a run folder covers every file the verdict rests on. A real `kfchaos demo` run (its
pipeline through kfp.local) writes runs/<id>/ with its audit record; the docs point users at
`kfchaos audit verify runs/<id>/audit.json`. Before, that verified the record alone (its own hashes, the
experiment text it carries): an edited experiment copy or records.parquet with rows deleted verified "ok", while
`kfchaos verdict --run` refused the folder. Now the record is verified with its folder, over the one list of files
(kfchaos.rundir.layout.SEALED) that `verdict --run` checks, and each changed or missing file is named."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kfchaos.cli import EXIT_FAIL, EXIT_PASS, EXIT_USAGE
from kfchaos.cli import main as cli
from kfchaos.demo.runner.scenarios import main as demo
from kfchaos.rundir import layout
from tests.demo.test_rejudge import PASSING
from tests.demo.test_scenarios import _write
from tests.kfp_glue.conftest import copy_sources

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="the demo needs Prometheus (`make prometheus`)"),
]


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("demo-audit")
    scenarios = tmp / "scenarios"
    _write(scenarios, "tiny-delay", PASSING)
    demo(["tiny-delay"], copy_sources(tmp / "repo"), tmp / "runs", baseline_seconds=5.0, directory=scenarios)
    (folder,) = [p for p in (tmp / "runs").iterdir() if p.name.startswith("tiny-delay-")]
    assert (folder / layout.AUDIT).is_file(), "a pipeline run's folder holds its audit record"
    return folder


def _verify(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, tuple[bool, str]]]:
    capsys.readouterr()
    code = cli(["audit", "verify", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    return code, {f["what"]: (f["ok"], f["detail"]) for f in report["findings"]}


def _edit_experiment(folder: Path) -> None:
    path = folder / layout.EXPERIMENT
    path.write_text(path.read_text().replace("p99_max: 20s", "p99_max: 60s"))


def _delete_rows(folder: Path) -> None:
    path = folder / layout.RECORDS
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows // 2), path)


def _delete_metrics(folder: Path) -> None:
    (folder / layout.METRICS).unlink()


@pytest.mark.parametrize(
    ("edit", "name", "how"),
    [
        (_edit_experiment, layout.EXPERIMENT, "recorded sha256:"),
        (_delete_rows, layout.RECORDS, "recorded sha256:"),
        (_delete_metrics, layout.METRICS, "sealed but missing"),
    ],
)
def test_audit_verify_of_the_record_names_each_file_changed_after_the_run(
    demo_folder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: Callable[[Path], None],
    name: str,
    how: str,
) -> None:
    folder = tmp_path / demo_folder.name
    shutil.copytree(demo_folder, folder)
    code, findings = _verify(folder / layout.AUDIT, capsys)
    assert code == EXIT_PASS, {k: v for k, v in findings.items() if not v[0]}  # the run as written verifies
    assert findings[layout.RECORDS][0] and findings["rejudge"][0]

    edit(folder)
    code, findings = _verify(folder / layout.AUDIT, capsys)  # before: exit 0, every entry ok
    assert code == EXIT_FAIL
    ok, detail = findings[name]
    assert not ok and how in detail, detail
    assert findings["record_hash"][0], "the record itself is untouched: the folder's file is what changed"
    # The folder named as the folder says the same, and `verdict --run` refuses it over the same list of files.
    code, same = _verify(folder, capsys)
    assert code == EXIT_FAIL and same[name] == findings[name]
    capsys.readouterr()
    assert cli(["verdict", "--run", str(folder)]) == EXIT_USAGE
    assert name in capsys.readouterr().err


def test_a_record_outside_a_run_folder_is_verified_alone(
    demo_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "record.json"
    shutil.copy(demo_folder / layout.AUDIT, record)
    code, findings = _verify(record, capsys)
    assert code == EXIT_PASS and "record_hash" in findings
    assert layout.RECORDS not in findings and "rejudge" not in findings
