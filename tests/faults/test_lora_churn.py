"""The lora-adapter-churn fault (kfchaos.faults.lorachurn) against the demo server over real sockets: loads, hot
swaps and unloads, what is recorded, what counts as verified, and that no adapter it loaded stays loaded."""

from __future__ import annotations

import copy
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import requests
from pydantic import ValidationError

from kfchaos.demo.stack.demostack import wait_http
from kfchaos.demo.stack.ports import free_port
from kfchaos.errors import KfchaosError
from kfchaos.faults.activity import coverage
from kfchaos.faults.lorachurn import Churn, LoraClient, churn_faults, stage_churns, sweep
from kfchaos.faultspec.params import LoraAdapterChurnParams
from kfchaos.traffic.plan import plan_stage
from kfchaos.traffic.wire import RequestBuilder
from tests.faults.experiments import BASE, experiment_with

ADAPTERS = [{"name": "sql", "path": "/adapters/sql"}, {"name": "chat", "path": "org/chat-lora"}]


def churn_fault(stages: list[int] | None = None, **params: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"adapters": ADAPTERS, "interval": "1s", "start": "0s"}
    values.update(params)
    return {"name": "churn", "type": "lora-adapter-churn", "stages": stages or [10], "params": values}


def _experiment(endpoint: str, stages: list[int] | None = None, **params: Any) -> Any:
    target = {
        "namespace": "llm-serving",
        "selector": {"labels": {"app": "vllm"}},
        "endpoint": endpoint,
        "api": "openai-completions",
        "model": "demo/llama-3-8b-sim",
    }
    traffic = {"synthetic": {"rate": 20}, "stage_duration": "10s", "stages": [10, 100]}
    return experiment_with(churn_fault(stages, **params), target=target, traffic=traffic)


def _server(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "kfchaos.demo.server.api", "--port", str(port), *args],
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/health")
    return process, base


@pytest.fixture(scope="module")
def lora_server() -> Iterator[str]:
    process, base = _server(
        ["--enable-lora", "--max-loras", "1", "--lora-load-ms", "5"], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
    )
    yield base
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=10)


def _listed(base: str) -> list[str]:
    return [m["id"] for m in requests.get(f"{base}/v1/models", timeout=5).json()["data"]]


def _run_churn(experiment: Any, seconds: float) -> Churn:
    (churn,) = stage_churns(experiment, 10, "", lambda f: [10])
    with churn:
        time.sleep(seconds)
    return churn


def test_a_stage_loads_swaps_and_unloads_and_is_verified_throughout(lora_server: str) -> None:
    experiment = _experiment(lora_server)
    started = time.time()
    churn = _run_churn(experiment, 1.5)
    ended = time.time()
    calls = [(a.call, a.adapter, a.status) for a in churn.actions]
    assert calls[:2] == [("load", "kfchaos-sql", 200), ("load", "kfchaos-chat", 200)]
    # the first cycle at start 0s: unload then load again of the first adapter, the hot swap
    assert calls[2:4] == [("unload", "kfchaos-sql", 200), ("load", "kfchaos-sql", 200)]
    assert calls[-3:] == [("models", None, 200), ("unload", "kfchaos-sql", 200), ("unload", "kfchaos-chat", 200)]
    assert all(a.latency >= 0 and a.stage == 10 for a in churn.actions)
    assert not [n for n in _listed(lora_server) if n.startswith("kfchaos-")], "an adapter the churn loaded stayed"
    assert churn.activity.removed_at is not None and not churn.reasons
    seen = coverage(churn.activity, (started + 0.2, ended - 0.2))
    assert seen.ok and seen.uncovered == 0


def test_loads_the_server_refuses_are_not_verified_active() -> None:
    # --enable-lora missing: vLLM's 500 "LoRA is not enabled" on every load
    process, base = _server([], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"})
    try:
        churn = _run_churn(_experiment(base), 0.3)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
    assert [a.status for a in churn.actions if a.call == "load"][:2] == [500, 500]
    assert churn.activity.verified == []
    assert "LoRA is not enabled" in churn.activity.errors[0]


def test_an_adapter_left_loaded_by_an_earlier_try_is_taken_over_and_unloaded(lora_server: str) -> None:
    body = {"lora_name": "kfchaos-sql", "lora_path": "/adapters/sql"}
    assert requests.post(f"{lora_server}/v1/load_lora_adapter", json=body, timeout=5).status_code == 200
    churn = _run_churn(_experiment(lora_server, start="1h"), 0.1)
    calls = [(a.call, a.adapter, a.status) for a in churn.actions]
    assert calls[:3] == [("load", "kfchaos-sql", 400), ("unload", "kfchaos-sql", 200), ("load", "kfchaos-sql", 200)]
    assert churn.activity.verified
    assert "kfchaos-sql" not in _listed(lora_server)


def test_the_stage_unloads_even_when_the_replay_fails(lora_server: str) -> None:
    (churn,) = stage_churns(_experiment(lora_server, start="1h"), 10, "", lambda f: [10])
    with pytest.raises(RuntimeError), churn:
        assert "kfchaos-chat" in _listed(lora_server)
        raise RuntimeError("the replay crashed")
    assert not [n for n in _listed(lora_server) if n.startswith("kfchaos-")]


def test_sweep_unloads_only_this_experiments_kfchaos_adapters(lora_server: str) -> None:
    for name in ("kfchaos-chat", "operator-adapter", "kfchaos-other-run"):
        body = {"lora_name": name, "lora_path": "/adapters/x"}
        assert requests.post(f"{lora_server}/v1/load_lora_adapter", json=body, timeout=5).status_code == 200
    experiment = _experiment(lora_server)
    done = sweep(experiment, LoraClient.for_experiment(experiment))
    assert done == [{"adapter": "kfchaos-chat", "status": 200, "error": None}]
    listed = _listed(lora_server)
    assert "operator-adapter" in listed and "kfchaos-other-run" in listed
    for name in ("operator-adapter", "kfchaos-other-run"):
        requests.post(f"{lora_server}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=5)


def test_probe_names_what_the_server_lacks(lora_server: str) -> None:
    assert LoraClient(lora_server).probe() is None
    gated, base = _server(["--enable-lora"], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "0"})
    plain, plain_base = _server([], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"})
    try:
        assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in (LoraClient(base).probe() or "")
        assert "--enable-lora" in (LoraClient(plain_base).probe() or "")
    finally:
        for process in (gated, plain):
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
    assert "did not answer" in (LoraClient(f"http://127.0.0.1:{free_port()}").probe() or "")


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []

    def do_POST(self) -> None:
        _Recorder.seen.append(dict(self.headers))
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def test_the_targets_credential_goes_in_the_header_and_nowhere_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LORA_TEST_TOKEN", "s3cret-token")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        target = {
            "namespace": "llm-serving",
            "selector": {"labels": {"app": "vllm"}},
            "endpoint": endpoint,
            "api": "openai-completions",
            "model": "m",
            "auth": {"env": "LORA_TEST_TOKEN"},
        }
        traffic = {"synthetic": {"rate": 20}, "stage_duration": "10s", "stages": [10]}
        experiment = experiment_with(churn_fault(start="1h"), target=target, traffic=traffic)
        _Recorder.seen.clear()
        churn = _run_churn(experiment, 0.05)
    finally:
        server.shutdown()
    assert _Recorder.seen and all(h.get("Authorization") == "Bearer s3cret-token" for h in _Recorder.seen)
    dumped = json.dumps([a.to_dict() for a in churn.actions]) + json.dumps(churn.activity.to_dict())
    assert "s3cret" not in dumped


# ---------------------------------------------------------------------- params and the plan


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"adapters": [{"name": "a", "path": "s3://bucket/a"}]}, "neither an absolute local path"),
        ({"adapters": [{"name": "a", "path": "/adapters/../etc"}]}, "no '..'"),
        ({"adapters": [{"name": "a", "path": "relative/dir/x"}]}, "neither an absolute"),
        ({"adapters": [{"name": "A B", "path": "/a"}]}, "adapter name"),
        ({"adapters": [{"name": "a", "path": "/a"}, {"name": "a", "path": "/b"}]}, "unique"),
        ({"count": 3}, "path_template"),
        ({"count": 17, "path_template": "/a/{i}"}, "less than or equal to 16"),
        ({"adapters": ADAPTERS, "count": 2, "path_template": "/a/{i}"}, "either adapters"),
        ({"adapters": ADAPTERS, "share": "10%", "rate": 2}, "share or rate"),
        ({"adapters": ADAPTERS, "interval": "200ms"}, "from 1s to 1h"),
    ],
)
def test_unsafe_or_unclear_params_are_refused(params: dict[str, Any], message: str) -> None:
    values = {"interval": "5s", **params}
    with pytest.raises(ValidationError, match=message):
        LoraAdapterChurnParams.model_validate(values)


def test_count_and_template_make_numbered_adapters() -> None:
    params = LoraAdapterChurnParams.model_validate({"count": 3, "path_template": "/lora/v{i}", "interval": "5s"})
    assert [(a.wire_name, a.path) for a in params.resolved()] == [
        ("kfchaos-adapter-0", "/lora/v0"),
        ("kfchaos-adapter-1", "/lora/v1"),
        ("kfchaos-adapter-2", "/lora/v2"),
    ]


def test_the_plan_sends_requests_naming_the_adapters_marked_as_the_faults() -> None:
    experiment = _experiment("http://127.0.0.1:9", stages=[100], share="50%")
    plan = plan_stage(experiment, 100)
    planned = list(plan.schedule())
    fault = [p for p in planned if p.request.fault == "churn"]
    traffic = [p for p in planned if p.request.fault is None]
    # 50 % of 20 req/s over 10 s: ~100 (Poisson); each names the adapters in turn
    assert 60 < len(fault) < 140 and len(traffic) > 120
    assert [p.request.model for p in fault[:4]] == ["kfchaos-sql", "kfchaos-chat", "kfchaos-sql", "kfchaos-chat"]
    builder = RequestBuilder("h", "", 100, "openai-completions", "demo/llama-3-8b-sim", plan.settings.headers)
    assert json.loads(builder.body(fault[0].request)[1])["model"] == "kfchaos-sql"
    assert json.loads(builder.body(traffic[0].request)[1])["model"] == "demo/llama-3-8b-sim"
    assert plan.hash == plan_stage(experiment, 100).hash
    assert [p.request.id for p in plan_stage(experiment, 100).schedule() if p.request.fault] == [
        p.request.id for p in fault
    ]
    # a stage the fault is not in sends none
    assert not [p for p in plan_stage(experiment, 10).schedule() if p.request.fault]


def test_share_needs_a_known_rate_and_an_openai_api() -> None:
    experiment = _experiment("http://127.0.0.1:9")
    with pytest.raises(KfchaosError, match="openai"):
        list(plan_stage(experiment, 10, api="http", model=None).schedule())
    with pytest.raises(KfchaosError, match="with a traffic file or fit_from give rate"):
        list(plan_stage(experiment, 10, synthetic=None, source=__file__, format="jsonl").schedule())
    assert churn_faults(experiment, 10) and not churn_faults(experiment, 100)


# ---------------------------------------------------------------------- through the pipeline's stage steps


def test_the_stage_step_churns_records_and_judges_the_fault(lora_server: str, tmp_path: Any) -> None:
    import pyarrow.parquet as pq
    import yaml

    from kfchaos.rundir.layout import FAULT_ACTIONS
    from kfchaos.rundir.writing import write
    from kfchaos.steps import stages

    data = copy.deepcopy(BASE)
    data["spec"]["target"] = {
        "namespace": "llm-serving",
        "selector": {"labels": {"app": "vllm"}},
        "endpoint": lora_server,
        "api": "openai-completions",
        "model": "demo/llama-3-8b-sim",
    }
    data["spec"]["traffic"] = {
        "synthetic": {"rate": 10, "output_tokens": {"distribution": "fixed", "mean": 2}},
        "stage_duration": "3s",
        "stages": [100],
    }
    params = {
        "adapters": ADAPTERS,
        "interval": "1s",
        "start": "1s",
        "share": "30%",
        "prompt_tokens": 8,
        "max_tokens": 2,
    }
    data["spec"]["faults"] = [{"name": "churn", "type": "lora-adapter-churn", "stages": [100], "params": params}]
    text = yaml.safe_dump(data)
    records = str(tmp_path / "records.parquet")
    summary = json.loads(stages.replay(text, str(tmp_path), lora_server, "run-1", 100, records))
    faults = summary["faults"]
    (window,) = faults["fault_windows"]
    assert window["kind"] == "LoraAdapterChurn" and window["verified"] and window["removed_at"]
    actions = faults["fault_actions"]
    assert {a["call"] for a in actions} == {"load", "unload", "models"} and all(a["fault"] == "churn" for a in actions)
    table = pq.read_table(records)
    rows = table.to_pylist()
    mine = [r for r in rows if r["fault_request"] == "churn"]
    assert mine and len(mine) < len(rows)
    # requests naming an adapter mostly succeed; one that lands in a swap's gap meets vLLM's 404
    assert {r["status"] for r in mine} <= {200, 404}
    result = json.loads(stages.collect(text, 100, json.dumps(summary), "", records)[0])
    checks = {c["name"]: c for c in result["detail"]["stage"]["checks"]}
    assert checks["fault_active"]["status"] == "PASS"
    assert result["detail"]["fault_actions"] == actions
    assert not [n for n in _listed(lora_server) if n.startswith("kfchaos-")]

    run = write(
        tmp_path / "run", experiment_text=text, records=records, verdict={"status": "INCONCLUSIVE"},
        stages=[result],
    )  # fmt: skip
    lines = run.file(FAULT_ACTIONS).read_text().splitlines()
    assert [json.loads(line) for line in lines] == actions


# ---------------------------------------------------------------------- cleanup drills, preflight, doctor, render


def _churn_text(endpoint: str) -> str:
    data = copy.deepcopy(BASE)
    data["spec"]["target"] = {
        "namespace": "llm-serving",
        "selector": {"labels": {"app": "vllm"}},
        "endpoint": endpoint,
        "api": "openai-completions",
        "model": "demo/llama-3-8b-sim",
    }
    data["spec"]["traffic"] = {"synthetic": {"rate": 10}, "stage_duration": "3s", "stages": [100]}
    params = {"adapters": ADAPTERS, "interval": "1s"}
    data["spec"]["faults"] = [{"name": "churn", "type": "lora-adapter-churn", "params": params}]
    import yaml

    return yaml.safe_dump(data)


def _leave_loaded(base: str) -> None:
    """What a replay task killed mid-stage (SIGKILL: no finally runs) leaves behind."""
    for adapter in ADAPTERS:
        body = {"lora_name": f"kfchaos-{adapter['name']}", "lora_path": adapter["path"]}
        assert requests.post(f"{base}/v1/load_lora_adapter", json=body, timeout=5).status_code == 200


def test_the_exit_handler_unloads_what_a_killed_stage_left(lora_server: str, tmp_path: Any) -> None:
    from kfchaos.steps import faults as steps

    _leave_loaded(lora_server)
    record = json.loads(steps.cleanup(_churn_text(lora_server), "run-1", str(tmp_path / "cleanup.json")))
    assert sorted(a["adapter"] for a in record["lora_adapters"]) == ["kfchaos-chat", "kfchaos-sql"]
    assert all(a["status"] == 200 for a in record["lora_adapters"])
    assert not [n for n in _listed(lora_server) if n.startswith("kfchaos-")]
    # nothing left: nothing done, nothing claimed
    again = json.loads(steps.cleanup(_churn_text(lora_server), "run-1", str(tmp_path / "cleanup.json")))
    assert again["lora_adapters"] == []


def test_the_remove_step_unloads_them_too_even_when_no_cluster_fault_ran(lora_server: str) -> None:
    from kfchaos.steps import faults as steps

    _leave_loaded(lora_server)
    out = json.loads(steps.remove_and_recover(_churn_text(lora_server), ".", lora_server, "run-1", "[]"))
    assert out["note"] == "nothing was injected"
    assert sorted(a["adapter"] for a in out["lora_adapters"]) == ["kfchaos-chat", "kfchaos-sql"]
    assert not [n for n in _listed(lora_server) if n.startswith("kfchaos-")]


def test_an_unreachable_target_is_said_in_the_cleanup_record_not_hidden(tmp_path: Any) -> None:
    from kfchaos.steps import faults as steps

    text = _churn_text(f"http://127.0.0.1:{free_port()}")
    record = json.loads(steps.cleanup(text, "run-1", str(tmp_path / "cleanup.json")))
    assert record["lora_adapters"].startswith("not checked: cannot list the target's adapters")


def test_cleanup_cli_unloads_the_experiments_adapters(lora_server: str, tmp_path: Any, capsys: Any) -> None:
    from kfchaos.cli import main

    path = tmp_path / "exp.yaml"
    path.write_text(_churn_text("http://127.0.0.1:9"))  # the file's endpoint; --target points at the server
    _leave_loaded(lora_server)
    assert main(["cleanup", "--experiment", str(path), "--target", lora_server]) == 0
    assert "unloaded 2 LoRA adapter(s)" in capsys.readouterr().out
    assert not [n for n in _listed(lora_server) if n.startswith("kfchaos-")]
    assert main(["cleanup", "--experiment", str(path)]) == 3  # port 9: nothing answers, said as an error


def test_preflight_refuses_a_target_without_runtime_lora_updating(lora_server: str) -> None:
    from kfchaos.steps.setup import preflight

    out = json.loads(preflight(_churn_text(lora_server), "run-1"))
    assert "runtime LoRA updating is on" in out["lora"]
    gated, base = _server(["--enable-lora"], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "0"})
    try:
        with pytest.raises(KfchaosError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
            preflight(_churn_text(base), "run-1")
    finally:
        gated.send_signal(signal.SIGTERM)
        gated.wait(timeout=10)
    # an endpoint the step cannot reach (the run may use --target) is a note, not a pass and not a refusal
    out = json.loads(preflight(_churn_text(f"http://127.0.0.1:{free_port()}"), "run-1"))
    assert out["lora"].startswith("not checked: the target did not answer")


def test_doctor_and_render_say_what_the_churn_needs_and_does(lora_server: str, tmp_path: Any, capsys: Any) -> None:
    from kfchaos.cli import main
    from kfchaos.doctor.diagnose import check_lora
    from kfchaos.doctor.model import Report, Status
    from kfchaos.validate import parse_experiment

    report = Report()
    check_lora(report, parse_experiment(_churn_text(lora_server), "x.yaml"))
    check_lora(report, parse_experiment(_churn_text(f"http://127.0.0.1:{free_port()}"), "x.yaml"))
    assert [c.status for c in report.checks] == [Status.PASS, Status.UNKNOWN]
    path = tmp_path / "exp.yaml"
    path.write_text(_churn_text("http://vllm:8000"))
    assert main(["render", str(path)]) == 0
    out = capsys.readouterr().out
    assert "# churn (lora-adapter-churn): no cluster object" in out
    assert "POST /v1/load_lora_adapter for 2 adapter(s): kfchaos-sql=/adapters/sql" in out
    assert all(line.startswith("#") for line in out.splitlines())


def test_preflight_refuses_a_churn_the_plan_could_not_send(tmp_path: Any) -> None:
    import yaml

    from kfchaos.steps.setup import preflight

    data = yaml.safe_load(_churn_text("http://127.0.0.1:9"))
    data["spec"]["traffic"] = {"file": "traffic.jsonl", "stage_duration": "3s", "stages": [100]}
    with pytest.raises(KfchaosError, match="with a traffic file or fit_from give rate"):
        preflight(yaml.safe_dump(data), "run-1")


class _Flood(http.server.BaseHTTPRequestHandler):
    """A hostile target: /v1/models sends 8 MiB that is not a model list, /metrics a page without the series."""

    def do_GET(self) -> None:
        body = b"[" * (8 * 1024 * 1024) if self.path == "/v1/models" else b"vllm:num_requests_running 1\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_flooding_target_is_read_bounded_and_never_taken_as_an_empty_list() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flood)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        client = LoraClient(endpoint)
        status, names, error = client.models()
        assert (status, names) == (200, []) and error and "not the model list" in error
        with pytest.raises(KfchaosError, match="cannot list the target's adapters"):
            sweep(_experiment(endpoint), client)
        assert "--enable-lora" in (client._lora_enabled() or "")
    finally:
        server.shutdown()


def test_kfchaos_replay_of_the_experiment_churns_too(lora_server: str, tmp_path: Any, capsys: Any) -> None:
    from kfchaos.cli import main

    path = tmp_path / "exp.yaml"
    path.write_text(_churn_text("http://127.0.0.1:9"))
    code = main(["replay", "--experiment", str(path), "--target", lora_server, "--duration", "2s", "--quiet"])
    assert code in (0, 2)  # a 2 s replay may be judged too short; the churn is what is checked here
    err = capsys.readouterr().err
    assert "lora churn churn: " in err and " 0 refused" in err
    assert not [n for n in _listed(lora_server) if n.startswith("kfchaos-")]


@pytest.mark.parametrize(("not_found", "flagged"), [(5, False), (16, True)])
def test_a_churn_whose_requests_mostly_met_404_cannot_pass(tmp_path: Any, not_found: int, flagged: bool) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kfchaos.faults.lorachurn import request_problems

    statuses = [404] * not_found + [200] * (30 - not_found) + [200] * 50
    names = ["churn"] * 30 + [None] * 50  # 50 traffic requests, never counted here
    path = str(tmp_path / "records.parquet")
    pq.write_table(pa.table({"fault_request": pa.array(names, pa.string()), "status": statuses}), path)
    problems = request_problems(path, _experiment("http://127.0.0.1:9"), 10)
    assert bool(problems) is flagged
    if flagged:
        assert "16 of its 30 requests were answered 404" in problems[0] and "replicas" in problems[0]
