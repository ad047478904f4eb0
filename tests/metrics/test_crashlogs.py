"""Where previous container logs come from: the demo supervisor's state file under the local backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfchaos.metrics import crashlogs
from kfchaos.metrics.oom import GPU_OOM_LOG


def test_demo_reader_reads_the_previous_container_log(tmp_path: Path) -> None:
    log = tmp_path / "container-0.log"
    log.write_text("INFO loading\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n")
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"pid": 1, "previous_log": str(log)}))
    text = crashlogs.demo_reader(state)("demo", "demo-llm-0", "vllm")
    assert text is not None and GPU_OOM_LOG.search(text)


def test_demo_reader_without_a_previous_log_reads_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"pid": 1, "previous_log": None}))
    assert crashlogs.demo_reader(state)("demo", "demo-llm-0", "vllm") is None
    assert crashlogs.demo_reader(tmp_path / "absent.json")("demo", "demo-llm-0", "vllm") is None


def test_the_local_backend_uses_the_demo_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "c.log"
    log.write_text("ValueError: not an OOM\n")
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"previous_log": str(log)}))
    monkeypatch.setenv("KFCHAOS_FAULT_BACKEND", "local")
    monkeypatch.setenv("KFCHAOS_DEMO_STATE", str(state))
    reader = crashlogs.from_environment()
    assert reader is not None and reader("demo", "p", "c") == "ValueError: not an OOM\n"


@pytest.mark.parametrize(
    ("line", "gpu_oom"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", True),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory.", True),
        ("RuntimeError: CUDA error: out of memory", True),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", False),
        ("Killed", False),
    ],
)
def test_what_counts_as_a_gpu_oom_in_a_log(line: str, gpu_oom: bool) -> None:
    assert bool(GPU_OOM_LOG.search(line)) is gpu_oom
