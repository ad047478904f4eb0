"""Fixtures for the KFP glue tests: a scratch copy of the repository's pipeline sources, the loopback KFP API."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kfchaos.demo.stack.demostack import DemoStack, ServerSettings
from tests.conftest import ROOT
from tests.support.kfpapi import KfpApiServer

KFCHAOS = [sys.executable, "-m", "kfchaos"]


def copy_sources(dest: Path) -> Path:
    """What `kfchaos compile` reads from a repository: experiments/, baselines/, the components/ folders (their
    READMEs; no outputs). The pipeline and its components are the installed package's."""
    ignore = shutil.ignore_patterns("__pycache__", "*.yaml", "compiled")
    shutil.copytree(ROOT / "components", dest / "components", ignore=ignore)
    shutil.copytree(ROOT / "pipelines", dest / "pipelines", ignore=ignore)
    shutil.copytree(ROOT / "experiments", dest / "experiments")
    if (ROOT / "baselines").is_dir():
        shutil.copytree(ROOT / "baselines", dest / "baselines")
    return dest


def kfchaos(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The command in a fresh process (env: variables added to this one's; cwd: where it runs)."""
    return subprocess.run(
        [*KFCHAOS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


@pytest.fixture
def kfp_api() -> Iterator[KfpApiServer]:
    with KfpApiServer() as api:
        yield api


@pytest.fixture(autouse=True)
def _no_kfp_context(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # kfp.Client reads ~/.config/kfp/context.json; keep a developer's real context out of the tests.
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.delenv("KFCHAOS_IMAGE", raising=False)


@pytest.fixture
def stack() -> Iterator[DemoStack]:
    """The demo LLM server (no Prometheus), for the pipeline runs under kfp.local."""
    demo = DemoStack(ServerSettings(restart_delay_s=0.5), with_prometheus=False).start()
    try:
        yield demo
    finally:
        demo.stop()
