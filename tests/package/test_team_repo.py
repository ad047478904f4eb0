"""A team's own repository: kfchaos installed from its wheel into a fresh virtualenv outside this checkout, and the
whole loop run in an empty Git repository laid out by `kfchaos init --repo` (issue 36): validate, compile (twice,
byte-identical), `compile --check`, the CI template's own check steps, doctor without a cluster (exit 5), upload,
schedule sync and a submitted run against a loopback KFP API server, the demo stack, `run --local` to a verdict,
`verdict --run` to the same exit code, `audit verify` (exit 0, signed by the user's own key)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from kfchaos import __version__
from kfchaos.kfp.versioning import read_lock
from tests.conftest import require_tool
from tests.package.conftest import Installed, wheel_names
from tests.support.kfpapi import KfpApiServer

pytestmark = [pytest.mark.slow, pytest.mark.integration]

RUN_FOLDER = re.compile(r"^run folder: (\S+)$", re.M)


class Team:
    """Commands in the team's repository, with the installed kfchaos first on PATH."""

    def __init__(self, installed: Installed, repo: Path, config: Path) -> None:
        self.installed, self.repo, self.config = installed, repo, config
        self.demo: dict[str, str] = {}

    def sh(self, command: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
        environment = self.installed.env(XDG_CONFIG_HOME=str(self.config), **self.demo, **env)
        return subprocess.run(
            ["bash", "-c", command], cwd=self.repo, env=environment, capture_output=True, text=True, timeout=timeout
        )

    def kfchaos(self, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
        return self.sh(" ".join(["kfchaos", *(f"'{a}'" for a in args)]), timeout=timeout, **env)


def _outputs(repo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted((repo / "pipelines").rglob("*")) if p.is_file()}


def _exports(env_file: Path) -> dict[str, str]:
    pairs = re.findall(r"^export (\w+)=(\S+)$", env_file.read_text(), flags=re.M)
    return dict(pairs)


def test_the_wheel_carries_the_pipeline_the_components_and_the_templates(installed: Installed) -> None:
    names = wheel_names(installed.wheel)
    assert {
        "kfchaos/kfp/pipelines/chaos_experiment.py",
        "kfchaos/kfp/components/replay_stage/component.py",
        "kfchaos/kfp/components/verdict_report/component.py",
        "kfchaos/data/starter-experiment.yaml",
        "kfchaos/data/repo/github/workflows/kfchaos.yml",
        "kfchaos/data/repo/gitlab-ci.yml",
        "kfchaos/data/repo/manifests/target-namespace/role.yaml",
        "kfchaos/demo/experiments/demo-llm-chaos.yaml",
        "kfchaos/demo/grids/demo-settings.yaml",  # `kfchaos demo tune`
        "kfchaos/kfp/pipelines/tune_sweep.py",
    } <= names
    assert installed.sdist.name == f"kfchaos-{__version__}.tar.gz"
    where = subprocess.run(
        [str(installed.bin / "python"), "-c", "import kfchaos.kfp.pipelines.chaos_experiment as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
        env=installed.env(),
        cwd=installed.venv,
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed.venv)  # the installed copy, not the checkout's


def test_init_repo_then_the_whole_loop_in_an_empty_git_repository(installed: Installed, tmp_path: Path) -> None:
    require_tool("prometheus", "the demo stack's metrics server")
    repo = tmp_path / "team"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    team = Team(installed, repo, tmp_path / "config")

    init = team.kfchaos("init", "--repo")
    assert init.returncode == 0, init.stderr
    for path in (
        "experiments/my-experiment.yaml",
        "baselines/README.md",
        "pipelines/versions.lock.yaml",
        "pipelines/compiled/my-experiment/0.1.0.yaml",
        f"pipelines/compiled/kfchaos-experiment/{__version__}.yaml",
        "manifests/kustomization.yaml",
        "manifests/base/serviceaccount.yaml",
        "manifests/target-namespace/role.yaml",
        "manifests/overlays/demo/kustomization.yaml",
        "manifests/schedules.yaml",
        ".github/workflows/kfchaos.yml",
        ".github/workflows/kfchaos-gate.yml",
        ".gitlab-ci.yml",
        "requirements.txt",
    ):
        assert (repo / path).is_file(), path
    assert not (repo / "components").exists()  # the components are the installed package's
    assert f"kfchaos=={__version__}\n" in (repo / "requirements.txt").read_text()
    lock = read_lock(repo / "pipelines/versions.lock.yaml")
    assert lock["my-experiment"].version_source == "experiments/my-experiment.yaml (metadata.version)"
    assert all(not Path(entry.file).is_absolute() for entry in lock.values())

    validate = team.sh("kfchaos validate experiments/*.yaml")
    assert validate.returncode == 0, validate.stderr
    first = _outputs(repo)
    for _ in range(2):
        compiled = team.kfchaos("compile")
        assert compiled.returncode == 0, compiled.stderr
        assert _outputs(repo) == first
    check = team.kfchaos("compile", "--check")
    assert check.returncode == 0 and "up to date" in check.stderr, check.stderr
    doctor = team.kfchaos(
        "doctor", "--experiment", "experiments/my-experiment.yaml", KUBECONFIG=str(tmp_path / "no-kubeconfig")
    )
    assert doctor.returncode == 5, doctor.stdout + doctor.stderr

    # Upload, the schedules and a submitted run, against the loopback KFP API server (tests/support/kfpapi.py).
    with KfpApiServer() as kfp_api:
        home = str(tmp_path / "home")  # kfp.Client reads ~/.config/kfp/context.json: none here
        uploaded = team.kfchaos("upload", "--host", kfp_api.url, HOME=home)
        assert uploaded.returncode == 0, uploaded.stdout + uploaded.stderr
        names = {p["display_name"] for p in kfp_api.state.pipelines.values()}
        assert names == {"my-experiment", "kfchaos-experiment"}
        synced = team.kfchaos("schedule", "sync", "manifests/schedules.yaml", "--host", kfp_api.url, HOME=home)
        assert synced.returncode == 0, synced.stdout + synced.stderr
        assert {r["display_name"] for r in kfp_api.state.recurring.values()} == {"my-experiment-nightly"}
        submitted = team.kfchaos("run", "experiments/my-experiment.yaml", "--host", kfp_api.url, HOME=home)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        (run,) = kfp_api.state.runs.values()
        assert (
            run["runtime_config"]["parameters"]["experiment"] == (repo / "experiments/my-experiment.yaml").read_text()
        )

    # CI's own steps, as the templates run them: the pin installs (already satisfied: no download), then the checks.
    workflow = yaml.safe_load((repo / ".github/workflows/kfchaos.yml").read_text())
    steps = [step["run"] for step in workflow["jobs"]["check"]["steps"] if "run" in step]
    gitlab = yaml.safe_load((repo / ".gitlab-ci.yml").read_text())
    steps += [*gitlab["default"]["before_script"], *gitlab["check"]["script"]]
    assert any("compile --check" in s for s in steps) and any("requirements.txt" in s for s in steps)
    for step in steps:
        done = team.sh(step)
        assert done.returncode == 0, f"{step}: {done.stdout}{done.stderr}"

    up = team.kfchaos("demo", "up", timeout=600)
    try:
        assert up.returncode == 0, up.stderr
        team.demo = _exports(repo / "runs/.work/demo-up.env")
        # With the demo stack up, a second experiment gets its control baseline, as the experiment's own.
        second = team.kfchaos("init", "--repo", "experiments/checked.yaml")
        assert second.returncode == 0, second.stderr
        assert "kept README.md" in second.stdout and "kept .github/workflows/kfchaos.yml" in second.stdout
        assert (repo / "baselines/checked.baseline.yaml").is_file()
        assert (repo / "baselines/checked.baseline.control.parquet").is_file()
        assert team.kfchaos("compile", "--check").returncode == 0
        run = team.kfchaos(
            "run", "experiments/checked.yaml", "--local", "--target", team.demo["KFCHAOS_TARGET"], timeout=900
        )
        assert run.returncode in (0, 1, 2), run.stdout[-3000:] + run.stderr[-3000:]
        folder = RUN_FOLDER.search(run.stdout)
        assert folder, run.stdout[-3000:]
        rejudged = team.kfchaos("verdict", "--run", folder.group(1))
        assert rejudged.returncode == run.returncode, rejudged.stdout[-2000:] + rejudged.stderr
        verified = team.kfchaos("audit", "verify", folder.group(1))
        assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr
        assert "trusted here (your own key" in verified.stdout
    finally:
        down = team.kfchaos("demo", "down")
    assert down.returncode == 0, down.stderr
