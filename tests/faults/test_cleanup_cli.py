"""`kfchaos cleanup`: usage errors exit 3; a sweep prints what it deleted and can write the audit trail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfchaos.cli import main
from kfchaos.faults.backend import RecoveryTimeout
from kfchaos.faults.chaosmesh import ChaosMeshBackend
from tests.faults.conftest import manifests
from tests.support.kubeapi import KubeApiServer


def test_needs_run_id_or_older_than(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cleanup"]) == 3
    assert "--run-id" in capsys.readouterr().err


def test_bad_duration_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cleanup", "--older-than", "6", "--host", "http://127.0.0.1:9"]) == 3
    assert "invalid duration '6'" in capsys.readouterr().err


def test_cleanup_all_namespaces_with_audit(
    server: KubeApiServer, backend: ChaosMeshBackend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for manifest in manifests("run-x"):
        backend.apply(manifest)
    audit = tmp_path / "audit.jsonl"
    assert main(["cleanup", "--run-id", "run-x", "--host", server.url, "--audit", str(audit)]) == 0
    assert "deleted 2 object(s) of run run-x in all namespaces" in capsys.readouterr().out
    assert server.chaos_objects() == []
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    deletes = [e for e in events if e["verb"] == "delete"]
    assert len(deletes) == 2 and all(e["code"] == 200 and e["namespace"] == "llm-serving" for e in deletes)


def test_cleanup_reports_a_fault_stuck_terminating_with_the_finalizer_remedy(
    server: KubeApiServer, backend: ChaosMeshBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    """Chaos Mesh keeps `chaos-mesh/records` while a record cannot be recovered (controllers/common/finalizers):
    cleanup gives up at its deadline, names the Terminating object and the command that lets it go: the finalizer
    removed, since the cleanFinalizer=forced annotation is not read while Recover fails (the real controller,
    tests/contract/scenarios.py finalizer_stuck_then_released)."""
    handle = backend.apply(manifests("run-stuck")[0])
    backend.wait_injected(handle)
    server.stall_recovery(handle.namespace, handle.name)
    code = main(["cleanup", "--run-id", "run-stuck", "--host", server.url, "--timeout", "1s"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"networkchaos {handle.namespace}/{handle.name} (Terminating since" in err
    assert "records not recovered" in err
    command = (
        f"kubectl patch networkchaos.chaos-mesh.org -n {handle.namespace} {handle.name} --type=merge "
        """-p '{"metadata":{"finalizers":null}}'"""
    )
    assert command in err
    assert "does not read its chaos-mesh.chaos-mesh.org/cleanFinalizer=forced annotation" in err


def test_recovery_timeout_gives_the_finalizer_remedy(server: KubeApiServer, backend: ChaosMeshBackend) -> None:
    """wait_recovered on a fault whose Recover keeps failing names the same command as cleanup does."""
    handle = backend.apply(manifests("run-stuck")[0])
    backend.wait_injected(handle)
    server.stall_recovery(handle.namespace, handle.name)
    backend.remove(handle)
    with pytest.raises(RecoveryTimeout) as caught:
        backend.wait_recovered(handle, timeout=0.5)
    message = str(caught.value)
    assert f"kubectl patch networkchaos.chaos-mesh.org -n {handle.namespace} {handle.name} --type=merge" in message
    assert "does not read its chaos-mesh.chaos-mesh.org/cleanFinalizer=forced annotation" in message


def test_sweep_deadline_covers_a_server_that_never_answers() -> None:
    """One deadline for the whole sweep: a request to an API server that accepts and never answers is cut to
    what is left of it, retries included, so cleanup and the exit handler end with an error, never hang."""
    import socket

    from kfchaos.faults.backend import BackendError
    from kfchaos.faults.retry import RetryPolicy
    from tests.support.kubeapi import kubernetes_client

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        host, port = listener.getsockname()
        backend = ChaosMeshBackend(
            kubernetes_client(f"http://{host}:{port}"),
            retry=RetryPolicy(attempts=50, base_delay=0.01, max_delay=0.05),
            request_timeout=600,
        )
        with pytest.raises(BackendError) as caught:
            backend.sweep("run-x", ["llm-serving"], timeout=0.5)
    assert "deadline" in str(caught.value) or "did not answer" in str(caught.value)
    assert "timed out" in str(caught.value) or "deadline" in str(caught.value)
