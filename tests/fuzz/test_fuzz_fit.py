"""Fuzz the workload fitter (`kfchaos traffic fit`, `synthetic.fit_from`): whatever a recording holds, the fit
either comes out with finite, in-range figures or is an input error naming the file, within the harness's time
and memory bound, never quoting a value."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kfchaos.bounds import MAX_TOKENS
from kfchaos.errors import KfchaosError
from kfchaos.spec import Synthetic
from kfchaos.traffic.fit import Fit, apply_fit, fit_file
from tests.fuzz.harness import bounded
from tests.fuzz.test_fuzz_traffic import PLANTED, _atoms, _json, fuzz

_message = st.fixed_dictionaries(
    {
        "role": st.one_of(st.sampled_from(["system", "user", "user", "assistant", "developer"]), _json),
        "content": st.one_of(st.text(max_size=40), st.text(max_size=40), _json, st.just(PLANTED)),
    },
)
_caps = {"max_tokens": _atoms, "max_completion_tokens": _atoms}
_chat = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(_message, min_size=1, max_size=5), _json)}, optional=_caps
)
_completion = st.fixed_dictionaries({"prompt": st.one_of(st.text(max_size=40), _json)}, optional=_caps)
_body = st.one_of(_chat, _chat, _completion, _json)
_usage = st.one_of(_json, st.fixed_dictionaries({}, optional={"prompt_tokens": _atoms, "completion_tokens": _atoms}))
_hostile = st.fixed_dictionaries(
    {"timestamp": _atoms, "body": st.one_of(_body, _body.map(lambda b: json.dumps(b, allow_nan=True)))},
    optional={"usage": _usage},
)
# Plausible records (a valid time, a chat of user turns) whose lengths and usage are hostile: what must be fitted
# or refused field by field.
_turn = st.fixed_dictionaries({"role": st.just("user"), "content": st.one_of(st.text(max_size=40), st.just(PLANTED))})
_plausible = st.fixed_dictionaries(
    {
        "timestamp": st.floats(0, 2e9),
        "body": st.fixed_dictionaries({"messages": st.lists(_turn, min_size=1, max_size=3)}, optional=_caps),
    },
    optional={"usage": _usage},
)
_lines = st.lists(
    st.one_of(_plausible, _hostile).map(lambda r: json.dumps(r, allow_nan=True).encode()) | st.binary(max_size=100),
    max_size=10,
)


def _finite(fit: Fit) -> None:
    for series in (fit.questions, fit.outputs, fit.turns, fit.system):
        if series is None:
            continue
        values = [series.mean, series.stddev, series.mu, series.sigma, series.ks, *series.quantiles]
        assert all(math.isfinite(v) for v in values)
        assert 0 <= series.min <= series.max <= MAX_TOKENS
    assert fit.rate is None or (math.isfinite(fit.rate) and fit.rate > 0)


def _fit(path: Path) -> tuple[str, Any]:
    try:
        fit = fit_file(path)
    except KfchaosError as exc:
        return "error", str(exc)
    _finite(fit)
    try:  # what a plan does with it: filled settings valid as an experiment's, or an input error
        apply_fit(Synthetic(fit_from=str(path), rate=1.0), fit)
    except KfchaosError as exc:
        return "error", str(exc)
    return "fit", "\n".join(fit.describe()) + json.dumps(fit.to_dict())


@fuzz(60)
@given(lines=_lines)
def test_the_fitter_fits_or_names_the_file(tmp_path: Path, lines: list[bytes]) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    outcome = bounded(lambda: _fit(path))
    assert outcome.broke is None and outcome.error is None, (outcome.broke, outcome.error)
    kind, text = outcome.value
    assert PLANTED not in text
    if kind == "error":
        assert str(path) in text
