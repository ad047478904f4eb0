"""Property: any parameters the experiment format accepts render an object the CRD accepts."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfchaos.faults.render import render_fault, single_unit_duration
from kfchaos.units import parse_duration
from tests.faults.experiments import experiment_with
from tests.support.kubeapi import validate_chaos_object

UNITS = ["ns", "us", "ms", "s", "m", "h"]
durations = st.builds(
    lambda n, frac, unit: f"{n}{'.' + str(frac) if frac is not None else ''}{unit}",
    st.integers(1, 5000),
    st.one_of(st.none(), st.integers(0, 999)),
    st.sampled_from(UNITS),
)
percents = st.decimals(min_value=0, max_value=100, places=5).map(lambda d: f"{d}%")


@st.composite
def network_faults(draw: st.DrawFn) -> dict[str, Any]:
    fault_type = draw(st.sampled_from(["network-delay", "network-loss", "network-duplicate", "network-corrupt"]))
    params: dict[str, Any] = {"correlation": draw(percents)}
    if fault_type == "network-delay":
        params.update(latency=draw(durations), jitter=draw(durations))
    else:
        params[fault_type.removeprefix("network-")] = draw(percents)
    return {"name": "prop", "type": fault_type, "params": params, "duration": draw(durations)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(network_faults())
def test_network_faults_always_valid(fault: dict[str, Any]) -> None:
    if parse_duration(fault["duration"]) > 7200:
        fault["duration"] = "2h"
    experiment = experiment_with(fault)
    assert validate_chaos_object(render_fault(experiment, experiment.spec.faults[0], "prop")) == []


@given(durations)
def test_single_unit_duration_keeps_the_value(text: str) -> None:
    seconds = parse_duration(text)
    rendered = single_unit_duration(seconds)
    # Exact to the nanosecond below a second's resolution, and never two units.
    assert abs(parse_duration(rendered) - seconds) <= max(1e-9, seconds * 1e-6)
    assert re.fullmatch(r"[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)", rendered)  # the CRD's latency pattern
