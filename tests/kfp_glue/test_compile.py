"""`kfchaos compile`: deterministic across processes, versions immutable, the lock check names what to bump."""

from __future__ import annotations

from pathlib import Path

import yaml
from kfp.components import load_component_from_file

from kfchaos.cli import teamrepo
from kfchaos.kfp.compile import component_names
from kfchaos.kfp.versioning import embedded_ir_hash, ir_hash, read_lock
from tests.conftest import ROOT
from tests.kfp_glue.conftest import copy_sources, kfchaos


def _outputs(root: Path) -> dict[str, bytes]:
    files = [*root.glob("pipelines/compiled/*/*.yaml"), root / "pipelines/versions.lock.yaml"]
    files += root.glob("components/*/component.yaml")
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def test_compile_is_byte_identical_across_processes_and_matches_the_committed_files(tmp_path: Path) -> None:
    first, second = copy_sources(tmp_path / "a"), copy_sources(tmp_path / "b")
    for root in (first, second):
        done = kfchaos("compile", "--root", str(root))
        assert done.returncode == 0, done.stderr
    a, b = _outputs(first), _outputs(second)
    assert len(a) >= 1 + 1 + 10 and a == b
    # The committed outputs are what the sources compile to (what CI's `kfchaos compile --check` enforces).
    assert a == {name: (ROOT / name).read_bytes() for name in a}


def test_check_fails_on_a_changed_component_without_a_version_bump(tmp_path: Path) -> None:
    root = copy_sources(tmp_path / "repo")
    assert kfchaos("compile", "--root", str(root)).returncode == 0
    assert kfchaos("compile", "--check", "--root", str(root)).returncode == 0

    # Another component image changes every component, as a changed component.py in the package would.
    changed = {"KFCHAOS_IMAGE": "registry.internal/kfchaos:changed"}
    compiled = root / "pipelines/compiled/vllm-network-delay/1.2.1.yaml"
    before = compiled.read_bytes()

    check = kfchaos("compile", "--check", "--root", str(root), env=changed)
    assert check.returncode == 1
    assert "pipeline vllm-network-delay changed but its version 1.2.1 did not" in check.stderr
    assert "experiments/vllm-network-delay.yaml (metadata.version), e.g. to 1.2.2" in check.stderr
    assert "pipeline kfchaos-experiment changed" in check.stderr and "pyproject.toml" in check.stderr

    # Compiling without --force refuses to rewrite a released version.
    lock_file = root / "pipelines/versions.lock.yaml"
    lock_before = lock_file.read_bytes()
    refused = kfchaos("compile", "--root", str(root), env=changed)
    assert refused.returncode == 1 and compiled.read_bytes() == before
    # ...and leaves the lock describing the files that exist (it was rewritten with the refused hash before).
    assert lock_file.read_bytes() == lock_before
    assert "vllm-network-delay not written; its lock entry is unchanged" in refused.stderr

    # Bumping the experiment's version compiles a new file and leaves the old version untouched.
    experiment = root / "experiments/vllm-network-delay.yaml"
    experiment.write_text(experiment.read_text().replace("version: 1.2.1", "version: 1.2.2", 1))
    kfchaos("compile", "--root", str(root), env=changed)
    assert (root / "pipelines/compiled/vllm-network-delay/1.2.2.yaml").is_file()
    assert compiled.read_bytes() == before
    assert read_lock(root / "pipelines/versions.lock.yaml")["vllm-network-delay"].version == "1.2.2"


def test_check_fails_when_compiled_output_is_missing(tmp_path: Path) -> None:
    root = copy_sources(tmp_path / "repo")
    check = kfchaos("compile", "--check", "--root", str(root))
    assert check.returncode == 1
    assert "pipelines/compiled/vllm-network-delay/1.2.1.yaml: missing" in check.stderr
    assert not (root / "pipelines/compiled").exists()  # --check writes nothing


def test_committed_pipelines_are_valid_yaml_and_carry_their_own_ir_hash() -> None:
    lock = read_lock(ROOT / "pipelines/versions.lock.yaml")
    assert {"kfchaos-experiment", "vllm-network-delay"} <= set(lock)
    for entry in lock.values():
        data = (ROOT / entry.file).read_bytes()
        documents = list(yaml.safe_load_all(data))  # KFP's own header breaks on multi-line defaults; ours must not
        assert documents[0]["pipelineInfo"]["name"] == entry.name
        assert ir_hash(data) == embedded_ir_hash(data) == entry.ir_hash


def test_every_component_yaml_loads_for_reuse_in_other_pipelines() -> None:
    folders = sorted(ROOT / "components" / name for name in component_names())
    # Faults are injected inside the stage tasks: no inject_faults component; 3 for sharded stages (steps.shards);
    # no skip_stage: a stage after a stopped gate is skipped by its own replay (kfchaos.steps.gates).
    assert len(folders) == 12
    for folder in folders:
        component = load_component_from_file(str(folder / "component.yaml"))
        assert component.name == folder.name.replace("_", "-")
        assert (folder / "README.md").is_file()


def test_the_image_override_reaches_every_component(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = copy_sources(tmp_path / "repo")
    env = dict(os.environ, KFCHAOS_IMAGE="registry.internal/kfchaos:dev")
    done = subprocess.run(
        [sys.executable, "-m", "kfchaos", "compile", "--root", str(root)], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    spec = next(yaml.safe_load_all((root / "pipelines/compiled/vllm-network-delay/1.2.1.yaml").read_text()))
    assert {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()} == {
        "registry.internal/kfchaos:dev"
    }


def test_the_ci_template_checks_on_pull_requests_and_uploads_on_main() -> None:
    starter = teamrepo.Starter(file="experiments/my-experiment.yaml", name="my-experiment", namespace="demo")
    rendered = teamrepo.files(starter)
    workflow = yaml.safe_load(rendered[".github/workflows/kfchaos.yml"])
    check_steps = " ".join(step.get("run", "") for step in workflow["jobs"]["check"]["steps"])
    # A team's repository is not kfchaos: CI installs the pinned release, never this checkout (`-e .[test]`).
    assert "pip install -r requirements.txt" in check_steps and "-e" not in check_steps.split()
    assert "kfchaos validate experiments/*.yaml" in check_steps and "kfchaos compile --check" in check_steps
    assert rendered["requirements.txt"].splitlines()[-1] == f"kfchaos=={teamrepo.pinned_version()}"
    upload = workflow["jobs"]["upload"]
    assert upload["needs"] == "check" and "refs/heads/main" in upload["if"]
    assert any("kfchaos upload" in step.get("run", "") for step in upload["steps"])
    assert True in workflow and "pull_request" in workflow[True]  # YAML 1.1 reads the key `on` as True
    gitlab = yaml.safe_load(rendered[".gitlab-ci.yml"])
    assert gitlab["default"]["before_script"] == ["python -m pip install -r requirements.txt"]
    assert gitlab["check"]["script"] == ["kfchaos validate experiments/*.yaml", "kfchaos compile --check"]
    assert gitlab["gate"]["needs"] == ["chaos"] and "--require-signed" in " ".join(gitlab["gate"]["script"])
    assert "KFCHAOS_SIGNING_KEY" not in yaml.safe_dump(gitlab["gate"])


def test_pipeline_parameters_carry_descriptions_in_the_ir() -> None:
    lock = read_lock(ROOT / "pipelines/versions.lock.yaml")
    for entry in lock.values():
        spec = next(yaml.safe_load_all((ROOT / entry.file).read_text()))
        parameters = spec["root"]["inputDefinitions"]["parameters"]
        assert {"experiment", "baseline", "experiment_dir", "target"} <= set(parameters), entry.name
        for name in ("experiment", "baseline", "experiment_dir", "target"):
            assert parameters[name].get("description"), f"{entry.name}: parameter {name} has no description"


def test_compile_path_takes_any_experiment_in_the_repository_and_keeps_it(tmp_path: Path) -> None:
    root = copy_sources(tmp_path / "repo")
    mine = root / "team" / "mine.yaml"
    mine.parent.mkdir()
    text = (root / "experiments/vllm-network-delay.yaml").read_text()
    mine.write_text(
        text.replace("name: vllm-network-delay", "name: team-delay").replace("../baselines/", "../baselines/")
    )
    done = kfchaos("compile", str(mine), "--root", str(root))
    assert done.returncode == 0, done.stderr
    lock = read_lock(root / "pipelines/versions.lock.yaml")
    assert lock["team-delay"].version_source == "team/mine.yaml (metadata.version)"
    assert (root / lock["team-delay"].file).is_file()
    # Once in the lock it stays compiled and checked without naming it again.
    assert kfchaos("compile", "--check", "--root", str(root)).returncode == 0


def test_compile_refuses_an_experiment_or_baseline_outside_the_repository_unless_told(tmp_path: Path) -> None:
    root = copy_sources(tmp_path / "repo")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b.yaml").write_text((root / "baselines/vllm-network-delay.yaml").read_text())
    text = (root / "experiments/vllm-network-delay.yaml").read_text().replace("name: vllm-network-delay", "name: out")
    outside_file = elsewhere / "out.yaml"
    outside_file.write_text(text.replace("../baselines/vllm-network-delay.yaml", "b.yaml"))
    refused = kfchaos("compile", str(outside_file), "--root", str(root))
    assert (
        refused.returncode == 3
        and "lies outside the repository" in refused.stderr
        and "--allow-outside" in refused.stderr
    )
    assert not (root / "pipelines/compiled").exists()
    # An experiment inside whose baseline lies outside is refused too: the pipeline would embed it silently.
    inside = root / "experiments" / "vllm-network-delay.yaml"
    inside.write_text(inside.read_text().replace("../baselines/vllm-network-delay.yaml", str(elsewhere / "b.yaml")))
    refused = kfchaos("compile", "--root", str(root))
    assert refused.returncode == 3 and f"the baseline {elsewhere / 'b.yaml'} lies outside" in refused.stderr
    allowed = kfchaos("compile", str(outside_file), "--allow-outside", "--root", str(root))
    assert allowed.returncode == 0, allowed.stderr
    assert "embedding the experiment" in allowed.stderr and "embedding the baseline" in allowed.stderr


def test_lock_paths_are_relative_to_the_repository_root_wherever_compile_runs(tmp_path: Path) -> None:
    """From another folder, with paths relative to it: the lock names the experiment relative to the root (one
    outside the repository by its absolute path), so `compile --check` in the repository still finds both."""
    root = copy_sources(tmp_path / "repo")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    text = (root / "experiments/vllm-network-delay.yaml").read_text()
    (root / "team").mkdir()
    (root / "team" / "mine.yaml").write_text(text.replace("name: vllm-network-delay", "name: team-delay"))
    (elsewhere / "out.yaml").write_text(
        text.replace("name: vllm-network-delay", "name: out").replace("../baselines/vllm-network-delay.yaml", "b.yaml")
    )
    done = kfchaos(
        "compile", "../repo/team/mine.yaml", "out.yaml", "--allow-outside", "--root", "../repo", cwd=elsewhere
    )
    assert done.returncode == 0, done.stderr
    lock = read_lock(root / "pipelines/versions.lock.yaml")
    assert lock["team-delay"].version_source == "team/mine.yaml (metadata.version)"
    assert lock["out"].version_source == f"{elsewhere / 'out.yaml'} (metadata.version)"
    assert all(not Path(entry.file).is_absolute() and (root / entry.file).is_file() for entry in lock.values())
    check = kfchaos("compile", "--check", "--allow-outside", cwd=root)
    assert check.returncode == 0, check.stderr
    assert not (elsewhere / "pipelines").exists()
