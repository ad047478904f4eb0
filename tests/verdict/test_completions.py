"""Issue 31 class 3: only a completed 2xx is a success. Real `kfchaos replay` against a misbehaving loopback server
(tests/traffic/loopback_server.py), judged by `kfchaos verdict`: a redirect to a login page, an empty 2xx body,
a stream ending with finish_reason "abort" or "error", an error event mid-stream are failed requests, counted in
the error rate with their kind in the verdict (the `completions` check the report shows); finish_reason "length"
is a completion, reported; a tool-call-only answer is a completion; TTFT is the first token, not the role chunk.

The experiments here have no baseline or metrics (their runs are INCONCLUSIVE on those grounds whatever the
traffic): what each test shows is the error rate and the run's status a FAIL makes of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.traffic.loopback_server import LoopbackServer
from tests.verdict.world import kfchaos

pytestmark = pytest.mark.integration

EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {{name: completions, version: 1.0.0, owner: tests}}
spec:
  target:
    namespace: serving
    selector: {{labels: {{app: x}}}}
    endpoint: "{endpoint}"
    api: {api}
    model: m
  traffic:
    {traffic}
    stages: [100]
    stage_duration: 2s
  slo: {{p99_max: 5s, error_rate_max: 2%, min_samples: 300}}
  baseline: {{file: none.yaml}}
"""
SYNTHETIC = "synthetic: {rate: 300, arrival: constant, prompt_tokens: {distribution: fixed, mean: 8}}"


def _run(tmp_path: Path, server: LoopbackServer, api: str = "openai-chat", source: Path | None = None) -> Path:
    traffic = SYNTHETIC if source is None else f"file: {source}"
    experiment = tmp_path / "completions.yaml"
    experiment.write_text(EXPERIMENT.format(endpoint=server.url, api=api, traffic=traffic))
    records = tmp_path / "records.parquet"
    done = kfchaos("replay", "--experiment", str(experiment), "--stage", "100", "--target", server.url,
                   "--out", str(records), "--quiet", "--json")  # fmt: skip
    assert done.returncode in (0, 2), done.stderr[-2000:]
    return experiment


def _verdict(experiment: Path) -> tuple[int, dict[str, Any], dict[str, dict[str, Any]]]:
    records = experiment.with_name("records.parquet")
    done = kfchaos("verdict", "--experiment", str(experiment), "--records", str(records), "--json")
    assert done.returncode in (0, 1, 2), done.stderr[-2000:]
    verdict = json.loads(done.stdout)
    checks = {c["name"]: c for c in verdict["stages"][0]["checks"]}
    return done.returncode, verdict, checks


def _paths(tmp_path: Path, odd: str, every: int = 10, count: int = 600) -> Path:
    path = tmp_path / "traffic.jsonl"
    rows = [{"id": f"r{i}", "timestamp": 100.0 + i / 300, "path": odd if i % every == 0 else "/"} for i in range(count)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("route", "kind", "words"),
    [
        ("/login", "redirect", "redirects (3xx), not followed"),
        ("/empty", "empty_body", "2xx answers with an empty body"),
    ],
)
def test_a_redirect_or_an_empty_2xx_is_a_failed_request(tmp_path: Path, route: str, kind: str, words: str) -> None:
    # One request in ten answered 302 to a login page (or 200 with nothing in it): before, both were successes.
    with LoopbackServer() as server:
        experiment = _run(tmp_path, server, api="http", source=_paths(tmp_path, route))
    code, verdict, checks = _verdict(experiment)
    error_rate = checks["error_rate"]
    assert error_rate["status"] == "FAIL", error_rate
    assert error_rate["details"]["failed_by_kind"] == {kind: 60}
    assert words in checks["completions"]["reason"]
    assert (code, verdict["status"]) == (1, "FAIL")


@pytest.mark.parametrize(
    ("behaviour", "kind"),
    [
        ({"finish_reason": "abort"}, "finish_abort"),
        ({"finish_reason": "error"}, "finish_error"),
        # vLLM's streaming error as it writes it now, and as older versions did (the ErrorResponse flat).
        ({"error_event": {"error": {"message": "boom", "type": "InternalServerError", "code": 500}}}, "stream_error"),
        ({"error_event": {"object": "error", "message": "boom", "type": "InternalServerError", "code": 500}},
         "stream_error"),
    ],
)  # fmt: skip
def test_a_stream_that_did_not_complete_is_a_failed_request(
    tmp_path: Path, behaviour: dict[str, Any], kind: str
) -> None:
    # Every tenth stream served its tokens and then was aborted, failed, or carried an error event before [DONE].
    with LoopbackServer(tokens=3, gap_ms=1, misbehave_every=10, **behaviour) as server:
        experiment = _run(tmp_path, server)
    code, verdict, checks = _verdict(experiment)
    error_rate = checks["error_rate"]
    assert error_rate["status"] == "FAIL", error_rate
    failed = error_rate["details"]["failed_by_kind"]
    assert set(failed) == {kind} and 55 <= failed[kind] <= 65, failed
    assert (code, verdict["status"]) == (1, "FAIL")


def test_finish_reason_length_is_a_completion_and_is_reported(tmp_path: Path) -> None:
    with LoopbackServer(tokens=3, gap_ms=1, finish_reason="length") as server:
        experiment = _run(tmp_path, server)
    _, _, checks = _verdict(experiment)
    assert checks["error_rate"]["status"] == "PASS", checks["error_rate"]
    completions = checks["completions"]
    assert completions["details"]["finish_reasons"] == {"length": 600}
    assert (
        "600 stopped at their length limit (max_tokens or max_model_len): completions, not errors"
        in (completions["reason"])
    )
    assert completions["gating"] is False


def test_a_tool_call_only_answer_is_a_completion(tmp_path: Path) -> None:
    with LoopbackServer(tokens=3, gap_ms=1, tool_calls=True) as server:
        experiment = _run(tmp_path, server)
    _, _, checks = _verdict(experiment)
    assert checks["error_rate"]["status"] == "PASS", checks["error_rate"]
    assert checks["completions"]["details"]["finish_reasons"] == {"tool_calls": 600}


def test_ttft_runs_to_the_first_token_not_the_role_chunk(tmp_path: Path) -> None:
    # The role chunk comes at once, the first token 150 ms later: TTFT is the 150 ms (vLLM's role chunk carries
    # `content: ""`, which is no output).
    with LoopbackServer(tokens=2, gap_ms=1, first_token_delay_ms=150) as server:
        experiment = _run(tmp_path, server)
    import pyarrow.parquet as pq

    ttft = pq.read_table(experiment.with_name("records.parquet"), columns=["ttft"]).column("ttft").to_numpy()
    assert float(ttft.min()) >= 0.15


def test_the_report_names_how_requests_failed(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        experiment = _run(tmp_path, server, api="http", source=_paths(tmp_path, "/login"))
    out = tmp_path / "run"
    records = experiment.with_name("records.parquet")
    done = kfchaos("verdict", "--experiment", str(experiment), "--records", str(records), "--out", str(out))
    assert done.returncode == 1, done.stderr[-2000:]
    report = (out / "report.md").read_text()
    assert "error\\_rate:" in report and "failed: 60 redirects (3xx), not followed: not the answer asked for" in report
    assert "60 redirects (3xx)" in (out / "report.html").read_text()
