"""`kfchaos replay`: exit codes, summary output, Parquet, experiments and the shipped sample recording."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kfchaos.cli import main
from kfchaos.records import REQUEST_SCHEMA
from kfchaos.traffic.api import plan_stage
from kfchaos.validate import load_experiment
from tests.conftest import EXPERIMENTS, ROOT

from .loopback_server import LoopbackServer

pytestmark = pytest.mark.integration
SAMPLE = ROOT / "traffic" / "vllm-prod-sample.jsonl.gz"


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer(tokens=3, gap_ms=2) as running:
        yield running


@pytest.fixture
def traffic(tmp_path: Path) -> str:
    path = tmp_path / "t.jsonl"
    rows = [{"id": f"r{i}", "timestamp": i * 0.01, "path": "/ok"} for i in range(30)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    return str(path)


def test_replay_prints_summary_writes_parquet_and_reports_malformed_lines(
    server: LoopbackServer, traffic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "records.parquet"
    code = main(["replay", traffic, "--target", server.url, "--out", str(out), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "VALID" in captured.out and "ok 30" in captured.out
    assert f"{traffic}:31: skipped: invalid JSON" in captured.err
    assert pq.read_schema(out).equals(REQUEST_SCHEMA) and pq.read_metadata(out).num_rows == 30


def test_replay_json_summary_and_shard(
    server: LoopbackServer, traffic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", traffic, "--target", server.url, "--shard", "1/2", "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["shards"] == [1] and 0 < summary["intended"] < 30
    assert summary["source"]["malformed_count"] == 1 and summary["plan_hash"].startswith("sha256:")


def test_invalid_stage_exits_2(server: LoopbackServer, traffic: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", traffic, "--target", server.url, "--max-lag", "1ns", "--quiet"]) == 2
    assert "INVALID (send lag p99" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay", "/nonexistent.jsonl", "--target", "http://127.0.0.1:9"], "not found"),
        (["replay", "TRAFFIC", "--target", "http://127.0.0.1:9", "--shard", "2/2"], "is not i/n"),
        (["replay", "TRAFFIC", "--target", "ftp://x"], "is not an http:// or https:// URL with a host"),
        (["replay", "TRAFFIC", "--target", "http://127.0.0.1:9", "--api", "openai-chat"], "needs a model"),
    ],
)
def test_input_errors_exit_3(argv: list[str], message: str, traffic: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [traffic if a == "TRAFFIC" else a for a in argv]
    with pytest.raises(SystemExit) if "--shard" in argv else _nothing():
        assert main(argv) == 3
    assert message in capsys.readouterr().err


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_experiment_with_sample_recording_and_credential_from_env(
    server: LoopbackServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFCHAOS_TARGET_TOKEN", "s3cret-token")
    argv = ["replay", "--experiment", str(EXPERIMENTS / "vllm-network-delay.yaml"), "--target", server.url,
            "--stage", "30", "--speed", "100", "--duration", "2s", "--json", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["intended"] > 0 and summary["errors"] == {} and summary["ttft"] is not None
    assert "s3cret-token" not in captured.out + captured.err
    assert all(seen.headers["authorization"] == "Bearer s3cret-token" for seen in server.seen)
    assert all("cookie" not in seen.headers for seen in server.seen)  # the recording's cookies are stripped


def test_missing_credential_names_the_variable_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KFCHAOS_TARGET_TOKEN", raising=False)
    argv = ["replay", "--experiment", str(EXPERIMENTS / "vllm-network-delay.yaml"), "--target", "http://127.0.0.1:9"]
    assert main(argv) == 3
    assert "KFCHAOS_TARGET_TOKEN is not set" in capsys.readouterr().err


def test_shipped_sample_is_small_and_clean_and_every_experiment_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SAMPLE.stat().st_size < 200_000
    for experiment in sorted(EXPERIMENTS.glob("*.yaml")):
        spec = load_experiment(experiment).spec
        if spec.target.auth is not None:
            monkeypatch.setenv(spec.target.auth.env, "x")
        first = spec.traffic.stages[0]
        plan = plan_stage(experiment, first, duration=30.0)
        planned = list(plan.schedule())
        assert planned, experiment.name
        assert plan.report.malformed_count == 0, plan.report.describe()
        assert plan.hash == plan_stage(experiment, first, duration=30.0).hash


def test_progress_lines_when_not_a_terminal(server: LoopbackServer, tmp_path: Path) -> None:
    import io

    from kfchaos.traffic.api import run_stage
    from kfchaos.traffic.progress import Progress
    from kfchaos.traffic.settings import ReplaySettings

    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "timestamp": i * 0.01}) + "\n" for i in range(60)))
    stream = io.StringIO()
    run_stage(plan_stage(ReplaySettings(stage=100, source=str(path))), server.url, progress=Progress(stream, 0.2))
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("replay: stage-100 ") for line in lines)
    assert "sent 60/60" in lines[-1] and "errors 0" in lines[-1]


def test_shards_replayed_then_merged_by_the_command(
    server: LoopbackServer, traffic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = []
    for shard in ("0/2", "1/2"):
        out = tmp_path / f"s{shard[0]}.parquet"
        assert main(["replay", traffic, "--target", server.url, "--shard", shard, "--out", str(out), "--quiet"]) == 0
        files.append(str(out))
    capsys.readouterr()
    merged = tmp_path / "merged.parquet"
    assert main(["replay", "--merge", *files, "--out", str(merged), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["shards"] == [0, 1] and summary["intended"] == 30 and summary["ok"] == 30
    assert pq.read_metadata(merged).num_rows == 30
    assert main(["replay", "--merge", str(tmp_path / "missing.parquet")]) == 3
    not_records = tmp_path / "other.parquet"
    pq.write_table(pq.read_table(merged).select(["stage"]), not_records)
    assert main(["replay", "--merge", str(not_records)]) == 3
    assert "missing columns" in capsys.readouterr().err
    # Records version 2 (before `ended`) still merge; their end times read as unknown, not as data.
    older = tmp_path / "v2.parquet"
    pq.write_table(pq.read_table(merged).drop_columns(["ended"]), older)
    again = tmp_path / "again.parquet"
    assert main(["replay", "--merge", str(older), "--out", str(again), "--quiet"]) == 0
    assert pq.read_table(again).column("ended").null_count == 30
