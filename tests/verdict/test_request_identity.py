"""Issue 31 class 2: one request is one record, wherever its copy lands (same stage, another stage, another shard,
shifted times). Records from real `kfchaos replay` runs against a loopback server; the copies are what a
misbehaving collector or an overlapping shard split makes of them; `kfchaos verdict` refuses them (exit 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.traffic.loopback_server import LoopbackServer
from tests.verdict.world import kfchaos

pytestmark = pytest.mark.integration

EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {{name: identity, version: 1.0.0, owner: tests}}
spec:
  target: {{namespace: serving, selector: {{labels: {{app: x}}}}, endpoint: "{endpoint}"}}
  traffic: {{file: traffic.jsonl, stages: [50, 100], stage_duration: 2s}}
  slo: {{p99_max: 5s, error_rate_max: 2%, min_samples: 50}}
  baseline: {{file: none.yaml}}
"""


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A run's two stages, and stage 50 replayed again as shards 0/2 and 2/4 (whose ids overlap with it)."""
    folder = tmp_path_factory.mktemp("identity")
    source = folder / "traffic.jsonl"
    rows = [{"id": f"r{i}", "timestamp": 100.0 + i * 0.004, "path": "/"} for i in range(500)]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out: dict[str, Path] = {}
    with LoopbackServer() as server:
        (folder / "identity.yaml").write_text(EXPERIMENT.format(endpoint=server.url))
        out["experiment"] = folder / "identity.yaml"
        for name, args in {
            "50": ["--stage", "50"],
            "100": ["--stage", "100"],
            "50-shard-2of4": ["--stage", "50", "--shard", "2/4"],
        }.items():
            path = folder / "replays" / f"{name}.parquet"
            done = kfchaos("replay", str(source), "--target", server.url, "--out", str(path), "--duration", "2s",
                           "--no-loop", "--quiet", "--json", *args)  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
            out[name] = path
    return out


def _verdict(experiment: Path, records: Path) -> tuple[int, str]:
    done = kfchaos("verdict", "--experiment", str(experiment), "--records", str(records))
    return done.returncode, done.stdout + done.stderr


def _folder(tmp_path: Path, **files: pa.Table | Path) -> Path:
    folder = tmp_path / "records"
    folder.mkdir()
    for name, content in files.items():
        table = pq.read_table(content) if isinstance(content, Path) else content
        pq.write_table(table, folder / f"{name}.parquet")
    return folder


def _shifted(table: pa.Table, seconds: float, stage: int | None = None) -> pa.Table:
    schema = table.schema
    for name in ("intended", "sent", "ended"):
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, pc.add(table.column(name), seconds))
    if stage is not None:
        table = table.set_column(0, "stage", pa.array([stage] * table.num_rows, pa.int16()))
    return table.cast(schema)


def test_a_run_whose_stages_replay_the_same_source_is_not_refused(replays: dict[str, Path], tmp_path: Path) -> None:
    # Every stage replays the same source: the same request ids in stages 50 and 100 are different requests.
    code, text = _verdict(replays["experiment"], _folder(tmp_path, s50=replays["50"], s100=replays["100"]))
    assert code in (0, 1, 2), text


def test_a_stages_rows_appended_again_with_shifted_times_are_refused(replays: dict[str, Path], tmp_path: Path) -> None:
    # A collector that appended stage 50's records twice, the second copy a second later (its clock re-read).
    stage = pq.read_table(replays["50"])
    twice = pa.concat_tables([stage, _shifted(stage, 1.0)])
    code, text = _verdict(replays["experiment"], _folder(tmp_path, s50=twice, s100=replays["100"]))
    # Before: only a repeat at the same intended time was refused; these read as a second set of requests.
    assert code == 3, text
    assert f"trace_id: {stage.num_rows} row(s) repeat a trace id already recorded" in text
    assert f"request_id: {stage.num_rows} row(s) repeat a request id already recorded in the same stage" in text


def test_a_stages_records_copied_under_another_stage_are_refused(replays: dict[str, Path], tmp_path: Path) -> None:
    # Stage 50's file joined again as a stage 100 shard (stage relabelled, a minute later): the ids of two stages
    # may repeat, a trace id may not.
    stage = pq.read_table(replays["50"])
    copy = _shifted(stage, 60.0, stage=100).set_column(1, "shard", pa.array([1] * stage.num_rows, pa.int16()))
    code, text = _verdict(replays["experiment"], _folder(tmp_path, s50=stage, s100=replays["100"], s100b=copy))
    assert code == 3, text
    assert f"trace_id: {stage.num_rows} row(s) repeat a trace id already recorded" in text


def test_overlapping_shard_splits_are_refused(replays: dict[str, Path], tmp_path: Path) -> None:
    # Stage 50 replayed whole (shard 0) and again as shard 2 of 4: those ids went out twice, with new trace ids and
    # their own times. The second replay's requests are not more requests of the stage.
    overlap = pq.read_table(replays["50-shard-2of4"]).num_rows
    assert overlap > 20
    folder = _folder(tmp_path, s50=replays["50"], s50b=replays["50-shard-2of4"], s100=replays["100"])
    code, text = _verdict(replays["experiment"], folder)
    assert code == 3, text
    assert f"request_id: {overlap} row(s) repeat a request id already recorded in the same stage" in text
