"""No secret in any output (issue 13): a full local run (kfp.local, local fault backend, the demo LLM server) of
a traffic file with planted secrets -- query strings, bearer and cookie headers, API-key headers, body tokens,
malformed lines whose offending values hold secrets, and the target token from its environment variable -- then
every file the run wrote (summary, audit record, Markdown and HTML reports, every task's executor_output.json,
records, logs) and the command's own output are searched for each secret.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kfchaos.demo.stack.demostack import DemoStack
from tests.kfp_glue.conftest import copy_sources

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MARK = "5ecr3t"  # every planted secret holds it, so one search finds any of them, however it was cut
SECRETS = {
    "query": f"qs-{MARK}-a1",
    "bearer": f"bearer-{MARK}-b2",
    "cookie": f"cookie-{MARK}-c3",
    "body": f"body-{MARK}-d4",
    "env": f"env-{MARK}-e5",
    "api_key_header": f"hdr-{MARK}-f6",
    "bad_timestamp": f"ts-{MARK}-g7",
    "bad_method": f"method-{MARK}-h8",
    "injected": f"inj-{MARK}-i9",
    "unicode_path": f"uni-{MARK}-j10",
    "spaced_name": f"ws-{MARK}-k11",
    "bad_json": f"json-{MARK}-l12",
}

EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {name: secrets-run, version: 1.0.0, owner: test}
spec:
  target:
    namespace: demo
    selector: {labels: {app: demo-llm}}
    endpoint: http://127.0.0.1:9
    api: openai-completions
    model: demo/llama-3-8b-sim
    timeout: 5s
    auth: {env: KFCHAOS_TEST_TARGET_TOKEN}
  traffic:
    file: TRAFFIC
    format: jsonl
    stages: [10, 30]
    stage_duration: 2s
    warmup: 1s
    seed: 1
  faults:
    - {name: delay, type: network-delay, mode: all, params: {latency: 20ms}}
  slo: {p99_max: 2s, min_samples: 20}
  baseline: {file: baselines/none.yaml}
  safety: {max_pod_percent: 100%, max_fault_duration: 10m}
"""


def _traffic_lines() -> list[str]:
    s = SECRETS
    body = {"model": "demo/llama-3-8b-sim", "prompt": "hello", "max_tokens": 4, "user_token": s["body"]}
    good = [
        {
            "id": f"r{i}",
            "timestamp": 1_764_680_000 + i * 0.01,
            "method": "POST",
            "path": f"/v1/completions?api_key={s['query']}",
            "headers": {
                "Authorization": f"Bearer {s['bearer']}",
                "Cookie": f"session={s['cookie']}",
                "X-Api-Key": s["api_key_header"],
                "content-type": "application/json",
            },
            "body": body,
        }
        for i in range(300)
    ]
    bad = [
        {"id": "bad-ts", "timestamp": f"Bearer {s['bad_timestamp']}", "method": "POST", "path": "/v1/completions"},
        {"id": "bad-method", "timestamp": 1_764_680_001, "method": [s["bad_method"]], "path": "/v1/completions"},
        {
            "id": "bad-header",
            "timestamp": 1_764_680_001,
            "method": "POST",
            "path": "/v1/completions",
            "headers": {"X-Note": f"ok\r\nAuthorization: Bearer {s['injected']}"},
        },
        {
            "id": "unicode-path",
            "timestamp": 1_764_680_001.5,
            "method": "POST",
            "path": f"/v1/complétions?token={s['unicode_path']}",
            "body": body,
        },
        {
            "id": "spaced-name",
            "timestamp": 1_764_680_001.6,
            "method": "POST",
            "path": "/v1/completions",
            "headers": {"Authorization ": f"Bearer {s['spaced_name']}"},
            "body": body,
        },
    ]
    lines = [json.dumps(line) for line in good[:150] + bad + good[150:]]
    lines.insert(10, '{"id": "broken", "path": "/x?token=' + s["bad_json"] + '", ')  # not JSON
    return lines


def _leaks(folder: Path) -> list[str]:
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for name, secret in SECRETS.items():
            if secret.encode() in data:
                found.append(f"{path.relative_to(folder)}: {name}")
        if MARK.encode() in data and not any(secret.encode() in data for secret in SECRETS.values()):
            found.append(f"{path.relative_to(folder)}: part of a secret")
    return found


def test_no_planted_secret_reaches_any_output_of_a_local_run(tmp_path: Path, stack: DemoStack) -> None:
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("\n".join(_traffic_lines()) + "\n")
    root = copy_sources(tmp_path / "repo")
    for path in (root / "experiments").glob("*.yaml"):
        path.unlink()
    experiment = root / "experiments/secrets-run.yaml"
    experiment.write_text(EXPERIMENT.replace("TRAFFIC", str(traffic)))
    crash_dir = tmp_path / "crash"
    env = dict(
        os.environ,
        KFCHAOS_FAULT_BACKEND="local",
        KFCHAOS_FAULT_PROXY=stack.control_url,
        KFCHAOS_DEMO_STATE=str(stack.state_file),
        KFCHAOS_TEST_TARGET_TOKEN=SECRETS["env"],
        KFCHAOS_CRASH_DIR=str(crash_dir),
    )
    command = [
        sys.executable, "-m", "kfchaos", "run", str(experiment), "--local", "--root", str(root),
        "--target", stack.target_url, "--output", str(root / "out"),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    # The run must have got as far as its verdict (no baseline: INCONCLUSIVE), or the search proves nothing.
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (root / "out").glob("secrets-run-*/secrets-run-*")  # the run's own pipeline root, then its run
    audit = json.loads((run_dir / "verdict-report" / "audit").read_text())
    replays = [s for s in audit["steps"] if s["step"] == "stage" and s["status"] != "SKIPPED"]
    assert replays, "no stage replayed"
    outputs = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "executor_output.json" for p in outputs)
    assert (run_dir / "verdict-report" / "report_html").is_file()
    # The malformed lines were skipped and counted (so their reasons did reach the outputs).
    assert "malformed" in json.dumps(audit)

    leaks = _leaks(root / "out") + (_leaks(crash_dir) if crash_dir.exists() else [])
    for stream, text in (("stdout", done.stdout), ("stderr", done.stderr)):
        leaks += [f"{stream}: {name}" for name, secret in SECRETS.items() if secret in text]
        if MARK in text and not any(secret in text for secret in SECRETS.values()):
            leaks.append(f"{stream}: part of a secret")
    assert not leaks, "secrets in outputs:\n" + "\n".join(leaks)


def test_the_search_finds_a_planted_secret_in_any_file(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "executor_output.json").write_text(json.dumps({"reason": f"bad {SECRETS['query']}"}))
    (tmp_path / "report.html").write_bytes(f"<p>{MARK}</p>".encode())
    assert _leaks(tmp_path) == ["a/b/executor_output.json: query", "report.html: part of a secret"]
