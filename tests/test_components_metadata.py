"""Every component folder carries what kubeflow/pipelines-components keeps beside a component: a README.md that
says what it calls in kfchaos, and a metadata.yaml whose name is the folder's and whose KFP version is the one
pyproject.toml pins (so a KFP bump that forgets the metadata fails here)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# The component's code is in the package (kfchaos/kfp/components/<name>/component.py); its compiled component.yaml,
# README and metadata.yaml in the repository's components/<name>/.
SOURCES = ROOT / "src" / "kfchaos" / "kfp" / "components"
FOLDERS = sorted(ROOT / "components" / p.parent.name for p in SOURCES.glob("*/component.py"))


def _kfp_pin() -> str:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [d.split("==", 1)[1] for d in dependencies if re.match(r"kfp==", d)]
    assert len(pins) == 1, dependencies
    return pins[0]


def test_every_component_has_its_metadata_and_readme() -> None:
    assert len(FOLDERS) >= 10
    pin = _kfp_pin()
    for folder in FOLDERS:
        metadata = yaml.safe_load((folder / "metadata.yaml").read_text())
        assert metadata["name"] == folder.name, folder
        assert metadata["stability"] in {"alpha", "beta", "stable"}, folder
        versions = {d["name"]: d["version"] for d in metadata["dependencies"]["kubeflow"]}
        assert versions == {"Pipelines": pin}, folder
        assert (ROOT / metadata["links"]["source"]).is_file(), folder
        readme = (folder / "README.md").read_text()
        called = re.search(r"## What it calls in kfchaos\n\n`(kfchaos\.steps\.\w+)\.(\w+)`", readme)
        assert called, folder
        module, function = called.groups()
        assert f"src/{module.replace('.', '/')}.py" == metadata["links"]["source"], folder
        assert f"{function}(" in (SOURCES / folder.name / "component.py").read_text(), folder
        assert f"def {function}(" in (ROOT / metadata["links"]["source"]).read_text(), folder
