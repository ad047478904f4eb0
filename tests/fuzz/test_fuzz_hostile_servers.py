"""Fuzz the surfaces of issue 20: hostile Kubernetes and KFP API servers (over real loopback sockets, through the
real client libraries), run folders and Parquet records. Each case ends in a result or a kfchaos error within the
harness' bounds (tests/fuzz/harness.py: 20 s, 1 GiB) -- never a traceback, a hang or an unbounded read."""

from __future__ import annotations

import json
import random
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfchaos.errors import KfchaosError
from tests.fuzz.harness import assert_contract, bounded, budget, run_cli, warm
from tests.fuzz.test_fuzz_json import RAW, mutated

POD_LIST = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [{"metadata": {"name": "p"}}]}
CHAOS_LIST = {"kind": "NetworkChaosList", "apiVersion": "chaos-mesh.org/v1alpha1", "metadata": {}, "items": []}
EXPERIMENTS = {"experiments": [{"experiment_id": "e", "display_name": "x"}], "total_size": 1}
HEALTHZ = {"multi_user": False, "tag_name": "2.15.0"}


class _Answer:
    status = 200
    body = b"{}"
    location = ""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(_Answer.status)
        if _Answer.location:
            self.send_header("Location", _Answer.location)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(_Answer.body)))
        self.end_headers()
        self.wfile.write(_Answer.body)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


STATUSES = st.sampled_from([200, 200, 200, 307, 404, 409, 429, 500, 503, 204])
LOCATIONS = st.sampled_from(["", "http://127.0.0.1:9/elsewhere", "/same-origin", "\x1b]52;c;eA==\x07"])


def _kube(url: str) -> str:
    from kfchaos.faults.chaosmesh import ChaosMeshBackend

    backend = ChaosMeshBackend.from_config(host=url)
    try:
        return f"deleted {backend.sweep('r1', ['ns'], timeout=1.0)}"
    except KfchaosError as exc:
        return f"error: {exc}"


@settings(max_examples=budget(12), deadline=None)
@given(body=st.one_of(mutated(POD_LIST), mutated(CHAOS_LIST), RAW), status=STATUSES, location=LOCATIONS)
def test_a_hostile_kubernetes_api_ends_in_a_result_or_a_kfchaos_error(
    server: str, body: bytes, status: int, location: str
) -> None:
    warm()
    _Answer.status, _Answer.body, _Answer.location = status, body, location
    outcome = bounded(lambda: _kube(server))
    assert outcome.broke is None and outcome.error is None, (body[:300], status, outcome)


def _kfp(url: str) -> str:
    from kfchaos.kfp.client import Connection, connect

    client = connect(Connection(host=url, token="t"))
    try:
        client.list_experiments()
    except Exception as exc:  # the SDK's own error kinds; what matters here is that it ends, bounded
        return f"error: {type(exc).__name__}"
    return "ok"


@settings(max_examples=budget(8), deadline=None)
@given(body=st.one_of(mutated(EXPERIMENTS), mutated(HEALTHZ), RAW), status=STATUSES, location=LOCATIONS)
def test_a_hostile_kfp_api_ends_within_bounds(server: str, body: bytes, status: int, location: str) -> None:
    warm()
    _Answer.status, _Answer.body, _Answer.location = status, body, location
    outcome = bounded(lambda: _kfp(server))
    assert outcome.broke is None, (body[:300], status, outcome)
    assert outcome.error is None or outcome.error.startswith("KfchaosError"), outcome  # connect wraps the SDK


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kfchaos.cli import main
    from tests.report.sample import write_sample

    root = tmp_path_factory.mktemp("runfolder")
    sample = write_sample(root / "in")
    out = root / "run"
    assert main([*sample.verdict_argv(), "--out", str(out)]) == 1
    return out


@settings(max_examples=budget(10), deadline=None)
@given(
    name=st.sampled_from(["run.json", "verdict.json", "run-state.json", "metrics.json"]),
    data=st.one_of(RAW, st.binary(max_size=256)),
)
def test_a_forged_run_folder_file_ends_in_a_verdict_or_an_input_error(
    run_folder: Path, tmp_path_factory: pytest.TempPathFactory, name: str, data: bytes
) -> None:
    folder = tmp_path_factory.mktemp("forged") / "run"
    shutil.copytree(run_folder, folder)
    (folder / name).write_bytes(data)
    assert_contract(run_cli(["verdict", "--run", str(folder)]))


@settings(max_examples=budget(12), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), flips=st.integers(1, 16), cut=st.booleans())
def test_damaged_parquet_records_end_in_a_verdict_or_an_input_error(
    run_folder: Path, tmp_path_factory: pytest.TempPathFactory, seed: int, flips: int, cut: bool
) -> None:
    data = bytearray((run_folder / "records.parquet").read_bytes())
    rng = random.Random(seed)
    for _ in range(flips):
        data[rng.randrange(len(data))] = rng.randrange(256)
    if cut:
        data = data[: rng.randrange(len(data))]
    path = tmp_path_factory.mktemp("parquet") / "records.parquet"
    path.write_bytes(bytes(data))
    experiment = run_folder / "experiment.yaml"
    assert_contract(run_cli(["verdict", "--experiment", str(experiment), "--records", str(path)]))


def test_the_seeds_are_sane(server: str, run_folder: Path) -> None:
    _Answer.status, _Answer.body, _Answer.location = 200, json.dumps(CHAOS_LIST).encode(), ""
    assert _kube(server).startswith("deleted")
    assert_contract(run_cli(["verdict", "--run", str(run_folder)]), allowed=(1,))
