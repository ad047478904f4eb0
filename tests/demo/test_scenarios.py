"""`kfchaos demo --scenario NAME` / `--list`: experiment files under demo/experiments/ named by their expected
verdict (`# demo-expect: PASS|FAIL`), each run against the tuned demo server like the default demo."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kfchaos.demo.runner.scenarios import (
    EXPERIMENTS_DIR,
    SCENARIOS,
    file_scenario,
    main,
    read_cause,
    read_expectation,
    resolve,
    scenario_lines,
)
from kfchaos.errors import KfchaosError
from tests.kfp_glue.conftest import copy_sources

# A scenario of this test's own (not shipped): its p99_max of 1 ms cannot hold, so the verdict is FAIL while the
# file says it expects PASS -- the demo must read the expectation from the file and say why it was not met.
SMALL = """\
# A test scenario: a 20 ms delay against the tuned server, judged against an impossible 1 ms P99.
# demo-expect: EXPECT
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata:
  name: tiny-delay
  version: 1.0.0
  owner: test
  description: a 1 ms P99 no server meets
spec:
  target:
    namespace: demo
    selector:
      labels: {app: demo-llm}
    endpoint: http://127.0.0.1:9
    api: openai-completions
    model: demo/llama-3-8b-sim
    timeout: 10s
  traffic:
    synthetic: {rate: 40, prompt_tokens: {distribution: fixed, mean: 32}, output_tokens: {distribution: fixed, mean: 2}}
    stages: [50]
    stage_duration: 3s
    warmup: 1s
    seed: 1
  faults:
    - name: delay
      type: network-delay
      mode: all
      params: {latency: 20ms}
  slo:
    p99_max: 1ms
    min_samples: 20
  baseline:
    file: baselines/none.yaml
  safety:
    max_pod_percent: 100%
    max_fault_duration: 10m
"""


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(text)
    return path


def test_the_expected_verdict_comes_from_the_files_comment_line(tmp_path: Path) -> None:
    assert read_expectation(_write(tmp_path, "a", SMALL.replace("EXPECT", "FAIL"))) == "FAIL"
    scenario = file_scenario("a", tmp_path)
    assert (scenario.expect, scenario.experiment.name) == ("FAIL", "a.yaml")
    assert scenario.settings == SCENARIOS["tuned"][1]  # a file scenario runs against the tuned server


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SMALL.replace("# demo-expect: EXPECT\n", ""), "b.yaml: no `# demo-expect: PASS|FAIL` line"),
        (SMALL.replace("EXPECT", "MAYBE"), "b.yaml:2: demo-expect: 'MAYBE' is not one of PASS, FAIL"),
        (
            SMALL.replace("EXPECT", "PASS") + "# demo-expect: FAIL\n",
            f"b.yaml:{SMALL.count(chr(10)) + 1}: demo-expect: given twice (first on line 2)",
        ),
    ],
)
def test_a_missing_odd_or_doubled_expectation_names_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(KfchaosError, match=re.escape(message)):
        read_expectation(_write(tmp_path, "b", text))


@pytest.mark.parametrize("name", ["nope", "../experiments/demo-llm-chaos", "/etc/passwd", "A"])
def test_an_unknown_scenario_is_refused_with_the_choices(tmp_path: Path, name: str) -> None:
    _write(tmp_path, "a", SMALL.replace("EXPECT", "PASS"))
    with pytest.raises(KfchaosError, match=r"unknown demo scenario .*choose from unsafe, tuned, a "):
        resolve(name, tmp_path)


def test_the_default_pair_keeps_its_own_settings_and_expectations() -> None:
    unsafe, tuned = resolve("unsafe"), resolve("tuned")
    assert (unsafe.expect, tuned.expect) == ("FAIL", "PASS")
    assert unsafe.settings.max_num_seqs == 256 and tuned.settings.enable_prefix_caching


def test_list_gives_one_line_per_scenario_and_marks_a_broken_file(tmp_path: Path) -> None:
    _write(tmp_path, "good", SMALL.replace("EXPECT", "PASS"))
    _write(tmp_path, "broken", SMALL.replace("# demo-expect: EXPECT\n", ""))
    lines = scenario_lines(tmp_path)
    assert [line.split()[0] for line in lines] == ["unsafe", "tuned", "broken", "good"]
    assert lines[3].split()[1] == "PASS" and "a 1 ms P99 no server meets" in lines[3]
    assert "not runnable" in lines[2] and "demo-expect" in lines[2]


def test_every_shipped_experiment_file_names_its_expected_verdict() -> None:
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        assert read_expectation(path) in ("PASS", "FAIL"), path


def test_the_cli_lists_the_shipped_scenarios() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kfchaos", "demo", "--list"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines()]
    assert names[:2] == ["unsafe", "tuned"] and "demo-llm-chaos" in names


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="the demo needs Prometheus (`make prometheus`)")
def test_a_scenario_that_does_not_give_its_expected_verdict_says_so_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenarios = tmp_path / "scenarios"
    _write(scenarios, "tiny-delay", SMALL.replace("EXPECT", "PASS"))
    root = copy_sources(tmp_path / "repo")
    code = main(["tiny-delay"], root, tmp_path / "runs", baseline_seconds=2.0, directory=scenarios)
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "kfchaos demo: tiny-delay: expected PASS, got FAIL because FAIL stage 50%: p99" in err
    folders = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("tiny-delay-")]
    assert len(folders) == 1 and (folders[0] / "verdict.json").is_file()  # the same run folder as the demo's
    assert "tuned" not in out.split("tiny-delay", 1)[0]  # only the named scenario ran


def test_a_designed_cause_must_be_a_known_failure_mode_and_given_once(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("# demo-expect: FAIL\n# demo-cause: tokenizer-stall\nkind: Experiment\n")
    assert read_cause(path) == "tokenizer-stall"
    path.write_text("# demo-expect: FAIL\n# demo-cause: gremlins\n")
    with pytest.raises(KfchaosError, match=r"x.yaml:2: demo-cause: 'gremlins' is not a known failure mode id"):
        read_cause(path)
    path.write_text("# demo-cause: tokenizer-stall\n# demo-cause: tokenizer-stall\n")
    with pytest.raises(KfchaosError, match=r"x.yaml:2: demo-cause: given twice"):
        read_cause(path)
    path.write_text("# demo-expect: PASS\n")
    assert read_cause(path) is None
