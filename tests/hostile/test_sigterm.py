"""SIGTERM mid-stage (a pod evicted, a CI job cancelled): the faults the process holds are removed, the records it took
are kept and marked as cut by the signal (a verdict on them is INCONCLUSIVE, saying so), and it ends with a code that
is never a verdict (143, or killed by the signal). Real processes, real signals, real loopback servers: the Kubernetes
API server of tests/support (the Chaos Mesh backend) and the demo's fault proxy (the local backend)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kfchaos.cli import EXIT_TERMINATED, main
from kfchaos.demo.stack.demostack import DemoStack, ServerSettings
from kfchaos.records import unfinished_stages
from tests.support.hostile import hostile_server, json_answer
from tests.support.kubeapi import KubeApiServer

ROOT = Path(__file__).resolve().parents[2]
CUT = "the replay was cut: stopped by SIGTERM"
BOUND_S = 60.0  # every wait below; a stopped process ends in seconds, a 60 s stage would not

EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {name: stopped, version: 1.0.0, owner: tests}
spec:
  target:
    namespace: serving
    selector: {labels: {app: vllm}}
    endpoint: http://127.0.0.1:9
  traffic:
    synthetic: {rate: 200}
    stages: [100]
    stage_duration: 60s
  faults:
    - {name: delay, type: network-delay, mode: all, duration: 10m, params: {latency: 20ms}}
  slo: {p99_max: 2s}
  baseline: {file: baselines/none.yaml}
  safety: {max_pod_percent: 100%, max_fault_duration: 2h}
"""


def _wait(condition: Callable[[], bool], process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"the process ended before {what}: {process.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


def _stop(process: subprocess.Popen[str], bound: float = BOUND_S) -> tuple[str, str, float]:
    """SIGTERM, then its output and how long it took to end."""
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=bound)
    finally:
        with contextlib.suppress(OSError):
            process.kill()
    return out, err, time.monotonic() - sent


def _step(experiment: Path, target: str, records: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    step = [sys.executable, "-m", "tests.hostile.stage_step"]
    command = [*step, str(experiment), target, "run-stop", "100", str(records)]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _judged_cut(experiment: Path, records: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    """The verdict on the kept records: INCONCLUSIVE, its replay check naming the signal."""
    capsys.readouterr()
    assert main(["verdict", "--experiment", str(experiment), "--records", str(records), "--json"]) == 2
    verdict = json.loads(capsys.readouterr().out)
    replay = next(c for c in verdict["stages"][0]["checks"] if c["name"] == "replay")
    assert replay["status"] == "INCONCLUSIVE" and replay["reason"].startswith(CUT), replay
    return dict(verdict)


def test_a_replay_stopped_by_sigterm_exits_143_with_its_records_marked_as_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: exit 143 with the records written as a whole stage, which a verdict then judged as one."""
    experiment = tmp_path / "e.yaml"
    experiment.write_text(EXPERIMENT)
    out = tmp_path / "records.parquet"
    with hostile_server(lambda method, path: json_answer({"ok": True})) as server:
        argv = ["replay", "--experiment", str(experiment), "--stage", "100", "--out", str(out), "--quiet"]
        process = subprocess.Popen([sys.executable, "-m", "kfchaos", *argv, "--target", server.url], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        _wait(lambda: len(server.seen) >= 50, process, "replayed")
        _, err, took = _stop(process)
        seen = len(server.seen)
    assert process.returncode == EXIT_TERMINATED == 143, err
    assert f"kfchaos: stopped by SIGTERM; the records up to then are in {out}, marked as cut" in err
    assert took < BOUND_S
    assert out.is_file() and pq.read_metadata(out).num_rows >= seen
    assert unfinished_stages(out)[100].startswith(CUT)
    _judged_cut(experiment, out, capsys)


def test_a_pipeline_step_stopped_mid_stage_removes_its_chaos_mesh_fault_and_keeps_its_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replay step, in its own process with the Chaos Mesh backend (loopback API server), SIGTERMed while it
    replays under its fault. Before: killed at once, its NetworkChaos left in the cluster and no records."""
    experiment = tmp_path / "e.yaml"
    experiment.write_text(EXPERIMENT)
    records = tmp_path / "requests"
    with KubeApiServer(inject_delay=0.2) as kube, hostile_server(lambda m, p: json_answer({"ok": True})) as target:
        kube.add_pod("serving", "vllm-0", {"app": "vllm"})
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KFCHAOS_FAULT_BACKEND")}
        process = _step(experiment, target.url, records, {**env, "KFCHAOS_KUBE_HOST": kube.url})
        _wait(lambda: len(target.seen) >= 50, process, "replayed under the fault")
        assert len(kube.chaos_objects()) == 1
        _, err, took = _stop(process)
        left = kube.chaos_objects()
        deletes = [path for verb, path in kube.requests if verb == "DELETE" and "networkchaos" in path]
    assert process.returncode == -signal.SIGTERM, err  # died by the signal, after its cleanup: its task failed
    assert "replay: stopped by SIGTERM: its faults removed" in err and "kfchaos: delay removed" in err
    assert left == [] and deletes, "the step left its fault in the cluster"
    assert took < BOUND_S
    assert records.is_file() and pq.read_metadata(records).num_rows > 0
    assert unfinished_stages(records)[100].startswith(CUT)
    _judged_cut(experiment, records, capsys)


def test_a_pipeline_step_stopped_while_waiting_for_injection_removes_what_it_created(tmp_path: Path) -> None:
    """SIGTERM before the stage's traffic: the step is waiting for its fault to be injected. Before: killed, the
    object left for the exit handler (drill 2 in docs/reliability.md)."""
    experiment = tmp_path / "e.yaml"
    experiment.write_text(EXPERIMENT)
    with KubeApiServer(inject_delay=600) as kube, hostile_server(lambda m, p: json_answer({"ok": True})) as target:
        kube.add_pod("serving", "vllm-0", {"app": "vllm"})
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KFCHAOS_FAULT_BACKEND")}
        process = _step(experiment, target.url, tmp_path / "requests", {**env, "KFCHAOS_KUBE_HOST": kube.url})
        _wait(lambda: len(kube.chaos_objects()) == 1, process, "applied its fault")
        _, err, _ = _stop(process)
        left = kube.chaos_objects()
        assert target.seen == []
    assert process.returncode == -signal.SIGTERM, err
    assert left == [], err


def _proxy_faults(stack: DemoStack) -> list[dict[str, object]]:
    import urllib.request

    with urllib.request.urlopen(f"{stack.control_url}/faults", timeout=5) as response:
        items: list[dict[str, object]] = json.loads(response.read())["items"]
        return items


def test_a_pipeline_step_stopped_mid_stage_removes_its_fault_from_the_demo_proxy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same step with the local backend: its fault lives in the demo's fault proxy, owned by a process that
    outlives the step (the local run), so nothing but the step's own removal takes it away."""
    experiment = tmp_path / "e.yaml"
    experiment.write_text(EXPERIMENT)
    records = tmp_path / "requests"
    with DemoStack(ServerSettings(restart_delay_s=0.3), with_prometheus=False) as stack:
        env = {**os.environ, "KFCHAOS_FAULT_BACKEND": "local", "KFCHAOS_FAULT_PROXY": stack.control_url,
               "KFCHAOS_DEMO_STATE": str(stack.state_file), "KFCHAOS_FAULT_OWNER_PID": str(os.getpid())}  # fmt: skip
        process = _step(experiment, stack.target_url, records, env)
        _wait(lambda: bool(_proxy_faults(stack)), process, "applied its fault")
        time.sleep(1.0)  # into the stage's traffic
        _, err, _ = _stop(process)
        left = _proxy_faults(stack)
    assert process.returncode == -signal.SIGTERM, err
    assert left == [], err
    assert unfinished_stages(records)[100].startswith(CUT)
    _judged_cut(experiment, records, capsys)


LOCAL_RUN = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {name: local-stop, version: 1.0.0, owner: test}
spec:
  target:
    namespace: demo
    selector: {labels: {app: demo-llm}}
    endpoint: http://127.0.0.1:9
    api: openai-completions
    model: demo/llama-3-8b-sim
    timeout: 5s
  traffic:
    synthetic: {rate: 50, prompt_tokens: {distribution: fixed, mean: 32}, output_tokens: {distribution: fixed, mean: 4}}
    stages: [10, 30]
    stage_duration: 60s
    warmup: 1s
    seed: 1
  faults:
    - {name: delay, type: network-delay, mode: all, duration: 10m, params: {latency: 20ms}}
  slo: {p99_max: 2s, min_samples: 20}
  baseline: {file: baselines/none.yaml}
  safety: {max_pod_percent: 100%, max_fault_duration: 10m}
"""


def _processes_naming(text: str) -> list[str]:
    """Command lines of the live processes that name `text` (a folder only this test's run uses)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if entry.name.isdigit() and text in line:
                found.append(line)
    return found


@pytest.mark.integration
@pytest.mark.slow
def test_kfchaos_run_local_stopped_mid_stage_exits_143_with_its_faults_removed_and_records_kept(tmp_path: Path) -> None:
    """`kfchaos run --local` SIGTERMed while stage 10 replays under its fault. Before: the command died at once
    (killed by the signal, no word), and the pipeline went on in its orphaned child: stage 30 was still to come."""
    from tests.kfp_glue.conftest import copy_sources, kfchaos

    root = copy_sources(tmp_path / "repo")
    for path in (root / "experiments").glob("*.yaml"):
        path.unlink()
    experiment = root / "experiments" / "local-stop.yaml"
    experiment.write_text(LOCAL_RUN)
    assert kfchaos("compile", "--root", str(root)).returncode == 0
    with DemoStack(ServerSettings(restart_delay_s=0.3), with_prometheus=False) as stack:
        env = {**os.environ, "KFCHAOS_FAULT_BACKEND": "local", "KFCHAOS_FAULT_PROXY": stack.control_url,
               "KFCHAOS_DEMO_STATE": str(stack.state_file)}  # fmt: skip
        command = [sys.executable, "-m", "kfchaos", "run", str(experiment), "--local", "--root", str(root),
                   "--target", stack.target_url, "--output", str(root / "out")]  # fmt: skip
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        process = subprocess.Popen(command, cwd=ROOT, env=env, **pipes)  # type: ignore[call-overload]
        deadline = time.monotonic() + 240  # kfp.local starts a process per task: the first stage takes a while
        while not _proxy_faults(stack):
            assert process.poll() is None and time.monotonic() < deadline, "the fault was never applied"
            time.sleep(0.1)
        time.sleep(2.0)  # into stage 10's traffic
        # The task stops at once; then kfp.local starts the exit handler's task, a process of its own (seconds).
        out, err, _ = _stop(process, bound=3 * BOUND_S)
        faults = _proxy_faults(stack)
    assert process.returncode == EXIT_TERMINATED, out[-3000:] + err[-3000:]
    assert faults == [], "a fault outlived the stopped run"
    assert _processes_naming(str(root)) == [], "a process of the stopped run is still alive"
    summary = next(line for line in out.splitlines() if line.startswith("INTERRUPTED: "))
    assert "stopped by SIGTERM; records kept, marked as cut: replay-stage" in summary, summary
    assert "the exit handler's sweep deleted 0 more fault(s)" in summary, summary  # the task removed its own
    (run_dir,) = (root / "out").glob("local-stop-*/local-stop-*")  # the run's own pipeline root, then its run
    kept = [p for p in run_dir.glob("replay-stage*/requests") if p.exists()]
    assert [unfinished_stages(p)[10][: len(CUT)] for p in kept] == [CUT]
    assert not list(run_dir.glob("verdict-report*")), "a stopped run must not reach a verdict"
