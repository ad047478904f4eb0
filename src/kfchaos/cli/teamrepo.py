"""The files `kfchaos init --repo` lays out in a team's repository, from the templates in kfchaos/data/repo/.

One table says where each template goes (a dotted name in the repository, an undotted one in the package: a
package's data files are found by globs that skip dotted names). Templates name what differs per repository as
@KFCHAOS_VERSION@ (the pinned kfchaos), @EXPERIMENT_FILE@ and @EXPERIMENT_NAME@ (the starter), @NAMESPACE@ (its
target namespace). The manifests under manifests/base and manifests/target-namespace are this repository's own
(tests/manifests checks they are the same files).

What a template takes from the experiment is held to a plain form before it is rendered (`Starter`): the file a path
of plain words (`STARTER_FILE`), the name and namespace DNS labels. Those values land in YAML (a workflow's `env`, a
GitLab `variables` entry), in Markdown and in file paths, never in a shell line: the CI templates' `run:` and
`script:` lines read them only as quoted environment variables ("$EXPERIMENT"), and no `run:` line holds a `${{ }}`
expression at all (GitHub substitutes those into the script's text before the shell reads it: the classic script
injection, docs.github.com "Security hardening for GitHub Actions", "Understanding the risk of script injections").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from kfchaos import __version__
from kfchaos.errors import KfchaosError
from kfchaos.types import DNS_LABEL

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


# The starter's path in the repository: folders and a file name of letters, digits and `_.-`, none starting with
# `.` or `-` (so no `..`, no hidden file, nothing a command reads as an option), relative, at most 255 characters.
# No quote, `$`, backtick, space or line break can reach the YAML, Markdown or shell that names the file.
STARTER_FILE = re.compile(r"(?=.{1,255}$)[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*", re.ASCII)


def file_problem(file: str) -> str | None:
    """Why `file` cannot be the starter's path in the team's repository (STARTER_FILE), or None."""
    if STARTER_FILE.fullmatch(file):
        return None
    return (
        f"{file[:120]!r} is not a plain path inside this folder: folders and a file name of letters, digits and "
        "`_.-`, none starting with `.` or `-` (CI writes the path into YAML and reads it in shell)"
    )


@dataclass(frozen=True)
class Starter:
    """What the templates need to know of the starter experiment, refused unless each is in its plain form."""

    file: str  # relative to the repository root, e.g. experiments/my-experiment.yaml
    name: str  # metadata.name
    namespace: str  # spec.target.namespace

    def __post_init__(self) -> None:
        problem = file_problem(self.file)
        if problem:
            raise KfchaosError(f"init --repo: FILE: {problem}")
        for field, value in (("metadata.name", self.name), ("spec.target.namespace", self.namespace)):
            if len(value) > 63 or not DNS_LABEL.fullmatch(value):
                raise KfchaosError(f"init --repo: {self.file}: {field}: {value[:120]!r} is not a DNS label")


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
