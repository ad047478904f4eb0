"""Requests cut in flight: a real `kfchaos replay` against a loopback server that hangs on some requests, stopped by
SIGTERM while they are still outstanding. Their latency is not unknown: it is at least the time they waited
(right-censored at the cut). A server that hangs on 4 % of requests fails its users, and the verdict says FAIL,
naming the censored requests; before, they were all "unknown" and the run INCONCLUSIVE (exit 2)."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from kfchaos.cli import EXIT_TERMINATED, main
from kfchaos.verdict.requests import load_requests
from tests.support.hostile import Answer, hostile_server, json_answer

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 60.0  # every wait; the replay ends in seconds once stopped
HANG_EVERY = 25  # one request in 25 (4 %) never gets an answer
LIMIT_S = 1.0

EXPERIMENT = f"""\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {{name: hangs, version: 1.0.0, owner: tests}}
spec:
  target:
    namespace: serving
    selector: {{labels: {{app: vllm}}}}
    endpoint: http://127.0.0.1:9
    timeout: 120s
  traffic:
    synthetic: {{rate: 100}}
    stages: [100]
    stage_duration: 60s
  slo: {{p99_max: {LIMIT_S:g}s, min_samples: 100}}
  baseline: {{file: baselines/none.yaml}}
  safety: {{max_pod_percent: 100%, max_fault_duration: 2h}}
"""


@pytest.mark.integration
def test_a_stopped_replay_against_a_hanging_server_fails_on_the_requests_cut_in_flight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = tmp_path / "e.yaml"
    experiment.write_text(EXPERIMENT)
    out = tmp_path / "records.parquet"
    released = threading.Event()
    counter = itertools.count(1)

    def answer(method: str, path: str) -> Answer:
        if next(counter) % HANG_EVERY == 0:
            released.wait(BOUND_S * 3)  # hangs until the test is over
        return json_answer({"ok": True})

    with hostile_server(answer) as server:
        try:
            argv = ["replay", "--experiment", str(experiment), "--stage", "100", "--out", str(out), "--quiet"]
            process = subprocess.Popen([sys.executable, "-m", "kfchaos", *argv, "--target", server.url], cwd=ROOT,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
            deadline = time.monotonic() + BOUND_S
            while len(server.seen) < 800:  # ~8 s of traffic: most hung requests have waited more than the limit
                assert process.poll() is None, process.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the replay never sent its requests"
                time.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=BOUND_S)
        finally:
            released.set()
            with contextlib.suppress(OSError):
                process.kill()
    assert process.returncode == EXIT_TERMINATED, err

    records = load_requests(out)
    waited = records.cut_waited()
    cut = np.isfinite(waited)
    assert int(cut.sum()) >= 20, "the hung requests are recorded as cut in flight"
    assert int((waited[cut] > LIMIT_S).sum()) >= 15
    assert pq.read_metadata(out).num_rows >= 800

    capsys.readouterr()
    folder = tmp_path / "judged"
    argv = ["verdict", "--experiment", str(experiment), "--records", str(out), "--json", "--out", str(folder)]
    assert main(argv) == 1  # FAIL: before, 2 (INCONCLUSIVE: every cut request unknown)
    verdict = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in verdict["stages"][0]["checks"]}
    p99 = checks["p99"]
    assert p99["status"] == "FAIL", p99
    found = re.search(r"\((\d+) of them cut in flight, waited ≥ ([\d.]+) s\)", p99["reason"])
    assert found, p99["reason"]
    assert int(found[1]) == p99["details"]["cut_in_flight_above"] >= 15
    assert float(found[2]) == pytest.approx(p99["details"]["cut_in_flight_waited_min"], abs=1e-3)
    assert p99["details"]["cut_in_flight_waited_min"] > LIMIT_S
    assert p99["value"] > LIMIT_S  # the P99 is at least the waits that reach the tail, not +inf nor a guess
    assert checks["replay"]["status"] == "INCONCLUSIVE"  # the cut replay is still said to be cut
    # The error and timeout rates do not know how the cut requests would have ended: unknown there.
    assert checks["error_rate"]["details"]["cut_in_flight"] == int(cut.sum())
    assert checks["error_rate"]["details"]["unknown"] == int(cut.sum())
    # Named: the longest waits, by send time, as the records hold them.
    named = checks["error_rate"]["details"]["cut_in_flight_longest"]
    order = np.argsort(-waited[cut], kind="stable")[:10]
    assert [n["sent"] for n in named] == records.sent[cut][order].tolist()
    assert named[0]["waited_s"] == float(np.nanmax(waited)) > LIMIT_S
    assert "cut in flight, waited ≥ " in (folder / "report.md").read_text()
    assert "cut in flight, waited ≥ " in (folder / "report.html").read_text()
