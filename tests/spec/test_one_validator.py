"""validate, render and compile share one validator: what `render` refuses, `validate` refuses first, with the
same FILE:LINE; the schema's defaults obey the schema; accepted-but-changed settings are warned about."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kfchaos.errors import SpecError
from kfchaos.spec import json_schema
from kfchaos.validate import load_experiment, load_experiment_warnings
from tests.conftest import EXPERIMENTS

BASE = (EXPERIMENTS / "vllm-network-delay.yaml").read_text()
DELAY = """    - name: serving-delay
      type: network-delay
      mode: all
      params:
        latency: 200ms
        jitter: 20ms
        correlation: 25%"""
SAFETY = "  safety:\n    max_pod_percent: 100%\n    max_fault_duration: 2h\n"
PARTITION = """    - name: cut-dns
      type: network-partition
      params:
        direction: to
        target:
          namespace: kube-system
          labels: {k8s-app: kube-dns}"""

REFUSED = {
    # mode all with no safety block: the default cap is 50 %, so `all` (100 %) is over it.
    "mode-all-over-default-cap": (BASE.replace(SAFETY, ""), "mode all", "spec.faults[0]"),
    "partition-into-kube-system": (
        BASE.replace(DELAY, PARTITION),
        "'kube-system'",
        "spec.faults[0].params.target.namespace",
    ),
    "container-kill-without-containers": (
        BASE.replace(DELAY, "    - name: kill\n      type: container-kill\n      mode: one"),
        "containers",
        "spec.faults[0].containers",
    ),
}


def kfchaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kfchaos", *args], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_validate_refuses_what_render_refuses_with_the_same_line(case: str, tmp_path: Path) -> None:
    text, words, field = REFUSED[case]
    assert text != BASE, "the fixture no longer matches the shipped example"
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    validate = kfchaos("validate", str(path))
    render = kfchaos("render", str(path))
    assert (validate.returncode, render.returncode) == (3, 3), (validate.stderr, render.stderr)
    assert words in validate.stderr and f": {field}: " in validate.stderr
    assert (
        validate.stderr.strip().splitlines()[0].split(": ")[0] == render.stderr.strip().splitlines()[0].split(": ")[0]
    )
    # compile and run load experiments through the same function, so they refuse it too.
    with pytest.raises(SpecError, match=words.replace("'", ".")):
        load_experiment(path)


def test_validate_json_lists_problems_and_warnings(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(REFUSED["partition-into-kube-system"][0])
    result = kfchaos("validate", "--json", str(bad), str(EXPERIMENTS / "vllm-replica-kill.yaml"))
    assert result.returncode == 3
    document = json.loads(result.stdout)
    assert document["valid"] is False
    first, second = document["files"]
    assert first["valid"] is False and first["problems"][0]["path"] == "spec.faults[0].params.target.namespace"
    assert isinstance(first["problems"][0]["line"], int) and first["problems"][0]["line"] > 1
    assert second["valid"] is True and second["name"] == "vllm-replica-kill"
    # An input error says what was wrong where a person reads, also beside the JSON (the fuzz contract).
    assert "spec.faults[0].params.target.namespace" in result.stderr


def test_render_json_gives_the_manifests() -> None:
    result = kfchaos("render", "--json", str(EXPERIMENTS / "vllm-network-delay.yaml"))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["valid"] is True and document["manifests"][0]["kind"] == "NetworkChaos"


def test_a_fault_cut_to_max_fault_duration_is_warned_about(tmp_path: Path) -> None:
    # Five 20-minute stages make a 100-minute fault; a 30-minute cap cuts it silently unless we say so.
    path = tmp_path / "capped.yaml"
    text = BASE.replace("max_fault_duration: 2h", "max_fault_duration: 30m")
    # Its recording where it is: a traffic file that is not there fails validate (kfchaos.validate.missing_files).
    path.write_text(text.replace("file: ../traffic/", f"file: {EXPERIMENTS.parent / 'traffic'}/"))
    warnings = [str(w) for w in load_experiment_warnings(path)]
    assert any("spec.faults[0]: warning:" in w and "cut to 1800s" in w for w in warnings), warnings
    result = kfchaos("validate", str(path))
    assert result.returncode == 0 and "cut to 1800s" in result.stderr


def test_a_missing_baseline_file_is_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "nobaseline.yaml"
    text = BASE.replace("file: ../baselines/vllm-network-delay.yaml", "file: ../baselines/nowhere.yaml")
    path.write_text(text.split("    capture:")[0] + "  safety:" + text.split("  safety:")[1])
    warnings = [str(w) for w in load_experiment_warnings(path)]
    assert any("spec.baseline.file: warning: baseline file ../baselines/nowhere.yaml not found" in w for w in warnings)
    # The shipped example's baseline exists (relative to the experiment file): no warning.
    assert load_experiment_warnings(EXPERIMENTS / "vllm-network-delay.yaml") == []


def _defaults(node: Any, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if "default" in node and node["default"] is not None:
            found.append((where, node))
        for key, value in node.items():
            found += _defaults(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _defaults(value, f"{where}/{index}")
    return found


def test_every_schema_default_satisfies_its_own_field_schema() -> None:
    schema = json_schema()
    defaults = _defaults(schema)
    assert len(defaults) > 20
    for where, node in defaults:
        assert where
        field = {k: v for k, v in node.items() if k != "default"}
        if "$ref" in field:
            continue  # a nested model's default object: its fields' defaults are checked one by one
        jsonschema.validate(node["default"], {**field, "$defs": schema.get("$defs", {})})
    assert {"0.5%", "20m", "95%"} <= {str(node["default"]) for _, node in defaults}, "sanity: units written"


def test_paths_in_an_experiment_are_relative_to_its_file_wherever_it_is_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rule for traffic.file and baseline.file: the experiment file's folder, never the current directory."""
    from kfchaos.kfp.runs import parameters_for
    from kfchaos.spec import baseline_path
    from kfchaos.validate import load_experiment

    folder = tmp_path / "team" / "exps"
    folder.mkdir(parents=True)
    # Real, sealed baselines (a run loads the one it sends): the right one beside the experiment, another here.
    beside = (EXPERIMENTS.parent / "baselines" / "vllm-network-delay.yaml").read_text()
    (folder / "b.yaml").write_text(beside)
    (tmp_path / "b.yaml").write_text((EXPERIMENTS.parent / "baselines" / "vllm-replica-kill.yaml").read_text())
    path = folder / "x.yaml"
    path.write_text(BASE.replace("file: ../baselines/vllm-network-delay.yaml", "file: b.yaml"))
    monkeypatch.chdir(tmp_path)
    experiment = load_experiment(path)
    assert baseline_path(path, experiment) == folder / "b.yaml"
    assert parameters_for(path, experiment, tmp_path, "", None)["baseline"] == beside
    assert not any("baseline" in str(w) for w in load_experiment_warnings(path))
