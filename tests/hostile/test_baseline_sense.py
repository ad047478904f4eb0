"""Garbage never seals a baseline: values from a Prometheus that answers nonsense are refused at capture, and a
sealed file states the bounds it was checked against. The Prometheus client is the real one; the server is a
loopback one answering what a broken or hostile server would."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from kfchaos.baseline import Baseline, BaselineError, load_baseline
from kfchaos.baselinecapture import capture
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.prometheus import PrometheusClient
from tests.support.hostile import Answer, Hostile, hostile_server, json_answer

END = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
STEP = 300.0
SCOPE = Scope("llm", ("vllm-0",))


def _matrix(values: list[tuple[float, str]]) -> Answer:
    result = [{"metric": {}, "values": [[t, v] for t, v in values]}]
    return json_answer({"status": "success", "data": {"resultType": "matrix", "result": result}})


Series = Callable[[float], str]
Make = Callable[[Hostile], Callable[[str, str], Answer]]


def _server(latency: Series, count: Series, errors: Series, when: Callable[[float], float] = lambda t: t) -> Make:
    def make(state: Hostile) -> Callable[[str, str], Answer]:
        def answer(method: str, path: str) -> Answer:
            form = parse_qs(state.bodies[-1].decode()) if state.bodies and state.bodies[-1] else {}
            query = form.get("query", [""])[0]
            if path.startswith("/api/v1/query_range"):
                start, end = float(form["start"][0]), float(form["end"][0])
                times = [start + i * STEP for i in range(int((end - start) // STEP) + 1)][:50]
                if "histogram_quantile" in query:
                    return _matrix([(when(t), latency(t)) for t in times])
                if "error" in query or "5.." in query or "status" in query:
                    return _matrix([(when(t), errors(t)) for t in times])
                if "kube_pod" in query or "container_oom" in query:
                    return _matrix([])
                return _matrix([(when(t), count(t)) for t in times])
            return json_answer({"status": "success", "data": {"resultType": "vector", "result": []}})

        return answer

    return make


def _capture(make: Callable[[Hostile], Callable[[str, str], Answer]], **options: Any) -> Baseline:
    holder: dict[str, Callable[[str, str], Answer]] = {}
    with hostile_server(lambda method, path: holder["answer"](method, path)) as server:
        holder["answer"] = make(server)
        client = PrometheusClient(server.url, retries=0)
        return capture(
            "exp",
            client,
            SCOPE,
            end=END,
            days=1,
            step=STEP,
            now=END,
            short_history="a test server answers one day",
            **options,
        )


def _sane(t: float) -> str:
    return "0.8"


def test_a_sane_answer_seals_and_states_its_bounds(tmp_path: Path) -> None:
    baseline = _capture(_server(_sane, lambda t: "100", lambda t: "1"), request_timeout=30.0)
    assert baseline.sense is not None and baseline.sense.latency_max_s == 30.0
    path = baseline.write(tmp_path / "b.yaml")
    loaded, _ = load_baseline(path, now=END)
    assert loaded.sense == baseline.sense
    assert loaded.series["latency_p99"].median == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("latency", "needle"),
    [("1e300", "request timeout"), ("-0.5", "request timeout"), ("+Inf", "request timeout"), ("45", "request timeout")],
)
def test_latencies_that_are_not_latencies_are_refused(latency: str, needle: str) -> None:
    with pytest.raises(BaselineError, match=needle):
        _capture(_server(lambda t: latency, lambda t: "100", lambda t: "1"), request_timeout=30.0)


def test_a_point_outside_the_capture_window_is_refused() -> None:
    year_2100 = 4102444800.0
    with pytest.raises(BaselineError, match="outside the capture window"):
        _capture(_server(_sane, lambda t: "100", lambda t: "1", when=lambda t: year_2100))


@pytest.mark.parametrize("count", ["-7", "+Inf"])
def test_counts_below_zero_or_infinite_are_refused(count: str) -> None:
    with pytest.raises(BaselineError, match="count below zero"):
        _capture(_server(_sane, lambda t: count, lambda t: "0"))


def test_more_errors_than_requests_is_not_a_rate() -> None:
    with pytest.raises(BaselineError, match="not a rate"):
        _capture(_server(_sane, lambda t: "10", lambda t: "30"))


def test_a_hand_made_file_with_nonsense_latency_is_refused_even_with_a_recomputed_hash(tmp_path: Path) -> None:
    baseline = _capture(_server(_sane, lambda t: "100", lambda t: "1"), request_timeout=30.0)
    data = baseline.model_dump(mode="json")
    data["series"]["latency_p99"].update(median=1e300, p10=1e300, p90=1e300)
    Baseline.model_validate(data).write(tmp_path / "forged.yaml")  # sealed: the hash is recomputed
    with pytest.raises(BaselineError, match="not a latency"):
        load_baseline(tmp_path / "forged.yaml", now=END)
    data["sense"] = None  # without the stated bounds, still no negative or disordered figure
    data["series"]["latency_p99"].update(median=-1.0, p10=-2.0, p90=-0.5)
    Baseline.model_validate(data).write(tmp_path / "forged.yaml")
    with pytest.raises(BaselineError, match="not a latency"):
        load_baseline(tmp_path / "forged.yaml", now=END)
    assert math.isfinite(baseline.series["latency_p99"].median)
