"""Bounded everything: what kfchaos reads from files and servers is capped before it costs memory."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kfchaos import parquetguard
from kfchaos.cli import main
from kfchaos.metrics.prometheus import PrometheusClient
from kfchaos.records import RecordsError
from kfchaos.verdict import load_requests
from tests.report.sample import write_sample
from tests.support.hostile import Answer, hostile_server, json_answer

# Ten to the seventh strings once expanded: the old loader's str() of it took ~100 MB (the 5 GB was nine
# levels); the bounded loader stops after MAX_NODES visits.
ALIAS_BOMB = (
    'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n'
    + "".join(f"{b}: &{b} [{', '.join(['*' + a] * 10)}]\n" for a, b in zip("abcdef", "bcdefg", strict=True))
    + "global: {scrape_interval: *g}\nscrape_configs: [{job_name: x, scrape_interval: *g}]\n"
)


def test_a_yaml_alias_bomb_from_prometheus_costs_nothing() -> None:
    def answer(method: str, path: str) -> Answer:
        return json_answer({"status": "success", "data": {"yaml": ALIAS_BOMB}})

    with hostile_server(answer) as server:
        client = PrometheusClient(server.url, retries=0)
        tracemalloc.start()
        try:
            interval = client.scrape_interval()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert server.seen
    assert interval is None
    assert peak < 64 << 20, f"{peak >> 20} MiB to read a {len(ALIAS_BOMB)}-byte configuration"


def test_a_sane_prometheus_configuration_still_reads() -> None:
    config = "global: {scrape_interval: 15s}\nscrape_configs: [{job_name: a, scrape_interval: 30s}, {job_name: b}]\n"

    def answer(method: str, path: str) -> Answer:
        return json_answer({"status": "success", "data": {"yaml": config}})

    with hostile_server(answer) as server:
        assert PrometheusClient(server.url, retries=0).scrape_interval() == 30.0


def _bomb_records(tmp_path: Path) -> Path:
    sample = write_sample(tmp_path / "in")
    path = Path(sample.records)
    table = pq.read_table(path)
    huge = "x" * (10 << 20)  # one 10 MB fault name, repeated in every row through the dictionary
    column = pa.DictionaryArray.from_arrays(pa.array([0] * table.num_rows, pa.int16()), pa.array([huge]))
    index = table.schema.get_field_index("fault_request")
    table = table.set_column(index, pa.field("fault_request", column.type), column)
    out = tmp_path / "bomb.parquet"
    pq.write_table(table, out, compression="zstd")
    return out


def test_a_parquet_dictionary_bomb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    bomb = _bomb_records(tmp_path)
    assert bomb.stat().st_size < 1 << 20  # small on disk
    with pytest.raises(RecordsError, match="expands"):
        load_requests(bomb)
    with pytest.raises(RecordsError, match="expands"):
        parquetguard.check(bomb.parent)  # a folder of records: every file checked


def test_sane_records_pass_the_parquet_check(tmp_path: Path) -> None:
    sample = write_sample(tmp_path / "in")
    parquetguard.check(sample.records)
    assert len(load_requests(sample.records)) > 0


def test_an_oversized_run_state_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = write_sample(tmp_path / "in")
    state = tmp_path / "run.json"
    with state.open("wb") as handle:  # sparse: 64 MiB of nothing, on no disk
        handle.truncate(64 << 20)
    out = tmp_path / "out"
    code = main([*sample.verdict_argv(), "--out", str(out), "--run-state", str(state)])
    assert code == 3
    assert "too large" in capsys.readouterr().err


def test_an_oversized_run_folder_file_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = write_sample(tmp_path / "in")
    out = tmp_path / "run"
    assert main([*sample.verdict_argv(), "--out", str(out)]) == 1
    os.truncate(out / "run.json", 64 << 20)  # the manifest
    capsys.readouterr()
    assert main(["verdict", "--run", str(out)]) == 3
    assert "too large" in capsys.readouterr().err
