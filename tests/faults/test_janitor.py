"""The janitor (manifests/janitor/): a CronJob running `kfchaos cleanup --older-than`, for runs whose exit
handler never ran (a run cancelled in KFP, kubeflow/pipelines#6101). Its manifests validate strictly, its
command run against the loopback API server sweeps a cancelled run's faults and no live run's, and its RBAC
allows exactly the calls that sweep makes."""

from __future__ import annotations

import shlex
from typing import Any

import kubernetes_validate
import pytest

from kfchaos.cli import main
from kfchaos.units import parse_duration
from kfchaos.validate import load_experiment
from tests.conftest import ROOT
from tests.faults.conftest import make_backend, manifests
from tests.manifests.test_manifests import K8S_VERSIONS, kustomize_build
from tests.manifests.test_rbac import api_call, granted
from tests.support.kubeapi import KubeApiServer
from tests.support.rbac import Attributes, RbacAuthorizer, service_account_groups, service_account_user

JANITOR = ROOT / "manifests" / "janitor"


@pytest.fixture(scope="module")
def built() -> list[dict[str, Any]]:
    return kustomize_build(JANITOR)


def cronjob(built: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [o for o in built if o["kind"] == "CronJob"]
    return job


def janitor_args(built: list[dict[str, Any]]) -> list[str]:
    (container,) = cronjob(built)["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["kfchaos"]
    return list(container["args"])


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_janitor_manifests_validate_strictly(built: list[dict[str, Any]], version: str) -> None:
    assert {o["kind"] for o in built} == {"ServiceAccount", "CronJob", "Role", "RoleBinding"}
    for obj in built:
        kubernetes_validate.validate(obj, version, strict=True)


def test_janitor_never_sweeps_a_fault_a_live_run_may_hold(built: list[dict[str, Any]]) -> None:
    """--older-than exceeds every shipped experiment's safety.max_fault_duration (no fault object is rendered
    to live longer), and the bound is what the README states."""
    older_than = parse_duration(flag(janitor_args(built), "--older-than"))
    for path in [*sorted((ROOT / "experiments").glob("*.yaml")), ROOT / "scripts/e2e/experiment.yaml"]:
        if path.name == "schema.json":
            continue
        experiment = load_experiment(path)
        assert older_than > experiment.spec.safety.max_fault_duration, path
    job = cronjob(built)["spec"]
    assert job["schedule"] == "*/15 * * * *" and job["concurrencyPolicy"] == "Forbid"
    assert older_than == 3 * 3600  # README "Reliability": gone at most 3h15m after creation


def test_janitor_command_sweeps_the_cancelled_run_only_and_its_rbac_allows_each_call(
    built: list[dict[str, Any]],
) -> None:
    with KubeApiServer(inject_delay=0.01) as server:
        for index in range(2):
            server.add_pod("llm-serving", f"vllm-{index}", {"app.kubernetes.io/name": "vllm"})
        backend = make_backend(server.url)
        server.clock_offset = -4 * 3600.0  # the cancelled run applied its faults four hours ago
        for manifest in manifests("run-cancelled"):
            backend.apply(manifest)
        server.clock_offset = 0.0
        for manifest in manifests("run-live"):
            backend.apply(manifest)
        server.requests.clear()
        args = janitor_args(built)
        assert main([*args, "--host", server.url]) == 0, shlex.join(args)
        left = {o["metadata"]["labels"]["kfchaos.io/run-id"] for o in server.chaos_objects()}
        assert left == {"run-live"}
        calls = {api_call(method, path) for method, path in server.requests}
    namespace = flag(args, "--namespace")
    user = service_account_user("kubeflow", "kfchaos-janitor")
    authorizer = RbacAuthorizer(built)
    groups = service_account_groups("kubeflow")
    denied = [c for c in calls if not authorizer.authorize(user, groups, Attributes(c[2], c[0], c[1], namespace))[0]]
    assert denied == []
    # Nothing beyond list and delete (deletes of kinds with no leftover here are the same rule for other kinds).
    assert {verb for _, _, verb in granted(built)} == {verb for _, _, verb in calls} == {"list", "delete"}
    assert {(g, r) for g, r, _ in granted(built)} == {(g, r) for g, r, _ in calls}
