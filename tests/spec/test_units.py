import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfchaos.units import format_duration, parse_duration, parse_percent


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("20m", 1200),
        ("200ms", 0.2),
        ("1h30m", 5400),
        ("1.5s", 1.5),
        ("90s", 90),
        ("250us", 0.00025),
        (".5s", 0.5),
    ],
)
def test_durations_as_people_write_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["20", 20, 1.5, "", "m", "-5m", "5 m", "5min", "1h30", "ms200", True, None, [], "1e3s"])
def test_ambiguous_or_malformed_durations_name_the_accepted_forms(bad: object) -> None:
    with pytest.raises(ValueError, match=r"ms, s, m, h|out of range|duration"):
        parse_duration(bad)


def test_unitless_duration_says_ambiguous() -> None:
    with pytest.raises(ValueError, match="ambiguous"):
        parse_duration(200)


@given(st.integers(min_value=0, max_value=10**7))
def test_format_duration_round_trips_milliseconds(ms: int) -> None:
    assert parse_duration(format_duration(ms / 1000)) == pytest.approx(ms / 1000)


@pytest.mark.parametrize("text,fraction", [("15%", 0.15), ("0.001%", 0.00001), ("100%", 1.0), (" 0.5 % ", 0.005)])
def test_percentages(text: str, fraction: float) -> None:
    assert parse_percent(text) == pytest.approx(fraction)


@pytest.mark.parametrize("bad", ["15", 0.15, "101%", "-1%", "x%", "%", "nan%", "inf%"])
def test_bad_percentages(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_percent(bad)
