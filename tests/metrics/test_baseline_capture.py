"""Baseline capture from two days of history backfilled into a real Prometheus (one server per module)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from kfchaos.baseline import BaselineError, load_baseline, parse_time
from kfchaos.baselinecapture import capture
from kfchaos.errors import SpecError
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.prometheus import PrometheusClient
from tests.metrics.history import NORMAL_ERRORS, NORMAL_P99, PER_MINUTE, history
from tests.support.prometheus import PrometheusServer, backfill

pytestmark = pytest.mark.integration
STEP = 300.0
MARGIN = 900.0
SCOPE = Scope("serving")
SHORT = "two days of synthetic history"


class History:
    def __init__(self, client: PrometheusClient, end: datetime, release: tuple[datetime, datetime]) -> None:
        self.client = client
        self.end = end
        self.release = release


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    end = int(time.time()) // 3600 * 3600 - 3600  # history ends an hour ago, on the hour
    release = (end - 86400, end - 86400 + 3600)
    tmp = tmp_path_factory.mktemp("prom-history")
    backfill(tmp / "data", history(end - 2 * 86400 - 600, end + 60, release))
    with PrometheusServer(tmp / "data") as server:
        as_time = [datetime.fromtimestamp(t, UTC) for t in (end, *release)]
        yield History(PrometheusClient(server.url, timeout=10), as_time[0], (as_time[1], as_time[2]))


def run(prom: History, **kwargs: object) -> object:
    defaults: dict[str, object] = {
        "end": prom.end,
        "days": 2,
        "step": STEP,
        "release_margin": MARGIN,
        "short_history": SHORT,
        "detect_releases": False,
    }
    return capture("vllm-network-delay", prom.client, SCOPE, **(defaults | kwargs))  # type: ignore[arg-type]


def test_explicit_release_window_is_excluded(prom: History) -> None:
    baseline = run(prom, release_windows=[prom.release])
    stat = baseline.series["latency_p99"]  # type: ignore[attr-defined]
    assert stat.median == pytest.approx(NORMAL_P99, rel=1e-6)
    assert stat.p90 == pytest.approx(NORMAL_P99, rel=1e-6)  # no spike interval survived
    assert stat.spread == pytest.approx(0.0, abs=1e-6)
    totals = baseline.totals  # type: ignore[attr-defined]
    assert totals.error_rate == pytest.approx(NORMAL_ERRORS, rel=0.02)
    assert totals.oom_kills == 0
    # 2 days of 5-minute intervals minus the hour and both 15-minute margins (+1 boundary interval each side)
    excluded = (3600 + 2 * MARGIN) / STEP
    assert 576 - excluded - 2 <= stat.intervals <= 576 - excluded + 1
    assert totals.requests == pytest.approx(PER_MINUTE * 60 * (48 - 1.5), rel=0.02)
    (exclusion,) = baseline.provenance.exclusions  # type: ignore[attr-defined]
    assert exclusion.source == "explicit"
    # the P99 1.667 s and the drift limit 1.15 x 1.667 s = 1.92 s lie in the 1..2 s bucket: both flagged,
    # and the bounds are recorded with the query that listed them (the verdict decides from them).
    short, p99_warning, limit_warning = baseline.warnings  # type: ignore[attr-defined]
    assert short.startswith("SHORT BASELINE: 2.00 days of history") and short.endswith(SHORT)
    assert baseline.coverage.override == SHORT and baseline.coverage.requested_days == 2  # type: ignore[attr-defined]
    assert "baseline P99 1.66667s falls inside the bucket 1..2s" in p99_warning
    assert "drift limit" in limit_warning and "bucket 1..2s" in limit_warning
    histogram = baseline.latency_histogram  # type: ignore[attr-defined]
    assert histogram.bounds == [0.5, 1.0, 2.0, 5.0]
    assert baseline.provenance.queries["latency_buckets"] == histogram.query  # type: ignore[attr-defined]
    assert exclusion.start == (prom.release[0] - timedelta(seconds=MARGIN)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_without_exclusion_the_spike_shows(prom: History) -> None:
    baseline = run(prom)
    assert baseline.series["latency_p99"].p90 == pytest.approx(NORMAL_P99, rel=1e-6)  # type: ignore[attr-defined]
    totals = baseline.totals  # type: ignore[attr-defined]
    assert totals.error_rate > 5 * NORMAL_ERRORS
    assert totals.oom_kills == 1


def test_detected_release_is_excluded(prom: History) -> None:
    baseline = run(prom, detect_releases=True, release_margin=2400.0)
    (exclusion,) = baseline.provenance.exclusions  # type: ignore[attr-defined]
    assert exclusion.source == "detected" and "vllm" in exclusion.reason
    assert baseline.totals.oom_kills == 0  # type: ignore[attr-defined]
    assert baseline.totals.error_rate == pytest.approx(NORMAL_ERRORS, rel=0.02)  # type: ignore[attr-defined]
    assert "rollout.observed" in baseline.provenance.queries  # type: ignore[attr-defined]


def test_a_detected_release_is_excluded_whole(prom: History) -> None:
    # The rollout spans the release hour; a margin of 5 minutes leaves none of it in the baseline.
    baseline = run(prom, detect_releases=True, release_margin=300.0)
    (exclusion,) = baseline.provenance.exclusions  # type: ignore[attr-defined]
    assert "rollout of vllm" in exclusion.reason and "complete at" in exclusion.reason
    assert parse_time(exclusion.start) <= prom.release[0] - timedelta(seconds=300)
    assert parse_time(exclusion.end) >= prom.release[1] + timedelta(seconds=300)
    assert baseline.totals.oom_kills == 0  # type: ignore[attr-defined]
    assert baseline.totals.error_rate == pytest.approx(NORMAL_ERRORS, rel=0.02)  # type: ignore[attr-defined]
    assert baseline.series["latency_p99"].p90 == pytest.approx(NORMAL_P99, rel=1e-6)  # type: ignore[attr-defined]


def test_written_baseline_round_trips_and_edits_are_refused(prom: History, tmp_path: Path) -> None:
    baseline = run(prom, release_windows=[prom.release])
    path = baseline.write(tmp_path / "baselines" / "vllm-network-delay.yaml")  # type: ignore[attr-defined]
    loaded, warnings = load_baseline(path, now=prom.end)
    assert loaded == baseline and warnings == []
    assert "histogram_quantile(0.99, sum by (le)" in loaded.provenance.queries["latency_p99"]
    _, stale = load_baseline(path, now=prom.end + timedelta(days=45))
    assert stale and "stale" in stale[0]
    data = yaml.safe_load(path.read_text())
    data["series"]["latency_p99"]["median"] = 9.0
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(BaselineError, match="does not match content_hash"):
        load_baseline(path)
    data["series"]["latency_p99"]["median"] = "fast"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"vllm-network-delay\.yaml:\d+: series\.latency_p99\.median"):
        load_baseline(path)


def test_no_data_in_the_window_refuses_to_capture(prom: History) -> None:
    with pytest.raises(BaselineError, match="no latency data"):
        capture("x", prom.client, Scope("elsewhere"), end=prom.end, days=1, step=STEP, short_history=SHORT)


def test_cli_capture_then_show(prom: History, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kfchaos.cli import main
    from tests.verdict.builders import experiment_text

    experiment = tmp_path / "exp.yaml"
    experiment.write_text(experiment_text())
    out = tmp_path / "b.yaml"
    end = prom.end.strftime("%Y-%m-%dT%H:%M:%SZ")
    argv = ["baseline", "capture", "--experiment", str(experiment), "--prometheus", prom.client.url]
    assert main([*argv, "--days", "2", "--end", end, "--out", str(out)]) == 3  # fewer than 7 days: say why
    assert "at least 7 days" in capsys.readouterr().err
    assert main([*argv, "--days", "2", "--short-history", SHORT, "--end", end, "--out", str(out)]) == 0
    assert "latency P99 median 1.667s" in capsys.readouterr().out
    assert main(["baseline", "show", str(out)]) == 0
    assert "hash ok" in capsys.readouterr().out
    out.write_text(out.read_text().replace("experiment: verdict-test", "experiment: other"))
    assert main(["baseline", "show", str(out)]) == 3
    assert "does not match content_hash" in capsys.readouterr().err
    assert main([*argv, "--end", "yesterday"]) == 3


def test_cli_reads_the_capture_step_from_the_spec(prom: History, tmp_path: Path) -> None:
    from kfchaos.cli import main
    from tests.verdict.builders import experiment_text

    end = prom.end.strftime("%Y-%m-%dT%H:%M:%SZ")
    capture_section = f"{{file: {tmp_path / 'b.yaml'}, capture: {{prometheus: '{prom.client.url}', days: 2, "
    capture_section += f"short_history: {SHORT}, "
    capture_section += f"end: '{end}', step: 10m}}}}"
    text = experiment_text().replace("{file: baselines/verdict-test.yaml}", capture_section)
    experiment_file = tmp_path / "verdict-test.yaml"
    experiment_file.write_text(text)
    assert main(["baseline", "capture", "--experiment", str(experiment_file)]) == 0
    baseline, _ = load_baseline(tmp_path / "b.yaml")
    assert baseline.provenance.step == 600.0  # spec.baseline.capture.step, not the command's 300 s
    assert baseline.series["latency_p99"].intervals <= 2 * 24 * 6 + 1


def test_cli_writes_the_baseline_where_the_experiment_names_it_relative_to_its_file(
    prom: History, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One rule for paths in an experiment: baseline.file is relative to the experiment file, not to the current
    directory (the old code wrote it relative to wherever the command ran, outside the repository)."""
    from kfchaos.cli import main
    from tests.verdict.builders import experiment_text

    folder = tmp_path / "repo" / "experiments"
    folder.mkdir(parents=True)
    experiment_file = folder / "verdict-test.yaml"
    end = prom.end.strftime("%Y-%m-%dT%H:%M:%SZ")
    capture_section = (
        f"{{file: ../baselines/b.yaml, capture: {{prometheus: '{prom.client.url}', days: 2, end: '{end}', "
        "short_history: a two-day test history}}"
    )
    experiment_file.write_text(experiment_text().replace("{file: baselines/verdict-test.yaml}", capture_section))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["baseline", "capture", "--experiment", str(experiment_file)]) == 0
    assert (tmp_path / "repo" / "baselines" / "b.yaml").is_file()
    assert not (elsewhere / "baselines").exists()
    assert "writing outside the current directory" in capsys.readouterr().err
