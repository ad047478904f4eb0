"""The whole pipeline through kfp.local (SubprocessRunner, use_venv=False) against a local target (the demo LLM
server), with seconds-long stages: once with the Chaos Mesh backend on the loopback Kubernetes API (real
kubernetes client over HTTP, real CRD schemas), once with the local fault backend (the demo's fault proxy) in
a run whose stage task fails after the faults were injected -- the exit handler must still remove them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kfchaos.demo.stack.demostack import DemoStack
from kfchaos.lease import LeaseRecord
from kfchaos.lease.local import FileLeaseStore
from tests.kfp_glue.conftest import copy_sources, kfchaos
from tests.support.kubeapi import KubeApiServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARSE_COUNT = Path(__file__).resolve().parents[1] / "support" / "parsecount"

EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata:
  name: local-delay
  version: 1.0.0
  owner: test
spec:
  target:
    namespace: demo
    selector:
      labels: {app: demo-llm}
    endpoint: http://127.0.0.1:9
    api: openai-completions
    model: demo/llama-3-8b-sim
    timeout: 5s
  traffic:
    TRAFFIC
    stages: [10, 30]
    stage_duration: 2s
    warmup: 1s
    seed: 1
  faults:
    - name: delay
      type: network-delay
      mode: all
      DURATION
      params: {latency: 20ms}
  slo:
    p99_max: 2s
    min_samples: 20
  baseline:
    file: baselines/none.yaml
  safety:
    max_pod_percent: 100%
    max_fault_duration: 10m
"""
SYNTHETIC = (
    "synthetic: {rate: 200, prompt_tokens: {distribution: fixed, mean: 32},"
    " output_tokens: {distribution: fixed, mean: 4}}"
)


def _repo(tmp_path: Path, traffic: str, duration: str = "") -> Path:
    root = copy_sources(tmp_path / "repo")
    for path in (root / "experiments").glob("*.yaml"):
        path.unlink()
    text = EXPERIMENT.replace("TRAFFIC", traffic).replace("DURATION", duration or "mode: all")
    (root / "experiments/local-delay.yaml").write_text(text.replace("mode: all\n      mode: all", "mode: all"))
    return root


def _kube_env(kube: KubeApiServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KFCHAOS_FAULT_BACKEND")}
    return {**env, "KFCHAOS_KUBE_HOST": kube.url}


def _env(stack: DemoStack) -> dict[str, str]:
    return dict(
        os.environ,
        KFCHAOS_FAULT_BACKEND="local",
        KFCHAOS_FAULT_PROXY=stack.control_url,
        KFCHAOS_DEMO_STATE=str(stack.state_file),
    )


def _run_command(root: Path, stack: DemoStack) -> list[str]:
    return [
        sys.executable, "-m", "kfchaos", "run", str(root / "experiments/local-delay.yaml"), "--local",
        "--root", str(root), "--target", stack.target_url, "--output", str(root / "out"),
    ]  # fmt: skip


def _git_commit(root: Path) -> str:
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "experiment"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=30)
    (root / ".gitignore").write_text("out/\n")
    subprocess.run([*git, "add", ".gitignore"], check=True, capture_output=True, timeout=30)
    subprocess.run([*git, "commit", "-q", "-m", "ignore outputs"], check=True, capture_output=True, timeout=30)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True, timeout=30)
    return head.stdout.strip()


def _proxy_faults(stack: DemoStack) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{stack.control_url}/faults", timeout=5) as response:
        items: list[dict[str, Any]] = json.loads(response.read())["items"]
        return items


def _run_dir(root: Path) -> Path:
    (run_dir,) = (root / "out").glob("local-delay-*/local-delay-*")  # the run's own pipeline root, then kfp.local's run
    return run_dir


def test_the_pipeline_runs_end_to_end_on_the_kubernetes_api_and_its_audit_record_verifies(
    tmp_path: Path, stack: DemoStack
) -> None:
    root = _repo(tmp_path, SYNTHETIC, duration="duration: 10m")  # removed by the pipeline, not by expiry
    assert kfchaos("compile", "--root", str(root)).returncode == 0
    commit = _git_commit(root)
    with KubeApiServer(inject_delay=0.2) as kube:
        kube.add_pod("demo", "demo-llm-0", {"app": "demo-llm"})
        command = _run_command(root, stack)
        command[command.index(stack.target_url)] = stack.server_url  # no fault proxy: faults live in the API
        parses = tmp_path / "parses.log"  # every process's parses and renders (tests/support/parsecount)
        env = _kube_env(kube)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PARSE_COUNT), env.get("PYTHONPATH", "")]))
        env["KFCHAOS_TEST_PARSE_LOG"] = str(parses)
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
        created = [path for verb, path in kube.requests if verb == "POST" and "networkchaos" in path]
        left = kube.chaos_objects()
    # No baseline and no Prometheus here: the verdict must say INCONCLUSIVE (exit 2), never PASS.
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ERROR" not in done.stdout.splitlines()[-1], "\n".join(
        line for line in done.stdout.splitlines() if "Error" in line or "Traceback" in line
    )
    assert "INCONCLUSIVE" in done.stdout and "no baseline" in done.stdout
    assert created and left == []
    # Each task parses the experiment once (issue 44), and renders its one cluster fault at most three times: by
    # that parse, for its manifests, and for the object it applies (tests/faults/test_steps_seam.py).
    events = Counter(tuple(line.split()) for line in parses.read_text().splitlines())
    tasks = {(pid, task) for pid, task, _ in events if task != "cli"}
    assert {
        "preflight",
        "baseline",
        "steady_state",
        "replay_stage",
        "collect_metrics",
        "verdict_report",
        "cleanup",
    } <= {task for _, task in tasks}, sorted(tasks)
    assert all(events[(pid, task, "parse")] == 1 for pid, task in tasks), sorted(events.items())
    assert all(events[(pid, task, "render")] <= 3 for pid, task in tasks), sorted(events.items())
    record_path = _run_dir(root) / "verdict-report" / "audit"
    record = json.loads(record_path.read_text())
    steps = [(s["step"], s["stage"], s["status"]) for s in record["steps"]]
    assert steps[0] == ("steady_state", 0, steps[0][2])
    assert [(step, stage) for step, stage, status in steps[1:] if status != "SKIPPED"] == [("stage", 10), ("stage", 30)]
    # The fault is created by its first stage's task (not before the ramp) and watched in both stages.
    (chaos,) = record["chaos_objects"]
    assert chaos["kind"] == "NetworkChaos" and chaos["handle"]["uid"]
    assert chaos["manifest"]["metadata"]["labels"]["kfchaos.io/run-id"] == record["run"]["id"]
    first = next(s for s in record["steps"] if s["step"] == "stage" and s["stage"] == 10)
    assert first["detail"]["chaos_objects"][0]["name"] == chaos["name"]
    assert any(e["verb"] == "create" and e["code"] == 201 for e in chaos["api_events"])
    assert isinstance(chaos["events"], list)
    for step in (s for s in record["steps"] if s["step"] == "stage"):
        (window,) = step["detail"]["fault_windows"]
        assert window["fault"] == "delay" and window["verified"], step["detail"]["fault_windows"]
    assert [p["stage"] for p in record["replay_plans"]] == [10, 30]
    assert all(p["plan_hash"].startswith("sha256:") for p in record["replay_plans"])
    # Removed by its last stage's task (stage 30), so the step after the ramp found nothing left, and recovery
    # runs from that confirmed removal.
    last = next(s for s in record["steps"] if s["step"] == "stage" and s["stage"] == 30)
    removed_at = last["detail"]["fault_windows"][0]["removed_at"]
    assert record["recovery"]["removed"] == 0 and record["recovery"]["removed_at"] == removed_at
    assert record["git_commit"] == commit
    # The run used the sealed IR, so its audit record verifies against the compiled file.
    verify = kfchaos("audit", "verify", str(record_path), "--root", str(root))
    assert verify.returncode == 0, verify.stdout
    assert "ok       pipeline.ir_hash (" in verify.stdout
    assert "ok       replay_plans[stage 10]" in verify.stdout and "ok       replay_plans[stage 30]" in verify.stdout
    report = (_run_dir(root) / "verdict-report" / "report_md").read_text()
    assert "local-delay 1.0.0" in report and "INCONCLUSIVE" in report
    assert "<html" in (_run_dir(root) / "verdict-report" / "report_html").read_text().lower()
    # The run folder (kfchaos.rundir) is named after the kfp.local run and re-judges to the same verdict.
    folder = root / "runs" / _run_dir(root).parent.name  # the run id: its own pipeline root's name
    assert f"report: {folder / 'report.html'}" in done.stdout
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["status"] == "INCONCLUSIVE" and manifest["commit"] == commit
    assert manifest["rejudged"]["status"] == "INCONCLUSIVE" and manifest["rejudged"]["matches"]
    assert kfchaos("verdict", "--run", str(folder)).returncode == 2
    # The folder is sealed: every file's hash, the audit record against it, and the re-judge stage by stage hold.
    verified = kfchaos("audit", "verify", str(folder))
    assert verified.returncode == 0, verified.stdout
    assert "ok       rejudge: re-judged INCONCLUSIVE" in verified.stdout
    assert "ok       experiment.yaml vs audit.json" in verified.stdout
    assert json.loads((folder / "audit.json").read_text()) == record


def test_when_a_stage_task_fails_the_exit_handler_still_removes_every_fault(tmp_path: Path, stack: DemoStack) -> None:
    traffic = tmp_path / "traffic.jsonl"
    lines = [
        {"id": f"r{i}", "timestamp": 1_764_680_000 + i * 0.01, "method": "POST", "path": "/v1/completions",
         "body": {"model": "demo/llama-3-8b-sim", "prompt": "hello", "max_tokens": 4}}
        for i in range(400)
    ]  # fmt: skip
    traffic.write_text("".join(json.dumps(line) + "\n" for line in lines))
    # A fault that would outlive the test by far: only a removal can make it go away.
    root = _repo(tmp_path, f"file: {traffic}\n    format: jsonl", duration="duration: 10m")
    process = subprocess.Popen(
        _run_command(root, stack), env=_env(stack), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        # Once the fault is in place, take the recording away: stage 10's replay task then fails for real
        # (its plan cannot read the traffic), after injection and before any normal removal.
        deadline = time.monotonic() + 120
        while not _proxy_faults(stack):
            assert process.poll() is None and time.monotonic() < deadline, "the fault was never injected"
            time.sleep(0.01)
        traffic.unlink()
        output, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 2, output[-3000:]
    assert "ERROR: the run failed before its verdict" in output
    # The cause on the console, from the task's own log: which task failed, and its exception.
    cause = output.split("the failed task's last error lines", 1)[1]
    assert "Inner task failed: 'replay-stage" in cause, output[-3000:]
    assert "traffic.jsonl" in cause, output[-3000:]
    run_dir = _run_dir(root)
    assert not (run_dir / "verdict-report").exists() and not (run_dir / "remove-faults").exists()
    cleanup = json.loads((run_dir / "cleanup" / "cleanup_record").read_text())
    assert cleanup["swept"] == 1
    assert _proxy_faults(stack) == []
    # ... and then gave the target back: the next run gets it at once (kfchaos.steps.faults.cleanup).
    assert cleanup["lease"].startswith("released lock ")
    lock = FileLeaseStore.for_url(stack.target_url).get()
    assert lock is not None
    record = LeaseRecord.from_object(lock)
    assert record.holder_identity == "" and record.history[-1].outcome == "released without a verdict"
