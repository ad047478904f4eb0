"""What a compiled pipeline needs from the KFP backend, and whether the backend's version has it (pure).

The backend reports its version as `tag_name` in its healthz answer (kubeflow/pipelines
frontend/server/handlers/healthz.ts reads `commit_sha`, `tag_name`, `multi_user` from the API server's
healthz and serves them as `apiServerTagName` etc. through ml-pipeline-ui).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Requirement:
    feature: str
    minimum: Version
    why: str


# dsl.OneOf compiles to `valueFromOneof` DAG outputs; a backend before 2.4 cannot resolve them (the minimum
# as issue 12 states it; not re-verified against KFP's release notes).
ONE_OF = Requirement("dsl.OneOf outputs", (2, 4, 0), "KFP backends before 2.4 cannot resolve valueFromOneof")
# kfp-kubernetes writes `optional` into secretAsEnv; drivers before 2.15 either ignore it (the Secret becomes
# required: CreateContainerConfigError, kubeflow/pipelines#12216) or refuse the field ("unknown field
# \"optional\" in kfp_kubernetes.SecretAsEnv", kubeflow/pipelines#12495).
OPTIONAL_SECRET = Requirement(
    "optional Secret as env", (2, 15, 0), "drivers before 2.15 make the Secret required or refuse the field"
)
# A ParallelFor (`parameterIterator`): the tune sweep's loop over its configurations (kfchaos.kfp.pipelines.
# tune_sweep; sharded stages are plain tasks, docs/pipelines.md). Before 2.17.0 a ParallelFor's state did not
# propagate up to its parent DAG, which stayed Running (kubeflow/pipelines#13321, #11979; fixed by #13322, first in
# 2.17.0). 2.17.0 is the first version with that fix, not a version seen to run the sweep.
PARALLEL_FOR = Requirement(
    "ParallelFor (the tune sweep)",
    (2, 17, 0),
    "before 2.17 a ParallelFor's state never reached its parent DAG, which stayed Running (#13321)",
)


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def secrets_as_env(documents: Iterable[Any]) -> list[dict[str, Any]]:
    """Every secretAsEnv entry of the pipeline's platform spec (kfp-kubernetes)."""
    return [entry for doc in documents for key, value in _walk(doc) if key == "secretAsEnv" for entry in value]


def requirements(documents: Iterable[Any]) -> list[Requirement]:
    """The backend features the compiled pipeline (its YAML documents: spec and platform spec) uses."""
    documents = list(documents)
    keys = {key for doc in documents for key, _ in _walk(doc)}
    found = []
    if "valueFromOneof" in keys:
        found.append(ONE_OF)
    if any("optional" in entry for entry in secrets_as_env(documents)):
        found.append(OPTIONAL_SECRET)
    if "parameterIterator" in keys:
        found.append(PARALLEL_FOR)
    return found


def parse_version(tag: str) -> Version | None:
    """`2.15.0`, `v2.5.0`, `2.15.0-rc.1` -> (2, 15, 0); None for dev builds and anything else."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?", tag.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def show(version: Version) -> str:
    return ".".join(map(str, version))


def missing(version: Version, needed: Iterable[Requirement]) -> list[Requirement]:
    return [r for r in needed if version < r.minimum]
