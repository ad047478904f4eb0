"""Which KubeReader the evidence bundle reads: the demo's under the local fault backend, chosen in
kfchaos.steps.seams with the backend, so kfchaos.evidence never imports kfchaos.demo (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfchaos.demo.faults.kubeview import DemoKube
from kfchaos.steps import seams


def test_local_backend_with_a_state_file_reads_the_demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(seams.BACKEND_ENV, "local")
    monkeypatch.setenv(seams.DEMO_STATE_ENV, str(tmp_path / "state.json"))
    chosen = seams.kube_reader()
    assert chosen is not None
    reader, why = chosen
    assert isinstance(reader, DemoKube) and reader.state_file == tmp_path / "state.json" and why == ""


@pytest.mark.parametrize(("backend", "state"), [("chaosmesh", "state.json"), (None, "state.json"), ("local", None)])
def test_otherwise_the_cluster_is_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: str | None, state: str | None
) -> None:
    for name, value in ((seams.BACKEND_ENV, backend), (seams.DEMO_STATE_ENV, state)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, str(tmp_path / value) if name == seams.DEMO_STATE_ENV else value)
    assert seams.kube_reader() is None  # kfchaos.evidence.runbundle.for_run then reads the cluster
