"""Input problems are input errors (issue 36): a traffic file that is not there, an endpoint or --target without a
scheme, each exit 3 naming the field or flag with the fix, before anything runs; a failed pipeline task's cause
is read from its log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kfchaos.cli import main
from kfchaos.cli.cmd_init import starter
from kfchaos.demo.runner.localrun import failure_cause
from kfchaos.spec import endpoint_problem


def _experiment(folder: Path, text: str, name: str = "exp.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def _with_recording(text: str, file: str) -> str:
    """The starter replaying a recording instead of its synthetic workload."""
    head, _, rest = text.partition("    synthetic:\n")
    _, _, tail = rest.partition("    stages:")
    return f"{head}    file: {file}\n    stages:{tail}"


def test_a_missing_traffic_file_is_an_error_at_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _experiment(tmp_path, _with_recording(starter("exp"), "gone.jsonl.gz"))
    assert main(["validate", str(path)]) == 3
    err = capsys.readouterr().err
    assert f"{path}:" in err and "spec.traffic.file: file gone.jsonl.gz not found" in err
    assert "paths in an experiment are relative to its file" in err
    (tmp_path / "gone.jsonl.gz").write_bytes(b"")
    assert main(["validate", "-q", str(path)]) == 0  # there now: no error (the planner judges its content)


def test_a_missing_traffic_file_stops_run_local_before_anything_runs(tmp_path: Path) -> None:
    path = _experiment(tmp_path, _with_recording(starter("exp"), "gone.jsonl.gz"))
    done = subprocess.run(
        [sys.executable, "-m", "kfchaos", "run", str(path), "--local", "--target", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "spec.traffic.file: file gone.jsonl.gz not found" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_an_endpoint_without_a_scheme_says_so_in_plain_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _experiment(tmp_path, starter("exp").replace("endpoint: http://127.0.0.1:8100", "endpoint: 127.0.0.1:8100"))
    assert main(["validate", str(path)]) == 3
    err = capsys.readouterr().err
    assert "spec.target.endpoint: '127.0.0.1:8100' has no scheme: give a URL, e.g. http://127.0.0.1:8100" in err
    assert "String should match pattern" not in err and "^https?" not in err


@pytest.mark.parametrize("target", ["127.0.0.1:8100", "ftp://127.0.0.1:8100", "http:// spaced"])
def test_a_target_without_a_scheme_stops_run_before_anything_runs(tmp_path: Path, target: str) -> None:
    path = _experiment(tmp_path, starter("exp"))
    done = subprocess.run(
        [sys.executable, "-m", "kfchaos", "run", str(path), "--local", "--target", target],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.startswith(f"kfchaos: --target: {target!r}"), done.stderr
    assert "give --target" not in done.stderr and not (tmp_path / "runs").exists()


def test_replay_refuses_a_target_without_a_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--target", "127.0.0.1:8000"]) == 3
    assert "--target: '127.0.0.1:8000' has no scheme: give a URL, e.g. http://127.0.0.1:8000" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "ok"),
    [("http://127.0.0.1:8100", True), ("https://llm.example.com/v1", True), ("127.0.0.1:8100", False), ("", False)],
)
def test_the_one_endpoint_rule(url: str, ok: bool) -> None:
    assert (endpoint_problem(url) is None) is ok


# As kfp.local writes a failed task: its output streamed indented (kfp/local/logging_utils.py), then the colored
# lines naming the task (kfp/local/pipeline_orchestrator.py); the shape of a real log of
# tests/kfp_glue/test_local_pipeline.py's failed stage.
FAILED_LOG = """\
kfchaos task names: {}
12:00:01.100 - INFO - Executing task \x1b[96m'preflight'\x1b[0m
12:00:01.101 - INFO - Streamed logs:

    Traceback (most recent call last):
      File "<frozen runpy>", line 198, in _run_module_as_main
      File "/venv/lib/python3.11/site-packages/kfchaos/steps/setup.py", line 40, in preflight
        raise KfchaosError(f"target {url} does not answer")
    kfchaos.errors.KfchaosError: target http://127.0.0.1:9 does not answer
    (connection refused)

12:00:02.300 - ERROR - Task \x1b[96m'preflight'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m
--------------------------------------------------------------------------------
12:00:02.400 - ERROR - Pipeline \x1b[95m'exp'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m. \
Inner task failed: \x1b[96m'preflight'\x1b[0m.
"""


def test_a_failed_tasks_cause_is_read_from_its_log(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text(FAILED_LOG)
    cause = failure_cause(log)
    assert cause[0].endswith("Inner task failed: 'preflight'.")
    assert cause[1:] == [
        "kfchaos.errors.KfchaosError: target http://127.0.0.1:9 does not answer",
        "(connection refused)",
    ]
    log.write_text("nothing went wrong\n")
    assert failure_cause(log) == []
