"""The compiled IR has the shape the design promises: exit-handler cleanup, gated stages, no cache, secrets, TTL."""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import ROOT

PIPELINE = ROOT / "pipelines/compiled/vllm-network-delay/1.2.1.yaml"


def _load() -> tuple[dict[str, Any], dict[str, Any]]:
    spec, platform = list(yaml.safe_load_all(PIPELINE.read_text()))
    return spec, platform


def _all_tasks(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    tasks = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        tasks.update(component.get("dag", {}).get("tasks", {}))
    return tasks


def test_cleanup_is_the_exit_task_and_depends_on_nothing() -> None:
    spec, _ = _load()
    root_tasks = spec["root"]["dag"]["tasks"]
    cleanup = root_tasks["cleanup"]
    assert cleanup["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert cleanup["dependentTasks"] == ["exit-handler-1"]
    run_id = cleanup["inputs"]["parameters"]["run_id"]["runtimeValue"]["constant"]
    assert run_id == "{{$.pipeline_job_uuid}}"


def test_each_stage_reads_the_previous_gates_decision_and_the_graph_has_no_branches() -> None:
    """KFP 2.1.0 runs neither dsl.If/Else/OneOf nor a renamed producer task (kfchaos.kfp.pipelines): every
    stage's replay takes the previous gate's decision as an input, no task has a trigger condition, and no task
    but the exit handler's has a display name of its own."""
    spec, _ = _load()
    tasks = _all_tasks(spec)
    replays = {n: t for n, t in tasks.items() if t["componentRef"]["name"].startswith("comp-replay-stage")}
    assert len(replays) == 5
    for name, task in replays.items():
        decision = task["inputs"]["parameters"]["decision"]["taskOutputParameter"]
        assert decision["outputParameterKey"] == "decision", name
        assert decision["producerTask"].startswith("stage-gate"), name
    assert not [n for n, t in tasks.items() if "condition" in t.get("triggerPolicy", {})]
    renamed = {n for n, t in tasks.items() if t.get("taskInfo", {}).get("name") not in (n, None)}
    assert renamed <= {"cleanup", "exit-handler-1"}  # the exit task and the ExitHandler's DAG: nothing reads them


def test_caching_is_off_for_every_task_that_touches_the_cluster_or_time() -> None:
    spec, _ = _load()
    pure = ("stage-gate",)
    for name, task in _all_tasks(spec).items():
        if "componentRef" not in task or task["componentRef"]["name"].startswith("comp-condition"):
            continue
        if task["componentRef"]["name"].startswith(("comp-exit-handler", "comp-condition-branches")):
            continue
        cached = task.get("cachingOptions", {}).get("enableCache", False)
        assert cached == name.startswith(pure), name


def test_credentials_come_from_a_secret_and_the_pipeline_has_a_ttl() -> None:
    spec, platform = _load()
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    with_secret = {name for name, e in executors.items() if e.get("secretAsEnv")}
    assert {"exec-replay-stage", "exec-steady-state", "exec-remove-faults"} <= {
        n.rsplit("-", 1)[0] if n[-1].isdigit() else n for n in with_secret
    }
    env = executors["exec-replay-stage"]["secretAsEnv"][0]["keyToEnv"][0]
    assert env == {"envVar": "KFCHAOS_TARGET_TOKEN", "secretKey": "token"}
    assert platform["platforms"]["kubernetes"]["pipelineConfig"]["resourceTtlOnCompletion"] == 86400
    assert "KFCHAOS_TARGET_TOKEN" not in spec["root"]["inputDefinitions"]["parameters"]


def test_only_the_verdict_task_gets_the_signing_key() -> None:
    # The audit record's signing key (kfchaos.signing): no task that replays traffic or talks to the target holds it.
    _, platform = _load()
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    holders = {
        name: entry
        for name, e in executors.items()
        for entry in e.get("secretAsEnv", [])
        if entry.get("secretName", entry.get("secretNameParameter", {}).get("runtimeValue", {}).get("constant"))
        == "kfchaos-signing-key"
    }
    assert list(holders) == ["exec-verdict-report"]
    assert holders["exec-verdict-report"]["keyToEnv"] == [
        {"envVar": "KFCHAOS_SIGNING_KEY", "secretKey": "signing-key.pem"}
    ]
    assert holders["exec-verdict-report"]["optional"] is True


def test_components_run_on_the_package_image() -> None:
    from kfchaos import __version__

    spec, _ = _load()
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {f"ghcr.io/kfchaos/kfchaos:{__version__}"}
