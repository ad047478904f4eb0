"""The wheel a team installs, built from this checkout and installed into a fresh virtualenv outside it: once per
session (building is seconds, installing the dependencies from the package registry tens of seconds)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT


@dataclass(frozen=True)
class Installed:
    wheel: Path
    sdist: Path
    venv: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment with the virtualenv first on PATH and nothing of the checkout's."""
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "KFCHAOS_DEMO_BASELINE"}}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        return {**env, **extra}


def _run(command: list[str], cwd: Path, timeout: float) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, (
        f"{' '.join(command)}: exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """`python -m build` (sdist and wheel) from a copy of the checkout's sources, then `pip install` of the wheel
    into a new virtualenv; the copy keeps the build's own files (build/, *.egg-info) out of the checkout."""
    work = tmp_path_factory.mktemp("package")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = work / "dist"
    # --no-isolation: this environment's setuptools (the test extra pins the build-system's requirement).
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)], work, 300)
    wheel = next(dist.glob("kfchaos-*.whl"))
    sdist = next(dist.glob("kfchaos-*.tar.gz"))
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], work, 120)
    # The dependencies come from the package registry (pip's cache where it has them): what a team's CI does.
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)], work, 900)
    return Installed(wheel, sdist, venv)


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())
