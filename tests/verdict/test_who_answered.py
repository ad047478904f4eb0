"""Issue 31 class 4: the answer must come from the model the request asked for. A gateway that falls back to another
model answers 200 with a good stream, but not from the target: those requests failed for the target, and the
verdict reports the share. Real `kfchaos replay` runs against a loopback server that names another model in every
tenth stream, and against the demo server serving a LoRA adapter (whose answers name the adapter, as vLLM's do)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import requests

from tests.demo.test_lora import _load, _supervised
from tests.traffic.loopback_server import LoopbackServer
from tests.verdict.test_completions import _run, _verdict
from tests.verdict.world import kfchaos

pytestmark = pytest.mark.integration


def test_answers_from_a_fallback_model_are_failed_requests_with_their_share(tmp_path: Path) -> None:
    # The experiment's model is "m"; every tenth answer names "fallback-7b" (a gateway's fallback route).
    with LoopbackServer(tokens=3, gap_ms=1, misbehave_every=10, answer_model="fallback-7b") as server:
        experiment = _run(tmp_path, server)
    code, verdict, checks = _verdict(experiment)
    error_rate = checks["error_rate"]
    # Before: a 200 with tokens and [DONE] was a success, whoever sent it.
    assert error_rate["status"] == "FAIL", error_rate
    assert error_rate["details"]["failed_by_kind"] == {"wrong_model": 60}
    completions = checks["completions"]
    assert completions["details"]["answered_by"] == {"m": 540, "fallback-7b": 60}
    assert "60 of 600 (10%) answered by another model (answers named: m 540, fallback-7b 60)" in completions["reason"]
    records = pq.read_table(experiment.with_name("records.parquet"), columns=["model", "error"]).to_pylist()
    assert {r["model"] for r in records if r["error"] == "wrong_model"} == {"fallback-7b"}
    assert (code, verdict["status"]) == (1, "FAIL")


def test_a_lora_adapters_answers_name_the_adapter_and_are_the_targets(tmp_path: Path) -> None:
    # vLLM names a LoRA request's answers by the adapter (models/serving.py model_name); the demo server does too.
    process, base = _supervised(
        tmp_path, ["--enable-lora", "--max-loras", "1"], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
    )
    try:
        assert _load(base, "sql-adapter").status_code == 200
        source = tmp_path / "prompts.jsonl"
        rows = [{"id": f"p{i}", "timestamp": i * 0.05, "method": "POST", "path": "/v1/completions",
                 "body": {"prompt": f"q{i} a b c", "max_tokens": 3}} for i in range(20)]  # fmt: skip
        source.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = tmp_path / "records.parquet"
        done = kfchaos("replay", str(source), "--target", base, "--api", "openai-completions", "--model",
                       "sql-adapter", "--out", str(out), "--quiet", "--json")  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert requests.get(f"{base}/health", timeout=5).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
    records = pq.read_table(out, columns=["model", "error", "status"]).to_pylist()
    assert {(r["model"], r["error"], r["status"]) for r in records} == {("sql-adapter", None, 200)}
