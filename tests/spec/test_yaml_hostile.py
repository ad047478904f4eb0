"""Hostile YAML (issue 13): each file ends in a SpecError naming the file, within a time and memory bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfchaos.errors import SpecError
from kfchaos.validate import load_experiment, parse_experiment
from kfchaos.yamlsource import MAX_BYTES, load_yaml
from tests.fuzz.harness import bounded


def alias_bomb(levels: int, fanout: int = 8) -> str:
    """`b: &b {k: *a, k: *a, ...}` nested: duplicate keys kept the old node guard's count flat."""
    lines = ["a: &a [x, y]"]
    previous = "a"
    for level in range(levels):
        name = f"b{level}"
        lines.append(f"{name}: &{name} {{{', '.join(f'k: *{previous}' for _ in range(fanout))}}}")
        previous = name
    return "\n".join(lines) + "\n"


def _problems(text: str | bytes) -> list[str]:
    try:
        parse_experiment(text, "hostile.yaml")
    except SpecError as exc:
        return [str(p) for p in exc.problems]
    return []


def test_alias_bomb_with_duplicate_keys_is_refused_within_bounds() -> None:
    text = alias_bomb(12)
    assert len(text) < 1000
    outcome = bounded(lambda: _problems(text), time_s=60)
    assert outcome.broke is None and outcome.error is None, outcome
    assert any("too large" in p and "aliases expanded" in p for p in outcome.value), outcome.value


def test_alias_bomb_reported_problems_are_bounded() -> None:
    outcome = bounded(lambda: _problems(alias_bomb(4)), time_s=60)
    assert outcome.broke is None and outcome.error is None, outcome
    assert 0 < len(outcome.value) <= 100


@pytest.mark.parametrize("digits", [41, 400, 5000])
def test_huge_integer_is_an_input_error_naming_the_line(digits: int) -> None:
    with pytest.raises(SpecError) as caught:
        load_yaml(f"apiVersion: x\nspec:\n  n: {'9' * digits}\n", "big.yaml")
    assert str(caught.value) == f"big.yaml:3: spec.n: integer too long ({digits} characters)"


def test_bad_timestamp_is_an_input_error() -> None:
    with pytest.raises(SpecError, match=r"^t\.yaml:1: .*month must be in 1\.\.12"):
        load_yaml("when: 2020-13-45\n", "t.yaml")


def test_file_over_the_size_cap_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("x: [" + "1, " * (MAX_BYTES // 3 + 10) + "1]\n")
    with pytest.raises(SpecError, match=rf"huge\.yaml:1: \(document\): file too large \(over {MAX_BYTES} bytes\)"):
        load_experiment(path)
    with pytest.raises(SpecError, match="file too large"):
        load_yaml(path.read_bytes(), str(path))


def test_control_character_still_names_its_line() -> None:
    with pytest.raises(SpecError, match=r"^c\.yaml:2: .*#x0001"):
        load_yaml("a: 1\nb: \x01\n", "c.yaml")
