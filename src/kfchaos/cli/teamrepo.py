"""The files `kfchaos init --repo` lays out in a team's repository, from the templates in kfchaos/data/repo/.

One table says where each template goes (a dotted name in the repository, an undotted one in the package: a
package's data files are found by globs that skip dotted names). Templates name what differs per repository as
@KFCHAOS_VERSION@ (the pinned kfchaos), @EXPERIMENT_FILE@ and @EXPERIMENT_NAME@ (the starter), @NAMESPACE@ (its
target namespace). The manifests under manifests/base and manifests/target-namespace are this repository's own
(tests/manifests checks they are the same files).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from kfchaos import __version__

TEMPLATES = "data/repo"

# template (under kfchaos/data/repo/) -> path in the team's repository; @NAMESPACE@ in a path is replaced too.
LAYOUT: dict[str, str] = {
    "README.md": "README.md",
    "requirements.txt": "requirements.txt",
    "gitignore": ".gitignore",
    "github/workflows/kfchaos.yml": ".github/workflows/kfchaos.yml",
    "github/workflows/kfchaos-gate.yml": ".github/workflows/kfchaos-gate.yml",
    "gitlab-ci.yml": ".gitlab-ci.yml",
    "baselines-README.md": "baselines/README.md",
    "manifests/kustomization.yaml": "manifests/kustomization.yaml",
    "manifests/schedules.yaml": "manifests/schedules.yaml",
    "manifests/overlays/namespace.yaml": "manifests/overlays/@NAMESPACE@/kustomization.yaml",
    "manifests/base/kustomization.yaml": "manifests/base/kustomization.yaml",
    "manifests/base/serviceaccount.yaml": "manifests/base/serviceaccount.yaml",
    "manifests/base/pipeline-runner-binding.yaml": "manifests/base/pipeline-runner-binding.yaml",
    "manifests/base/crd-reader.yaml": "manifests/base/crd-reader.yaml",
    "manifests/target-namespace/kustomization.yaml": "manifests/target-namespace/kustomization.yaml",
    "manifests/target-namespace/namespace.yaml": "manifests/target-namespace/namespace.yaml",
    "manifests/target-namespace/role.yaml": "manifests/target-namespace/role.yaml",
}


@dataclass(frozen=True)
class Starter:
    """What the templates need to know of the starter experiment."""

    file: str  # relative to the repository root, e.g. experiments/my-experiment.yaml
    name: str  # metadata.name
    namespace: str  # spec.target.namespace


def pinned_version() -> str:
    """The kfchaos version CI installs: this one, which compiles the pipelines the repository commits."""
    return __version__


def render(text: str, starter: Starter) -> str:
    values = {
        "@KFCHAOS_VERSION@": pinned_version(),
        "@EXPERIMENT_FILE@": starter.file,
        "@EXPERIMENT_NAME@": starter.name,
        "@NAMESPACE@": starter.namespace,
    }
    for token, value in values.items():
        text = text.replace(token, value)
    return text


def files(starter: Starter) -> dict[str, str]:
    """Each file of the layout (path in the repository -> its text), rendered for this starter."""
    root = resources.files("kfchaos").joinpath(TEMPLATES)
    return {
        render(destination, starter): render(root.joinpath(template).read_text(encoding="utf-8"), starter)
        for template, destination in LAYOUT.items()
    }
