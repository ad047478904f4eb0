"""The Chaos Mesh backend against answers no real API server gives but a broken or hostile one (or a proxy) can: a
status listing a million containerRecords, and 410 Gone on a list's later pages and on watches. Memory stays bounded,
a list is restarted, nothing hangs. The loopback API server of tests/support streams the flood (it never holds it);
the backend reads it in a process of its own (tests/hostile/flood_reader.py), whose peak memory is measured.

The bound asserted here is loose on purpose (a shared 2-core machine): the backend reads at most 4 MiB of an object's
answer and 16 MiB of a list page, and held about 4 MB and 16 MB more than before the call when measured; the code it
replaces read the whole 191 MB answer and decoded it, 1.3 to 1.7 GB. `make bench` (tests/bench/bench_faults.py) gives
the figures."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kfchaos.faults.backend import BackendError
from kfchaos.faults.chaosrecords import MAX_RECORDS
from kfchaos.faults.kubeclient import LIST_PAGE, MAX_RELISTS
from tests.faults.experiments import experiment_with
from tests.hostile.flood_reader import FAULT, RUN_ID, backend
from tests.support.hostile import hostile_server
from tests.support.kubeapi import Flood, KubeApiServer

ROOT = Path(__file__).resolve().parents[2]
FLOOD = 1_000_000  # 191 MB of JSON
BOUND_S = 60.0
PEAK_BOUND_KB = 256 << 10  # 256 MiB above the process's size before the call: far above 16 MiB, far below 1.3 GB
# The Status an expired continue token gets (k8s.io/apiserver pkg/storage/etcd3/errors.go, continueExpired).
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter."
)


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer(inject_delay=0.05) as api:
        api.add_pod("llm-serving", "vllm-0", {"app.kubernetes.io/name": "vllm"}, containers=["vllm"])
        yield api


def _flooded(server: KubeApiServer, count: int) -> None:
    """The run's fault applied and injected, then served with `count` records."""
    chaos = backend(server.url)
    handle = chaos.apply(chaos.experiment.spec.faults[0])  # type: ignore[union-attr]
    chaos.wait_injected(handle)
    server.flood_records(handle.namespace, handle.name, count)


def _read_in_child(url: str, mode: str) -> dict[str, object]:
    """flood_reader's line; a child still running after BOUND_S is killed, and its peak memory is the failure."""
    child = subprocess.Popen([sys.executable, "-m", "tests.hostile.flood_reader", url, mode], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        out, err = child.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        status = Path(f"/proc/{child.pid}/status").read_text()
        peak = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
        child.kill()
        child.communicate()
        pytest.fail(f"the backend was still reading after {BOUND_S:g}s ({peak.strip()})")
    assert child.returncode == 0, err[-3000:]
    result: dict[str, object] = json.loads(out.splitlines()[-1])
    return result


@pytest.mark.parametrize("mode", ["wait", "active", "sweep"])
def test_a_status_with_a_million_records_is_refused_unread_with_bounded_memory(
    server: KubeApiServer, mode: str
) -> None:
    """wait_injected and the stage's poll (a GET) and the sweep (a list). Before: the whole answer was read and
    decoded (1.3 GB and more), then a GET per record (a million): the wait never ended."""
    _flooded(server, FLOOD)
    result = _read_in_child(server.url, mode)
    peak = int(str(result["hwm_kb"])) - int(str(result["rss_before_kb"]))
    assert peak < PEAK_BOUND_KB, f"{mode}: {peak} kB more at the peak than before the call"
    limit = "16 MiB" if mode == "sweep" else "4 MiB"
    assert f"the answer is larger than {limit}; not read further" in str(result["error"]), result
    assert float(str(result["seconds"])) < BOUND_S


def test_a_status_under_the_size_bound_with_too_many_records_is_refused_without_a_get_per_record(
    server: KubeApiServer,
) -> None:
    """10,000 records (1.9 MB, an answer the size bound lets through): refused by count. Before: one pod GET per
    record at every wait and poll."""
    _flooded(server, 10_000)
    asked = len(server.requests)
    with pytest.raises(BackendError, match=f"lists 10000 records, more than the {MAX_RECORDS} kfchaos checks"):
        backend(server.url).wait_injected(backend(server.url).handle_of(experiment_with(FAULT).spec.faults[0]))
    pod_reads = [path for verb, path in server.requests[asked:] if verb == "GET" and "/pods/" in path]
    assert pod_reads == []


def _run_objects(server: KubeApiServer, count: int) -> None:
    """`count` faults of the run (more than a list page holds)."""
    faults = [{**FAULT, "name": f"delay-{index}"} for index in range(count)]
    chaos = backend(server.url)
    chaos.experiment = experiment_with(*faults)
    for fault in chaos.experiment.spec.faults:
        chaos.apply(fault)


def test_a_list_whose_later_page_is_gone_is_restarted_and_the_sweep_completes(server: KubeApiServer) -> None:
    """410 Gone on the second page (the list's snapshot expired between two pages), and on any watch. Before: the
    list came in one answer, however large (no page, so no bound)."""
    _run_objects(server, LIST_PAGE + 2)
    gone = server.fail(410, method="GET", query_contains="continue=", message=CONTINUE_EXPIRED)
    server.fail(410, query_contains="watch=", times=-1, message="too old resource version: 1 (1000)")
    assert backend(server.url).sweep(RUN_ID, timeout=20) == LIST_PAGE + 2
    assert server.chaos_objects() == []
    assert gone.hits == 1, "no second page was asked for: the list was not paged"
    lists = [path for verb, path in server.requests if verb == "GET" and "networkchaos?" in path]
    assert sum("continue=" not in path for path in lists) >= 2, "the list was not restarted after the 410"
    assert all("limit=" in path for path in lists)
    assert not [path for _, path in server.requests if "watch=" in path], "kfchaos opened a watch"


def test_a_list_gone_at_every_later_page_ends_with_an_error_not_a_hang(server: KubeApiServer) -> None:
    _run_objects(server, LIST_PAGE + 2)
    gone = server.fail(410, method="GET", query_contains="continue=", times=-1, message=CONTINUE_EXPIRED)
    started = time.monotonic()
    with pytest.raises(BackendError, match=f"answered 410 Gone {MAX_RELISTS + 1} times"):
        backend(server.url).sweep(RUN_ID, timeout=20)
    assert time.monotonic() - started < BOUND_S
    assert gone.hits == MAX_RELISTS + 1
    # A 410 on an object's read (no real server sends one) ends a wait at once, as before.
    server.fail(410, method="GET", path_contains="/networkchaos/", times=-1)
    chaos = backend(server.url)
    with pytest.raises(BackendError, match="410"):
        chaos.wait_injected(chaos.handle_of(experiment_with({**FAULT, "name": "delay-0"}).spec.faults[0]))


def test_a_compressed_answer_nobody_asked_for_is_refused_before_it_is_decoded() -> None:
    """A 200 KB gzip body that decodes to 200 MB of records, sent though kfchaos asked for none (urllib3 sends
    `Accept-Encoding: identity`). Before: decoded whole by the client (urllib3 decodes by Content-Encoding)."""
    import gzip

    flood = b"".join(Flood("llm-serving", 1_000_000).chunks())
    head = b'{"apiVersion":"chaos-mesh.org/v1alpha1","kind":"NetworkChaos","metadata":{"name":"x"},'
    bomb = gzip.compress(head + b'"status":{"experiment":{"containerRecords":' + flood + b"}}}", compresslevel=9)
    assert len(bomb) < 8 << 20
    del flood
    answer = (200, {"Content-Type": "application/json", "Content-Encoding": "gzip"}, bomb)
    with hostile_server(lambda method, path: answer) as server:
        chaos = backend(server.url)
        with pytest.raises(BackendError, match="gzip-encoded, which was not asked for"):
            chaos.is_active(chaos.handle_of(experiment_with(FAULT).spec.faults[0]))
        assert server.seen
