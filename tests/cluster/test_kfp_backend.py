"""kfchaos against KFP's own API server (issue 24; docs/kfp-backend.md): upload, run --host, schedule sync.

The server is the one scripts/cluster/localcluster/kfp.py starts in the real control plane (its version:
cluster/kfp-apiserver/go.mod). On upload it parses and validates the pipeline spec; on run creation it compiles
the IR into an Argo Workflow (backend/src/v2/compiler/argocompiler) and creates that object in the cluster, where
the real Argo controller executes it on the real node (kfpexec.py). These tests read what the server wrote; runs
taken to their verdict are in tests/cluster/node/test_pipeline_real.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from kfchaos.cli import main
from kfchaos.doctor.diagnose import backend_tag
from kfchaos.kfp.versioning import read_lock
from tests.cluster.conftest import RealCluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def _stop_this_modules_runs(runs_stopped_after: None) -> None:
    """The runs this module submits are stopped at its end (tests/cluster/conftest.py, stop_runs)."""


ROOT = Path(__file__).resolve().parents[2]
LOCK = read_lock(ROOT / "pipelines/versions.lock.yaml")
EXPERIMENT = ROOT / "experiments/vllm-network-delay.yaml"
NAMESPACE = "kubeflow"  # single-user KFP: every run's Workflow is created in the API server's namespace
RUN_ID_LABEL = "pipeline/runid"  # kubeflow/pipelines, backend/src/common/util/consts.go LabelKeyWorkflowRunId


@pytest.fixture(scope="module")
def kfp_host(real_cluster: RealCluster) -> str:
    host = real_cluster.env.kfp_host
    if not host:
        message = "the local control plane did not start KFP's API server (no KFP_HOST in .cluster/env)"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return host


@pytest.fixture(autouse=True)
def _no_kfp_context(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # kfp.Client reads ~/.config/kfp/context.json; keep a developer's real context out of the tests.
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.delenv("KFCHAOS_IMAGE", raising=False)


@pytest.fixture(scope="module")
def custom(real_cluster: RealCluster) -> Iterator[k8s.CustomObjectsApi]:
    with real_cluster.api_client("admin") as api_client:
        yield k8s.CustomObjectsApi(api_client)


def _release(host: str) -> tuple[int, ...]:
    """The server's release from its healthz `tag_name` (e.g. "2.1.0")."""
    return tuple(int(part) for part in backend_tag(host, None).split("."))


def _client(host: str) -> Any:
    import kfp

    return kfp.Client(host=host)


def _copy_lock(root: Path, names: list[str], suffix: str) -> dict[str, str]:
    """A checkout whose lock names each pipeline's compiled file under a version no earlier run uploaded."""
    entries = {}
    versions = {}
    for name in names:
        entry = LOCK[name]
        version = f"{entry.version}-{suffix}"
        target = root / "pipelines/compiled" / name / f"{version}.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / entry.file, target)
        entries[name] = {
            "version": version,
            "ir_hash": entry.ir_hash,
            "file": str(target.relative_to(root)),
            "version_source": entry.version_source,
        }
        versions[name] = version
    (root / "pipelines/versions.lock.yaml").write_text(yaml.safe_dump({"pipelines": entries}))
    return versions


def _version_names(client: Any, pipeline: str) -> set[str]:
    pipeline_id = client.get_pipeline_id(pipeline)
    assert pipeline_id, f"pipeline {pipeline} not on the server"
    response = client.list_pipeline_versions(pipeline_id, page_size=100)
    return {v.display_name for v in response.pipeline_versions or []}


def test_every_compiled_pipeline_is_accepted_by_upload_as_a_new_version(
    kfp_host: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    versions = _copy_lock(tmp_path, sorted(LOCK), uuid.uuid4().hex[:8])
    assert main(["upload", "--host", kfp_host, "--root", str(tmp_path)]) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert out.count("created ") == len(LOCK), out
    # Said plainly for each pipeline: the optional Secrets (the signing key's, for one) need 2.15, which this 2.1.0
    # backend drops with the whole platform spec (test below).
    assert err.count("warning: KFP backend 2.1.0 lacks what") == len(LOCK), err
    assert "optional Secret as env (>= 2.15.0)" in err, err
    client = _client(kfp_host)
    for name, version in versions.items():
        assert version in _version_names(client, name)
    # Idempotent against the real server too.
    assert main(["upload", "--host", kfp_host, "--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("exists ") == len(LOCK)


# --- run --host: the Workflow the server compiles ---------------------------------------------------------


def _workflow(custom: k8s.CustomObjectsApi, run_id: str) -> dict[str, Any]:
    found = custom.list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NAMESPACE, "workflows", label_selector=f"{RUN_ID_LABEL}={run_id}"
    )
    (workflow,) = found["items"]
    return dict(workflow)


def _run_id(client: Any, run_name: str) -> str:
    flt = json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "string_value": run_name}]})
    runs = client.list_runs(page_size=10, filter=flt).runs or []
    assert len(runs) == 1, f"runs named {run_name}: {runs}"
    return str(runs[0].run_id)


def _dag_tasks(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [task for template in workflow["spec"]["templates"] for task in (template.get("dag") or {}).get("tasks", [])]


def _secrets_in_ir(path: Path) -> set[str]:
    """The Secret names the IR's Kubernetes platform config injects as env (kfp-kubernetes use_secret_as_env)."""
    names: set[str] = set()
    for document in yaml.safe_load_all(path.read_text()):
        executors = ((document or {}).get("platforms") or {}).get("kubernetes", {}).get("deploymentSpec", {})
        for config in executors.get("executors", {}).values():
            names.update(secret["secretName"] for secret in config.get("secretAsEnv", []))
    return names


def _submit(kfp_host: str, experiment: Path, root: Path, run_name: str, *extra: str) -> int:
    return main(["run", str(experiment), "--host", kfp_host, "--root", str(root), "--run-name", run_name, *extra])


def test_run_host_creates_a_workflow_as_kfchaos_runner_with_the_target_secret_and_the_exit_handler(
    kfp_host: str, custom: k8s.CustomObjectsApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["upload", "vllm-network-delay", "--host", kfp_host, "--root", str(ROOT)]) == 0
    run_name = f"kfp-backend-{uuid.uuid4().hex[:8]}"
    assert _submit(kfp_host, EXPERIMENT, ROOT, run_name) == 0, capsys.readouterr().err
    workflow = _workflow(custom, _run_id(_client(kfp_host), run_name))

    # The identity: resource_manager.go CreateRun sets the run's service account on the Workflow.
    assert workflow["spec"]["serviceAccountName"] == "kfchaos-runner"

    # The target Secret as env: the API server reads the IR's second document, the Kubernetes platform spec
    # (apiserver/template/v2_template.go, IsPlatformSpecWithKubernetesConfig) and the argocompiler hands each
    # task's executor config to its driver (argocompiler/container.go, the `kubernetes-config` parameter).
    secrets = _secrets_in_ir(ROOT / LOCK["vllm-network-delay"].file)
    # The target's credential for the tasks that reach it, the audit's signing key for the verdict task alone.
    assert secrets == {"kfchaos-target", "kfchaos-signing-key"}
    configs = [
        json.loads(parameter["value"])
        for task in _dag_tasks(workflow)
        for parameter in (task.get("arguments") or {}).get("parameters", [])
        if parameter["name"] == "kubernetes-config"
    ]
    as_env = [s for config in configs for s in config.get("secretAsEnv", [])]
    # KFP 2.1.0 (the backend built here) parses the platform spec with protojson against the release's own
    # PlatformSpec, which has no `pipelineConfig` (kfp>=2.14 writes one): the parse fails, the function answers
    # False, and the whole document is dropped without an error. The Workflow then carries no Secret at all: the
    # run would start without the target's credentials. kfchaos doctor refuses such a backend for this pipeline
    # (test_kfp_rerun_doctor.py); this is the behaviour it guards against.
    assert _release(kfp_host) < (2, 15, 0)
    assert not as_env and "kfchaos-target" not in json.dumps(workflow)

    # The cleanup exit handler: a task that runs whatever its upstream ended as
    # (argocompiler/dag.go depends_exit_handler: `.Succeeded || .Skipped || .Failed || .Errored`).
    exit_tasks = [t for t in _dag_tasks(workflow) if ".Failed" in (t.get("depends") or "")]
    assert exit_tasks, "no exit-handler task in the Workflow"
    assert any("cleanup" in t["name"] for t in exit_tasks), [t["name"] for t in exit_tasks]
    # Argo executes it on the real node: stop it, the Workflow was all this test reads.
    _client(kfp_host).terminate_run(_run_id(_client(kfp_host), run_name))


def _sharded_checkout(root: Path, name: str) -> Path:
    """A checkout with one extra experiment whose traffic is split over 4 shards, compiled by `kfchaos compile`."""
    ignore = shutil.ignore_patterns("__pycache__", "*.yaml", "compiled")
    shutil.copytree(ROOT / "components", root / "components", ignore=ignore)
    shutil.copytree(ROOT / "pipelines", root / "pipelines", ignore=ignore)
    shutil.copytree(ROOT / "experiments", root / "experiments")
    if (ROOT / "baselines").is_dir():
        shutil.copytree(ROOT / "baselines", root / "baselines")
    for path in (ROOT / "pipelines").glob("*.yaml"):
        shutil.copy(path, root / "pipelines" / path.name)
    document = yaml.safe_load(EXPERIMENT.read_text())
    document["metadata"]["name"] = name
    document["metadata"]["version"] = "1.0.0"
    document["spec"]["traffic"]["shards"] = 4
    experiment = root / "experiments" / f"{name}.yaml"
    experiment.write_text(yaml.safe_dump(document, sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-m", "kfchaos", "compile", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return experiment


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sharded")
    experiment = _sharded_checkout(root, f"sharded-{uuid.uuid4().hex[:6]}")
    return root, experiment


def test_a_sharded_pipeline_runs_on_2_1_0_as_one_plain_task_per_shard(
    kfp_host: str, custom: k8s.CustomObjectsApi, sharded: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 45: a sharded stage is unrolled at compile time (one task per shard, each shard's outputs inputs of the
    merge's own), not a ParallelFor collected with dsl.Collected, whose run KFP 2.1.0's server refused in Argo's
    validation ("sorting failed: invalid dependency for-loop-N", resource_manager.go CreateRun). The server takes
    the run and its Workflow holds every shard task of every stage; the node runs one in
    tests/cluster/node/test_pipeline_real.py."""
    root, experiment = sharded
    name = experiment.stem
    assert main(["upload", name, "--host", kfp_host, "--root", str(root)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    run_name = f"kfp-sharded-{uuid.uuid4().hex[:8]}"
    assert _release(kfp_host) < (2, 14, 0)
    code = _submit(kfp_host, experiment, root, run_name)
    assert code == 0, capsys.readouterr().err
    run_id = _run_id(_client(kfp_host), run_name)
    try:
        names = [task["name"] for task in _dag_tasks(_workflow(custom, run_id))]
        stages = len(yaml.safe_load(experiment.read_text())["spec"]["traffic"]["stages"])
        assert len({n for n in names if n.startswith("replay-shard") and not n.endswith("driver")}) == 4 * stages
        assert not any("for-loop" in n for n in names), names
    finally:
        # Argo executes it on the real node: stop it, the Workflow was all this test reads.
        _client(kfp_host).terminate_run(run_id)


# --- schedule sync: ScheduledWorkflow objects ------------------------------------------------------------


def _swfs(custom: k8s.CustomObjectsApi, prefix: str) -> list[dict[str, Any]]:
    found = custom.list_namespaced_custom_object("kubeflow.org", "v1beta1", NAMESPACE, "scheduledworkflows")
    return [item for item in found["items"] if item["metadata"]["name"].startswith(prefix)]


def _recurring(client: Any, name: str) -> list[Any]:
    return [r for r in client.list_recurring_runs(page_size=100).recurring_runs or [] if r.display_name == name]


def test_schedule_sync_creates_a_scheduled_workflow_and_a_second_sync_changes_nothing(
    kfp_host: str, custom: k8s.CustomObjectsApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["upload", "vllm-network-delay", "--host", kfp_host, "--root", str(ROOT)]) == 0
    suffix = uuid.uuid4().hex[:6]
    schedule_name = f"nightly-{suffix}"
    version = LOCK["vllm-network-delay"].version
    schedules = tmp_path / "schedules.yaml"
    schedules.write_text(
        f"experiment: chaos-{suffix}\n"
        "schedules:\n"
        f"  - name: {schedule_name}\n"
        "    pipeline: vllm-network-delay\n"
        f"    version: {version}\n"
        '    cron: "0 0 2 * * *"\n'
        '    parameters: {target: "http://vllm:8000"}\n'
    )

    def sync() -> int:
        return main(["schedule", "sync", str(schedules), "--host", kfp_host, "--root", str(ROOT)])

    assert sync() == 0, capsys.readouterr().err
    client = _client(kfp_host)
    (recurring,) = _recurring(client, schedule_name)
    pipeline_id = client.get_pipeline_id("vllm-network-delay")
    versions = client.list_pipeline_versions(pipeline_id, page_size=100).pipeline_versions
    version_id = next(v.pipeline_version_id for v in versions if v.display_name == version)
    assert recurring.pipeline_version_reference.pipeline_version_id == version_id
    assert recurring.service_account == "kfchaos-runner"

    # The object the ScheduledWorkflow controller acts on: GenerateName from the job's name, the cron trigger,
    # and the compiled Workflow spec with the run identity (apiserver/template/v2_template.go ScheduledWorkflow,
    # setDefaultServiceAccount).
    (swf,) = _swfs(custom, schedule_name)
    assert swf["spec"]["trigger"]["cronSchedule"]["cron"] == "0 0 2 * * *"
    workflow_spec = swf["spec"]["workflow"]["spec"]
    workflow_spec = json.loads(workflow_spec) if isinstance(workflow_spec, str) else workflow_spec
    assert workflow_spec["spec"]["serviceAccountName"] == "kfchaos-runner"
    parameters = {p["name"]: p["value"] for p in swf["spec"]["workflow"].get("parameters", [])}
    # Each runtime parameter is stored JSON-encoded (template.go stringMapToCRDParameters marshals the value).
    assert json.loads(parameters["target"]) == "http://vllm:8000"

    # The controller writes status as it schedules; what sync owns is the object itself and its spec.
    capsys.readouterr()
    assert sync() == 0
    assert [r.recurring_run_id for r in _recurring(client, schedule_name)] == [recurring.recurring_run_id]
    (again,) = _swfs(custom, schedule_name)
    assert again["metadata"]["uid"] == swf["metadata"]["uid"]
    assert again["spec"] == swf["spec"]


# --- run --wait: a run's state as the API server reports it ----------------------------------------------


def _eventually(what: str, check: Any, timeout: float = 60.0) -> Any:
    """Poll `check` until it returns something truthy; bounded (a missing outcome fails, a slow one does not)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what}: not reached within {timeout:g}s")


def _workflow_or_none(custom: k8s.CustomObjectsApi, run_id: str) -> dict[str, Any] | None:
    found = custom.list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NAMESPACE, "workflows", label_selector=f"{RUN_ID_LABEL}={run_id}"
    )
    return dict(found["items"][0]) if found["items"] else None


def test_a_run_cancelled_through_the_api_ends_inconclusive_under_wait(
    kfp_host: str, custom: k8s.CustomObjectsApi, tmp_path: Path
) -> None:
    """Terminated through the API while Argo runs it on the real node: the server marks it CANCELING and sets the
    Workflow's activeDeadlineSeconds to 0 (resource_manager.go TerminateRun, TerminateWorkflow), Argo's controller
    stops it, the persistence agent reports its end, and `run --wait` says INCONCLUSIVE (exit 2): a run stopped
    before its verdict is never a PASS. Nothing here plays Argo's or the agent's part."""
    assert main(["upload", "vllm-network-delay", "--host", kfp_host, "--root", str(ROOT)]) == 0
    run_name = f"kfp-cancel-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, "-m", "kfchaos", "run", str(EXPERIMENT), "--host", kfp_host, "--root", str(ROOT)]
    argv += ["--run-name", run_name, "--wait", "--poll", "1s", "--wait-timeout", "10m"]
    env = {**os.environ, "HOME": str(tmp_path)}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as follower:
        try:
            client = _client(kfp_host)
            flt = json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "string_value": run_name}]})
            (run,) = _eventually("the run", lambda: client.list_runs(page_size=10, filter=flt).runs)
            _eventually("its Workflow", lambda: _workflow_or_none(custom, run.run_id))
            client.terminate_run(run.run_id)
            workflow = _workflow_or_none(custom, run.run_id)
            assert workflow is not None and workflow["spec"]["activeDeadlineSeconds"] == 0
            out, err = follower.communicate(timeout=600)
        finally:
            if follower.poll() is None:
                follower.kill()
    # Argo fails a Workflow whose deadline passed; 2.1.0 then reports that final phase, so a cancelled run ends
    # FAILED on this backend (CANCELED is what newer backends report).
    assert client.get_run(run.run_id).state in {"FAILED", "CANCELED"}
    assert follower.returncode == 2, out + err
    assert "before its verdict" in out + err, out + err
