"""The repository's GitHub workflows lint clean with actionlint, and stay in step with scripts/e2e-kind.sh,
the component image reference and the versions the doctor supports."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kfchaos.cli import teamrepo
from kfchaos.doctor.cluster import SUPPORTED_CHAOS_MESH
from kfchaos.doctor.kfpcheck import OPTIONAL_SECRET, parse_version
from kfchaos.kfp.image import DEFAULT_REPOSITORY
from tests.conftest import ROOT, require_tool

WORKFLOWS = ROOT / ".github" / "workflows"
E2E = (ROOT / "scripts" / "e2e-kind.sh").read_text()


def _actionlint() -> str:
    # Installed into the venv by the test extra (a wheel with the binary); the venv's bin may not be on PATH.
    beside = Path(sys.executable).parent / "actionlint"
    return str(beside) if beside.is_file() else require_tool("actionlint", "lints .github/workflows")


def _lint(*paths: Path) -> subprocess.CompletedProcess[str]:
    # -shellcheck= / -pyflakes=: lint the workflow syntax, expressions and action inputs only, the same on
    # every machine whether or not those tools are installed.
    command = [_actionlint(), "-no-color", "-shellcheck=", "-pyflakes=", *map(str, paths)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _team_workflows(folder: Path) -> Path:
    """The GitHub workflows `kfchaos init --repo` writes into a team's repository, rendered into `folder`."""
    starter = teamrepo.Starter(file="experiments/my-experiment.yaml", name="my-experiment", namespace="demo")
    for where, text in teamrepo.files(starter).items():
        if where.startswith(".github/"):
            (folder / where).parent.mkdir(parents=True, exist_ok=True)
            (folder / where).write_text(text)
    return folder / ".github" / "workflows"


def test_ci_templates_lint_clean_and_the_gate_trusts_only_a_signed_folder(tmp_path: Path) -> None:
    workflows = _team_workflows(tmp_path)
    templates = sorted(workflows.glob("*.yml"))
    assert {t.name for t in templates} == {"kfchaos.yml", "kfchaos-gate.yml"}
    done = _lint(*templates)
    assert done.returncode == 0, done.stdout + done.stderr
    gate = yaml.safe_load((workflows / "kfchaos-gate.yml").read_text())
    assert gate["env"]["EXPERIMENT"] == "experiments/my-experiment.yaml"
    runs = [step.get("run", "") for step in gate["jobs"]["gate"]["steps"]]
    verify = next(i for i, run in enumerate(runs) if "kfchaos audit verify" in run)
    assert "--require-signed" in runs[verify] and "--public-key" in runs[verify]
    assert any("kfchaos verdict --run" in run for run in runs[verify + 1 :])  # the verdict only from a verified folder
    assert "secrets." not in yaml.safe_dump(gate["jobs"]["gate"])  # the job that decides holds no secret


def test_workflows_lint_clean() -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"ci.yml", "release.yml"}
    done = _lint(*files)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    text = (WORKFLOWS / "ci.yml").read_text().replace("needs: test", "needs: tset")
    broken.write_text(text)
    done = _lint(broken)
    assert done.returncode != 0 and "tset" in done.stdout


def _workflow(name: str) -> dict[str, object]:
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(document, dict)
    return document


def test_pull_requests_run_lint_tests_and_make_e2e() -> None:
    ci = _workflow("ci.yml")
    assert "pull_request" in ci[True]  # YAML 1.1 reads `on:` as True
    jobs = ci["jobs"]
    runs = {name: " ".join(str(s.get("run", "")) for s in job["steps"]) for name, job in jobs.items()}
    assert "bash .ci/run" in runs["test"]
    assert "make e2e" in runs["e2e"]


def test_a_tag_pushes_the_image_compiled_pipelines_name() -> None:
    release = _workflow("release.yml")
    assert release[True] == {"push": {"tags": ["v*"]}}
    text = (WORKFLOWS / "release.yml").read_text()
    assert f"tags: {DEFAULT_REPOSITORY}:${{{{ needs.version.outputs.version }}}}" in text
    assert "pypa/gh-action-pypi-publish" in text


def test_the_e2e_script_pins_supported_versions_and_creates_the_secret_where_pods_run() -> None:
    kfp = re.search(r'KFP_VERSION="\$\{KFP_VERSION:-([^}]+)\}"', E2E)
    chaos = re.search(r'CHAOS_MESH_VERSION="\$\{CHAOS_MESH_VERSION:-([^}]+)\}"', E2E)
    assert kfp and chaos
    kfp_version, chaos_version = parse_version(kfp[1]), parse_version(chaos[1])
    assert kfp_version is not None and kfp_version >= OPTIONAL_SECRET.minimum
    assert chaos_version is not None and SUPPORTED_CHAOS_MESH[0] <= chaos_version < SUPPORTED_CHAOS_MESH[1]
    assert "kubectl -n kubeflow create secret generic kfchaos-target" in E2E
    assert "kfchaos doctor" in E2E and "--wait" in E2E


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_e2e_script_parses() -> None:
    done = subprocess.run(["bash", "-n", str(ROOT / "scripts" / "e2e-kind.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
