"""Nothing kfchaos writes lands through a link planted in its output (kfchaos.safefile).

Each writer runs once into an empty folder, which names every file it writes; then again into a folder where a
symlink, or a hard link, to a file outside stands at each of those names. The file outside must be untouched (its
content, and its link count back at 1: the planted hard link was replaced, not written through), and every name
must hold a regular file of its own. A symlink standing at one of kfchaos's own folders is refused.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from kfchaos import audit, safefile
from kfchaos.cli import main
from kfchaos.kfp.compile import LOCK_FILE, Plan, apply
from tests.report.sample import SampleRun, write_full_run_folder, write_sample
from tests.support.hostile import hostile_server, json_answer
from tests.support.kubeapi import KubeApiServer

PRECIOUS = "precious\n"


@dataclass(frozen=True)
class Inputs:
    sample: SampleRun
    traffic: Path


Writer = Callable[[Path, Inputs], None]


def _traffic(path: Path, count: int = 20) -> Path:
    lines = ({"id": f"r{i}", "timestamp": i * 0.01, "body": {"prompt": "say hi " * (1 + i % 5), "max_tokens": 8}}
             for i in range(count))  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    root = tmp_path_factory.mktemp("inputs")
    return Inputs(write_sample(root / "sample", with_control=True), _traffic(root / "traffic.jsonl"))


def _verdict_out(out: Path, given: Inputs) -> None:
    assert main([*given.sample.verdict_argv(), "--out", str(out)]) == 1


def _run_folder_with_every_part(out: Path, given: Inputs) -> None:
    """Every file a run folder can hold: a pipeline's stages, fault actions, audit record and evidence too."""
    write_full_run_folder(out, given.sample)


def _replay_out(out: Path, given: Inputs) -> None:
    with hostile_server(lambda method, path: json_answer({"ok": True})) as server:
        argv = ["replay", str(given.traffic), "--target", server.url, "--no-loop", "--quiet"]
        assert main([*argv, "--out", str(out / "records.parquet")]) == 0


def _replay_merge_out(out: Path, given: Inputs) -> None:
    table = pq.read_table(given.sample.records)
    one_stage = out.parent / f"{out.name}-stage.parquet"
    pq.write_table(table.filter(pc.equal(table["stage"], 10)), one_stage)
    assert main(["replay", "--merge", str(one_stage), "--out", str(out / "merged.parquet")]) in (0, 2)


def _traffic_fit_out(out: Path, given: Inputs) -> None:
    assert main(["traffic", "fit", str(given.traffic), "--out", str(out / "synthetic.yaml")]) == 0


def _init(out: Path, given: Inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFCHAOS_DEMO_BASELINE", str(given.sample.baseline))
    assert main(["init", str(out / "my-experiment.yaml"), "--force"]) == 0


def _cleanup_audit(out: Path, given: Inputs) -> None:
    with KubeApiServer() as server:
        assert main(["cleanup", "--run-id", "run-x", "--host", server.url, "--audit", str(out / "audit.jsonl")]) == 0


def _compile(out: Path, given: Inputs) -> None:
    compiled = Path("pipelines/compiled/chaos-experiment/1.0.0.yaml")
    apply(out, Plan(writes={compiled: b"pipelineSpec: {}\n", LOCK_FILE: b"pipelines: {}\n"}, refusals=[], stale=[],
                    entries=[]))  # fmt: skip


def _pipeline_outputs(out: Path, given: Inputs) -> None:
    """What the pipeline's steps write to their KFP output paths."""
    from kfchaos.steps import faults, setup

    experiment_text = given.sample.experiment.read_text()
    setup.baseline(experiment_text, given.sample.baseline.read_text(), str(out / "baseline_out"))
    faults.cleanup(_without_faults(experiment_text), "run-1", str(out / "cleanup_record"))
    audit.write_record({"kind": "kfchaos.AuditRecord", "record_hash": "sha256:0"}, out / "audit")


def _without_faults(experiment_text: str) -> str:
    """The experiment with no fault: the exit handler then sweeps nothing (no cluster here)."""
    document = yaml.safe_load(experiment_text)
    document["spec"]["faults"] = []
    return yaml.safe_dump(document)


def _baseline_and_metrics(out: Path, given: Inputs) -> None:
    from kfchaos.baseline import load_baseline
    from kfchaos.metrics.snapshot import MetricsSnapshot

    load_baseline(given.sample.baseline)[0].write(out / "baseline.yaml")
    MetricsSnapshot.load(given.sample.metrics).write(out / "metrics.json")


def _demo_env(out: Path, given: Inputs) -> None:
    from kfchaos.demo.runner.up import UpState, write_env

    state = UpState("steady", str(out), [], "http://127.0.0.1:1", "http://127.0.0.1:2", "", "", "", "now")
    write_env(state, out)


WRITERS: dict[str, Callable[..., None]] = {
    "verdict --out": _verdict_out,
    "run folder, every part": _run_folder_with_every_part,
    "replay --out": _replay_out,
    "replay --merge --out": _replay_merge_out,
    "traffic fit --out": _traffic_fit_out,
    "init --force": _init,
    "cleanup --audit": _cleanup_audit,
    "compile": _compile,
    "pipeline step outputs": _pipeline_outputs,
    "baseline and metrics files": _baseline_and_metrics,
    "demo up env file": _demo_env,
}


def _run(name: str, out: Path, given: Inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = WRITERS[name]
    if writer is _init:
        _init(out, given, monkeypatch)
    else:
        writer(out, given)


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def _plant(folder: Path, names: list[str], victim: Path, how: str) -> None:
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if how == "symlink":
            path.symlink_to(victim)
        else:
            os.link(victim, path)


@pytest.mark.parametrize("how", ["symlink", "hard link"])
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_no_file_is_written_through_a_planted_link(
    writer: str, how: str, tmp_path: Path, inputs: Inputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tmp_path / "first"
    first.mkdir()
    _run(writer, first, inputs, monkeypatch)
    names = _files(first)
    assert names, f"{writer} wrote nothing: the test would prove nothing"
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text(PRECIOUS)
    out = tmp_path / "out"
    out.mkdir()
    _plant(out, names, victim, how)
    assert victim.stat().st_nlink == (len(names) + 1 if how == "hard link" else 1)
    _run(writer, out, inputs, monkeypatch)
    assert victim.read_text() == PRECIOUS
    assert victim.stat().st_nlink == 1, "a planted hard link is still there: written through, not replaced"
    assert _files(outside) == ["victim.txt"]
    for name in names:
        info = os.lstat(out / name)
        assert stat.S_ISREG(info.st_mode) and info.st_nlink == 1, name
    assert not [p for p in out.rglob("*.tmp")], "a temporary file was left behind"


def test_a_run_folder_and_its_evidence_are_private(tmp_path: Path, inputs: Inputs) -> None:
    out = tmp_path / "runs" / "run-1"
    _run_folder_with_every_part(out, inputs)
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert stat.S_IMODE((out / "evidence").stat().st_mode) == 0o700
    for path in out.rglob("*"):
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


@pytest.mark.parametrize("planted", ["run folder", "evidence/"])
def test_a_symlink_planted_at_an_own_folder_is_refused(planted: str, tmp_path: Path, inputs: Inputs) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "runs" / "run-1"
    if planted == "run folder":
        out.parent.mkdir(parents=True)
        out.symlink_to(elsewhere, target_is_directory=True)
    else:
        out.mkdir(parents=True)
        (out / "evidence").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(safefile.UnsafeFolder, match="symlink"):
        _run_folder_with_every_part(out, inputs)
    assert not list(elsewhere.iterdir())


def test_the_replay_refuses_a_symlinked_partial_folder(tmp_path: Path, inputs: Inputs) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "records.parquet.partial").symlink_to(elsewhere, target_is_directory=True)
    with hostile_server(lambda method, path: json_answer({"ok": True})) as server:
        argv = ["replay", str(inputs.traffic), "--target", server.url, "--no-loop", "--quiet"]
        assert main([*argv, "--out", str(out / "records.parquet")]) == 3
    assert not list(elsewhere.iterdir())


def test_a_folder_another_user_owns_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    out = tmp_path / "run-1"
    out.mkdir()
    os.chown(out, 4242, 4242)
    with pytest.raises(safefile.UnsafeFolder, match="belongs to user id 4242"):
        safefile.Folder.open(out, private=True, own=True)
