"""The PR gate's history job (`kfchaos init --repo`'s kfchaos-gate.yml): its compare command, as the template
writes it, over run folders laid out as the job downloads them (one folder per workflow run, the current run's
folders met twice), on a runner that does not hold the signing key and trusts only the committed public key."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from kfchaos.cli import main, teamrepo

pytestmark = pytest.mark.slow


def _history_job() -> dict:
    starter = teamrepo.Starter(file="experiments/my-experiment.yaml", name="my-experiment", namespace="demo")
    return yaml.safe_load(teamrepo.files(starter)[".github/workflows/kfchaos-gate.yml"])["jobs"]["history"]


def test_the_job_runs_on_pull_requests_without_secrets_and_fails_only_on_a_regression() -> None:
    job = _history_job()
    assert "pull_request" in job["if"] and job["needs"] == "chaos"
    assert "secrets." not in yaml.safe_dump(job)
    compare = job["steps"][-1]["run"]
    assert 'test "$code" -eq 0 || test "$code" -eq 2' in compare  # exit 1 (a regression) fails the job


def _compare_argv() -> list[str]:
    script = _history_job()["steps"][-1]["run"].replace("\\\n", " ")
    line = next(x for x in script.splitlines() if x.strip().startswith("kfchaos history"))
    words = shlex.split(line.split(">")[0])
    values = {"$EXPERIMENT": "verdict-test", "$OLD": "1.0.1", "$NEW": "1.1.0"}
    return [values.get(w, w) for w in words[1:]]


def test_the_compare_command_counts_each_signed_run_once(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["audit", "key"]) == 0
    pem = re.search(r"-----BEGIN PUBLIC KEY-----.*?-----END PUBLIC KEY-----\n", capsys.readouterr().out, re.S)
    assert pem
    (tmp_path / ".kfchaos").mkdir()
    (tmp_path / ".kfchaos/signing-key.pub.pem").write_text(pem.group(0))
    for i in range(7, 21):  # earlier workflow runs, one folder each, and this run's own folders downloaded again
        shutil.copytree(runs / f"nightly-{i:02d}", tmp_path / f"history/{1000 + i}/nightly-{i:02d}")
    for i in (18, 19, 20):
        shutil.copytree(runs / f"nightly-{i:02d}", tmp_path / f"history/this-run/nightly-{i:02d}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "runner-config"))  # the runner holds no key of its own
    argv = _compare_argv()
    assert argv[0] == "history"
    assert main(argv) == 1
    comment = capsys.readouterr().out
    assert "**6 regression(s)** from pipeline version `1.0.1` to `1.1.0`" in comment
    assert "Runs: `1.0.1` 7 verified run(s)" in comment and "`1.1.0` 7 verified run(s)" in comment
    assert "could not be verified" not in comment

    untrusted = [w for w in argv if w not in ("--public-key", ".kfchaos/signing-key.pub.pem")]
    assert main(untrusted) == 2  # no key trusted: nothing counts, so nothing is claimed
    comment = capsys.readouterr().out
    assert "**Not enough runs**" in comment and "14 run(s) could not be verified and were not counted" in comment
