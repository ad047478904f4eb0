"""Fuzz the YAML readers through the real commands: experiments (`validate`, `render`), baselines
(`baseline show`) and schedules. Inputs: valid files mutated byte-wise, and YAML built from hostile pieces
(aliases with duplicate keys, deep nesting, huge integers, odd scalars, control characters). Each case must end
in exit 0 or 3 (an input error naming the file), within the harness' time and memory bounds."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import EXPERIMENTS, ROOT
from tests.fuzz.harness import assert_contract, bounded, budget, run_cli, warm

SEEDS = [p.read_bytes() for p in sorted(EXPERIMENTS.glob("*.yaml"))]
BASELINES = [p.read_bytes() for p in sorted((ROOT / "baselines").glob("*.yaml"))]

HOSTILE_PIECES = [
    b"&a [x, y]", b"*a", b"{k: *a, k: *a, k: *a, k: *a}", b"9" * 5000, b"0x" + b"f" * 400, b"1e999", b".nan",
    b"-.inf", b"2020-13-45", b"!!python/object:os.system", b"!!binary AAAA", b"<<: *a", b"[" * 200, b"{" * 200,
    b"\x00", b"\x01", b"\xff\xfe", b"\t", b"'", b'"', b"? ", b"- ", b": ", b"---\n", b"...\n", b"\n", b"  ",
    b"%YAML 1.1\n", b"%TAG ! tag:x:\n", b"\xef\xbb\xbf", b"~", b"null", b"true", b"on", b"0o777", b"_1_000",
]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 6))):
        where = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["insert", "delete", "replace", "piece"]))
        if action == "piece":
            data[where:where] = draw(st.sampled_from(HOSTILE_PIECES))
        elif action == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del data[where : where + draw(st.integers(1, 40))]
        else:
            data[where : where + 1] = draw(st.binary(min_size=1, max_size=1))
    return bytes(data)


def alias_bomb(levels: int, fanout: int) -> bytes:
    lines = ["a: &a [x, y]"]
    for level in range(levels):
        previous = "a" if level == 0 else f"b{level - 1}"
        lines.append(f"b{level}: &b{level} {{{', '.join(f'k: *{previous}' for _ in range(fanout))}}}")
    return ("\n".join(lines) + "\n").encode()


built = st.one_of(
    st.builds(alias_bomb, st.integers(1, 16), st.integers(2, 12)),
    st.lists(st.sampled_from(HOSTILE_PIECES), min_size=1, max_size=20).map(b"".join),
    st.integers(1, 3000).map(lambda depth: b"a: " + b"[" * depth + b"]" * depth),
    st.integers(1, 2000).map(lambda depth: b"".join(b"  " * i + b"k:\n" for i in range(depth))),
)


def _check(tmp_path: Path, argv: list[str], data: bytes, name: str = "fuzz.yaml") -> None:
    path = tmp_path / name
    path.write_bytes(data)
    result = run_cli([arg.replace("FILE", str(path)) for arg in argv])
    assert_contract(result, allowed=(0, 3))
    if result.code == 3:
        assert str(path) in result.stderr, result.stderr


@settings(max_examples=budget(20))
@given(data=st.one_of(mutated(SEEDS), built))
def test_validate(tmp_path_factory: object, data: bytes) -> None:
    _check(_tmp(tmp_path_factory), ["validate", "FILE"], data)


@settings(max_examples=budget(8))
@given(data=st.one_of(mutated(SEEDS), built))
def test_render(tmp_path_factory: object, data: bytes) -> None:
    _check(_tmp(tmp_path_factory), ["render", "FILE"], data)


@settings(max_examples=budget(15))
@given(data=st.one_of(mutated(BASELINES), built))
def test_baseline_show(tmp_path_factory: object, data: bytes) -> None:
    _check(_tmp(tmp_path_factory), ["baseline", "show", "FILE", "--json"], data)


@settings(max_examples=budget(10))
@given(data=st.one_of(mutated([b"schedules:\n  - name: nightly\n    experiment: experiments/x.yaml\n"]), built))
def test_schedules_file(tmp_path_factory: object, data: bytes) -> None:
    from kfchaos.errors import KfchaosError
    from kfchaos.kfp.schedules import load_schedules

    warm()
    path = _tmp(tmp_path_factory) / "schedules.yaml"
    path.write_bytes(data)

    def load() -> str:
        try:
            load_schedules(path)
        except KfchaosError as exc:
            return f"input error: {exc}"
        return "ok"

    outcome = bounded(load)
    assert outcome.broke is None and outcome.error is None, outcome


def _tmp(factory: object) -> Path:
    path: Path = factory.mktemp("fuzz")  # type: ignore[attr-defined]
    return path
