"""The experiment format: shipped examples, error lines a person can act on, schema kept current."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from kfchaos.cli.cmd_schema import schema_text
from kfchaos.errors import SpecError
from kfchaos.spec import DEFAULT_STAGES
from kfchaos.validate import load_experiment, parse_experiment
from tests.conftest import EXPERIMENTS

EXAMPLES = sorted(EXPERIMENTS.glob("*.yaml"))
BASE = (EXPERIMENTS / "vllm-network-delay.yaml").read_text()


def kfchaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kfchaos", *args], capture_output=True, text=True, check=False)


def test_at_least_four_examples_a_vllm_team_would_run() -> None:
    types = {f.type for path in EXAMPLES for f in load_experiment(path).spec.faults}  # type: ignore[attr-defined]
    assert {"network-delay", "pod-kill", "stress-memory", "long-context-burst"} <= types


def test_validate_accepts_every_shipped_example() -> None:
    result = kfchaos("validate", *map(str, EXAMPLES))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok (") == len(EXAMPLES)


def test_defaults_match_the_documented_ones() -> None:
    experiment = load_experiment(EXPERIMENTS / "vllm-replica-kill.yaml")
    traffic, slo = experiment.spec.traffic, experiment.spec.slo
    assert tuple(traffic.stages) == DEFAULT_STAGES == (10, 30, 60, 90, 100)
    assert traffic.stage_duration == 1200
    assert slo.error_rate_max == pytest.approx(0.005)
    assert slo.oom_kill_rate_max == pytest.approx(0.00001)
    assert "kube-system" in experiment.spec.safety.protected_namespaces


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_four_mistakes_give_four_lines_with_the_right_line_numbers(tmp_path: Path) -> None:
    broken = (
        BASE.replace("stage_duration: 20m", "stage_duraton: 20m")
        .replace("latency: 200ms", "latency: 200")
        .replace("namespace: llm-serving", "namespace: kube-system")
        .replace("        app.kubernetes.io/name: vllm", "        {}")
    )
    path = tmp_path / "broken.yaml"
    path.write_text(broken)
    result = kfchaos("validate", str(path))
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 4, result.stderr
    expected = {
        "spec.traffic.stage_duraton": (_line_of(broken, "stage_duraton"), "unknown field"),
        "spec.faults[0].params.latency": (_line_of(broken, "latency: 200"), "ambiguous"),
        "spec.target.namespace": (_line_of(broken, "namespace: kube-system"), "protected"),
        "spec.target.selector": (_line_of(broken, "selector:"), "empty selector"),
    }
    for line in lines:
        file, number, field, message = line.split(":", 3)
        assert file == str(path)
        want_line, want_text = expected.pop(field.strip())
        assert int(number) == want_line, line
        assert want_text in message
    assert not expected


@pytest.mark.parametrize(
    ("replace", "by", "field", "text"),
    [
        ("type: network-delay", "type: network-dealy", "spec.faults[0]", "unknown fault type"),
        (
            "max_fault_duration: 2h",
            'max_fault_duration: 2h\n  schedule:\n    cron: "0 0 2 * * *"',
            "spec.schedule",
            "manifests/schedules.yaml",
        ),
        ("stages: [10, 30, 60, 90, 100]", "stages: [10, 60, 30]", "spec.traffic.stages", "increasing"),
        ("max_pod_percent: 100%", "max_pod_percent: 50%", "spec.faults[0]", "max_pod_percent"),
        ("max_fault_duration: 2h", "max_fault_duration: 10m\n    x: 1", "spec.safety.x", "unknown field"),
        ("p99_drift_max: 15%", "p99_drift_max: 0.15", "spec.slo.p99_drift_max", "% sign"),
        ("version: 1.2.1", "version: one", "metadata.version", "semantic version"),
        ("api: openai-chat", "api: grpc", "spec.target.api", "Input should be"),
        ("above: 2%", "above: 2s", "spec.abort[0]", "percentage"),
    ],
)
def test_each_mistake_is_named(tmp_path: Path, replace: str, by: str, field: str, text: str) -> None:
    assert replace in BASE
    with pytest.raises(SpecError) as caught:
        parse_experiment(BASE.replace(replace, by), "x.yaml")
    rendered = [str(p) for p in caught.value.problems]
    assert any(f" {field}: " in line and text in line for line in rendered), rendered


def test_fault_duration_beyond_safety_maximum_is_refused() -> None:
    text = BASE.replace("      mode: all\n", "      mode: all\n      duration: 3h\n")
    with pytest.raises(SpecError, match=r"spec.faults\[0\].duration: duration exceeds safety.max_fault_duration"):
        parse_experiment(text, "x.yaml")


def test_fault_in_a_protected_namespace_is_refused() -> None:
    text = BASE.replace("      mode: all\n", "      mode: all\n      namespace: kubeflow\n")
    with pytest.raises(SpecError, match=r"spec.faults\[0\].namespace: namespace 'kubeflow' is protected"):
        parse_experiment(text, "x.yaml")


def test_fault_stage_not_in_the_ramp_is_refused() -> None:
    text = BASE.replace("      mode: all\n", "      mode: all\n      stages: [50]\n")
    with pytest.raises(SpecError, match=r"stages \[50\] are not among traffic.stages"):
        parse_experiment(text, "x.yaml")


def test_duplicate_keys_are_reported_with_both_lines() -> None:
    text = BASE.replace("  owner: llm-serving-oncall\n", "  owner: llm-serving-oncall\n  owner: someone\n")
    with pytest.raises(SpecError, match=r"metadata.owner: duplicate key \(first defined on line 9\)"):
        parse_experiment(text, "x.yaml")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"   \n# only a comment\n", "empty"),
        (b"- 1\n- 2\n", "expected a mapping"),
        (b"just a string", "expected a mapping"),
        (b"a: [1, 2\n", "YAML syntax error"),
        (b"\x00\x01\x02binary", "binary data"),
        (b"\xff\xfe\xfa", "not a UTF-8"),
        (b"a: 1\n---\nb: 2\n", "YAML syntax error"),
        (b"a: &x [*x]\n", "YAML"),
        (b"? [1]\n: 2\n", "plain strings"),
        (b"a: !!python/object:os.system x\n", "YAML"),
    ],
)
def test_junk_input_gets_a_line_not_a_traceback(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "junk.yaml"
    path.write_bytes(content)
    result = kfchaos("validate", str(path))
    assert result.returncode == 3
    assert "Traceback" not in result.stderr
    assert message in result.stderr
    assert result.stderr.startswith(f"{path}:")


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    result = kfchaos("validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 3
    assert "cannot read file" in result.stderr


def test_validate_reports_every_file_not_only_the_first(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("kind: Experiment\n")
    (tmp_path / "b.yaml").write_text("[]\n")
    result = kfchaos("validate", str(tmp_path / "a.yaml"), str(EXAMPLES[0]), str(tmp_path / "b.yaml"))
    assert result.returncode == 3
    assert "a.yaml:1: apiVersion: required field is missing" in result.stderr
    assert "b.yaml:1" in result.stderr
    assert ": ok (" in result.stdout


def test_usage_errors_exit_3() -> None:
    assert kfchaos("no-such-command").returncode == 3
    assert kfchaos("validate").returncode == 3
    assert kfchaos().returncode == 3


def test_shipped_schema_is_current() -> None:
    shipped = (EXPERIMENTS / "schema.json").read_text()
    assert shipped == schema_text(), "experiments/schema.json is stale: run `kfchaos schema > experiments/schema.json`"


def test_schema_accepts_the_examples_and_rejects_a_typo() -> None:
    schema = json.loads(schema_text())
    for path in EXAMPLES:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    data = yaml.safe_load(BASE)
    data["spec"]["traffic"]["stage_duraton"] = "20m"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


def test_schema_command_prints_the_schema() -> None:
    result = kfchaos("schema")
    assert result.returncode == 0
    assert json.loads(result.stdout)["title"] == "kfchaos Experiment"
