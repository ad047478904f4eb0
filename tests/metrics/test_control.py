"""The control baseline: a fault-free replay at the experiment's stage rates by kfchaos's own client, against
a real HTTP server on loopback, measured exactly from its records and stored beside the production figures."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from kfchaos.baseline import load_baseline
from kfchaos.cli import main
from kfchaos.control import measure_stage, record_control
from kfchaos.verdict.requests import load_requests
from kfchaos.verdict.stats import quantile_ranks
from tests.traffic.loopback_server import LoopbackServer
from tests.verdict.builders import experiment, experiment_text, records
from tests.verdict.fixtures import baseline

pytestmark = pytest.mark.integration


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as running:
        yield running


def test_quantiles_are_exact_order_statistics() -> None:
    latency = np.arange(1, 1001, dtype=float) / 1000.0  # 1 ms .. 1 s, one each
    requests = load_requests(records(100, latency))
    stage = measure_stage(requests, 100, 100.0, 0.95)
    assert stage.samples == 1000 and stage.sent == 1000 and stage.errors == 0
    assert stage.latency_p99 == 0.99  # the 990th of 1000: inverted CDF
    assert stage.latency_p50 == 0.5
    low, high = quantile_ranks(1000, 0.99, 0.95)  # type: ignore[misc]
    assert stage.latency_p99_interval == [low / 1000.0, high / 1000.0]


def test_timeouts_count_beyond_every_latency() -> None:
    latency = np.full(400, 0.1)
    errors: list[str | None] = [None] * 395 + ["timeout"] * 5
    stage = measure_stage(load_requests(records(100, latency, error=errors)), 100, 100.0, 0.95)
    assert stage.timeouts == 5 and stage.samples == 400
    assert stage.latency_p99 is None  # the P99 is a timeout: no finite figure
    assert stage.latency_p99_interval is None


def test_too_few_samples_have_no_interval() -> None:
    stage = measure_stage(load_requests(records(10, np.full(100, 0.1))), 10, 10.0, 0.95)
    assert stage.latency_p99 == pytest.approx(0.1) and stage.latency_p99_interval is None


def test_control_replays_each_stage_rate_and_hashes_its_records(server: LoopbackServer, tmp_path: Path) -> None:
    spec = experiment(stages=(10, 100), rate=100)
    out = tmp_path / "verdict-test.control.parquet"
    control = record_control(spec, server.url, out, base_dir=tmp_path, duration=2.0)
    assert [s.stage for s in control.stages] == [10, 100]
    low, full = control.stages
    assert 0 < low.sent < full.sent  # 10 % and 100 % of 100 requests/s for 2 s
    assert full.rate == pytest.approx(100.0, rel=0.2)
    assert full.latency_p99 is not None and full.latency_p99 > 0
    assert control.records_sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    table = pq.read_table(out)
    assert not any(table.column("fault_active").to_pylist())
    assert sorted(set(table.column("stage").to_pylist())) == [10, 100]


def test_cli_adds_the_control_beside_the_production_figures(server: LoopbackServer, tmp_path: Path) -> None:
    experiment_file = tmp_path / "verdict-test.yaml"
    experiment_file.write_text(experiment_text(stages=(100,)))
    path = baseline().write(tmp_path / "verdict-test.yaml.baseline.yaml")
    before, _ = load_baseline(path)
    argv = ["baseline", "control", "--experiment", str(experiment_file), "--target", server.url]
    assert main([*argv, "--duration", "3s", "--baseline", str(path)]) == 0
    after, _ = load_baseline(path)  # sealed again: the hash covers the control
    assert after.control is not None and after.series == before.series and after.totals == before.totals
    (stage,) = after.control.stages
    assert stage.stage == 100 and stage.samples >= 250
    records_file = path.with_name(after.control.records)
    assert records_file.is_file()
    assert after.control.records_sha256 == hashlib.sha256(records_file.read_bytes()).hexdigest()


def test_cli_needs_the_production_baseline_first(
    server: LoopbackServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment_file = tmp_path / "verdict-test.yaml"
    experiment_file.write_text(experiment_text(stages=(100,)))
    argv = ["baseline", "control", "--experiment", str(experiment_file), "--baseline", str(tmp_path / "none.yaml")]
    assert main(argv) == 3  # an input error, said as such
    assert "capture the production figures first" in capsys.readouterr().err
    assert not server.seen  # nothing replayed


def test_a_malformed_control_is_refused_naming_the_field(tmp_path: Path) -> None:
    import yaml

    from kfchaos.errors import SpecError
    from tests.verdict.test_drift_reference import control

    path = baseline(control=control()).write(tmp_path / "b.yaml")
    data = yaml.safe_load(path.read_text())
    data["control"]["stages"][0]["latency_p99_interval"] = [0.3, 0.2]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SpecError, match=r"b\.yaml:\d+: control\.stages\[0\]: latency_p99_interval"):
        load_baseline(path)


def test_cli_warns_before_and_after_when_a_stage_is_too_small_for_a_p99_interval(
    server: LoopbackServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """280 samples a stage were stored silently before; fewer than a P99 interval needs (299 at 95 %) make that
    stage's p99_drift INCONCLUSIVE, so the command says so, before replaying and after."""
    experiment_file = tmp_path / "verdict-test.yaml"
    experiment_file.write_text(experiment_text(stages=(100,), rate=100.0))
    path = baseline().write(tmp_path / "verdict-test.yaml.baseline.yaml")
    argv = ["baseline", "control", "--experiment", str(experiment_file), "--target", server.url]
    assert main([*argv, "--duration", "1s", "--baseline", str(path)]) == 0  # 100 requests/s for 1 s
    err = capsys.readouterr().err
    assert "warning: control stage 100%: " in err and "requests planned in 1s, too few for a P99 interval" in err
    assert "latencies are too few for a P99 interval at 95% confidence" in err
    assert main([*argv, "--duration", "4s", "--baseline", str(path)]) == 0
    assert "too few" not in capsys.readouterr().err
