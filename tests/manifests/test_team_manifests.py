"""The manifests `kfchaos init --repo` writes into a team's repository: the same base and target-namespace files as
this repository's manifests/ (one source: the package ships copies, and this test holds them equal), a kustomize
build that validates strictly, the overlay for the starter's namespace, and a schedules file that loads."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import kubernetes_validate
import pytest

from kfchaos.cli import teamrepo
from kfchaos.kfp.schedules import load_schedules
from tests.conftest import ROOT
from tests.manifests.test_manifests import K8S_VERSIONS, kustomize_build

STARTER = teamrepo.Starter(file="experiments/latency.yaml", name="latency", namespace="llm-team")


def _write(folder: Path) -> Path:
    for where, text in teamrepo.files(STARTER).items():
        (folder / where).parent.mkdir(parents=True, exist_ok=True)
        (folder / where).write_text(text)
    return folder / "manifests"


def test_the_shipped_copies_are_this_repositorys_manifests() -> None:
    shipped = resources.files("kfchaos").joinpath(teamrepo.TEMPLATES, "manifests")
    for part in ("base", "target-namespace"):
        ours = sorted(p.name for p in (ROOT / "manifests" / part).glob("*.yaml"))
        theirs = sorted(p.name for p in shipped.joinpath(part).iterdir() if p.name.endswith(".yaml"))
        assert ours == theirs, part
        for name in ours:
            assert shipped.joinpath(part, name).read_text() == (ROOT / "manifests" / part / name).read_text(), name


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_team_manifests_build_and_validate(tmp_path: Path, version: str) -> None:
    built = kustomize_build(_write(tmp_path))
    kinds = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in built}
    assert ("Namespace", "llm-team", None) in kinds
    assert ("Role", "kfchaos-fault-injector", "llm-team") in kinds
    assert ("ServiceAccount", "kfchaos-runner", "kubeflow") in kinds
    for obj in built:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_schedules_file_names_the_starters_pipeline(tmp_path: Path) -> None:
    schedules = load_schedules(_write(tmp_path) / "schedules.yaml")
    assert [(s.name, s.pipeline) for s in schedules.schedules] == [("latency-nightly", "latency")]
    assert schedules.service_account == "kfchaos-runner"
