"""kfchaos.faultspec.goparse against the Go code it ports: time.ParseDuration, strconv.ParseFloat and
github.com/docker/go-units v0.5.0 FromHumanSize, built from the module proxy (tests/contract/goparse, go.mod
and go.sum only besides the small main.go that calls them). Needs the Go toolchain: skipped without it,
a failure under CI=true."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from kfchaos.faultspec import goparse

HERE = Path(__file__).parent / "goparse"

CORPUS = [
    # sizes
    "512Mi", "512MB", "512M", "512m", "512mb", "512MiB", "512mib", "1GiB", "1GB", "1gb", "1G", "1Gi", "1g",
    "256", "256B", "256b", "256bb", "1KiBs", "1.5GB", "1.5.5GB", "1e3MB", "0x1p4MB", "0x10", "5 kb", "5  kb",
    " 5", "5 ", "-5MB", "+5MB", "0", "0B", "1PB", "1PiB", "1EB", "1TB", "1tib", "80%", "", "MB", ".5GB", "5.GB",
    "1_000MB", "1__0MB", "1e400MB", "1e308GB", "Inf", "nan", "1kib", "1kB", "1Kb", "2K", "10 b",
    # durations
    "1s", "90s", "1m30s", "1h", "1h 2m", "1.5h", ".5s", "5.s", ".s", "-1s", "+1s", "-0", "0", "00", "0s",
    "1us", "1µs", "1μs", "1ns", "1ms", "1d", "1S", "10000000000h", "9223372036854775807ns",
    "9223372036854775808ns", "2562047h", "2562048h", "1.000000000000000000001s", "3000000000000000000000ns",
    # floats
    "1_000", "1_0.5", "_1", "1_", "0x_1p0", "0x1p-2", "0x1.8p1", "1e", "1e+", "00012", "0_1", "Infinity",
    "-inf", "NaN", "1e39", "3.4e38", "3.5e38", "1e-400", "25", "0.5", "12.5", "1,5", "٣", "1\n", "1s\n", "1MB\n",
]  # fmt: skip


def _go_binary(tmp: Path) -> Path | None:
    go = shutil.which("go")
    if go is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the Go toolchain is required under CI=true (tests/contract/goparse)")
        return None
    out = tmp / "goparse"
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    done = subprocess.run(
        [go, "build", "-o", str(out), "."], cwd=HERE, env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        message = f"cannot build tests/contract/goparse: {done.stderr[-2000:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return out


@pytest.fixture(scope="module")
def go_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, object]]]:
    binary = _go_binary(tmp_path_factory.mktemp("go"))
    if binary is None:
        pytest.skip("no Go toolchain")
    stdin = "".join(json.dumps(s) + "\n" for s in CORPUS)
    done = subprocess.run([str(binary)], input=stdin, capture_output=True, text=True, timeout=60, check=True)
    return dict(zip(CORPUS, (json.loads(line) for line in done.stdout.splitlines()), strict=True))


def _ours(parse: Callable[[str], object], text: str) -> tuple[bool, object]:
    try:
        return True, parse(text)
    except ValueError as exc:
        return False, str(exc)


def _same(field: str, go: str, ours: object) -> bool:
    if field in ("duration", "size"):
        return go == str(ours)
    return go in ("NaN", "+Inf", "-Inf") or float(go) == float(ours)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "field,parse",
    [
        ("duration", goparse.parse_duration_ns),
        ("size", goparse.from_human_size),
        ("float64", goparse.parse_float),
        ("float32", lambda s: goparse.parse_float(s, 32)),
    ],
)
def test_ports_agree_with_go(
    go_answers: dict[str, dict[str, dict[str, object]]], field: str, parse: Callable[[str], object]
) -> None:
    disagreements = []
    for text in CORPUS:
        go = go_answers[text][field]
        ok, value = _ours(parse, text)
        if ok != go["ok"] or (ok and not _same(field, str(go["value"]), value)):
            disagreements.append(f"{text!r}: go {go}, kfchaos {value!r}")
    assert not disagreements, "\n".join(disagreements)
