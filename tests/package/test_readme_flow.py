"""The README's "Your own experiment in ten minutes", line by line, in a fresh clone of this repository (issue 36):
the run gives a verdict, and `verdict --run` on its folder gives the same one, as does `audit verify`'s
re-judgment. The clone's .venv is the installed wheel's virtualenv (tests/package/conftest.py), so the commands are
the package's, not this checkout's."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_tool
from tests.package.conftest import Installed

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SECTION = "## Your own experiment in ten minutes"
MARK = "@@kfchaos-readme-line"


def readme_lines() -> list[str]:
    """The commands of the section's shell block, comments removed."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", readme.split(SECTION, 1)[1], flags=re.S)
    assert block, "the ten-minute section has no sh block"
    lines = [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _script(lines: list[str]) -> str:
    """One shell, as a person types them; after each line its exit code. The README's placeholder runs/<run-id>
    is the folder the run line made."""
    out = ["set -u"]
    for index, line in enumerate(lines):
        command = line.replace("runs/<run-id>", '"$(ls -d runs/my-experiment-*/ | head -1)"')
        out += [f"echo '{MARK} {index} start'", command, f'echo "{MARK} {index} exit $?"']
    return "\n".join(out) + "\n"


def test_the_ten_minute_flow_ends_in_a_verdict_that_re_judges_to_itself(installed: Installed, tmp_path: Path) -> None:
    require_tool("prometheus", "the demo stack's metrics server")
    lines = readme_lines()
    assert lines[0] == "source .venv/bin/activate" and lines[-1] == "kfchaos demo down"
    assert any(line.startswith("kfchaos verdict --run runs/<run-id>") for line in lines)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    (clone / ".venv").symlink_to(installed.venv)  # what `make setup` makes, from the wheel
    crashes = tmp_path / "crashes"  # an internal error's traceback, shown when the flow fails
    crashes.mkdir()
    env = installed.env(XDG_CONFIG_HOME=str(tmp_path / "config"), KFCHAOS_CRASH_DIR=str(crashes))
    try:
        done = subprocess.run(
            ["bash", "-c", _script(lines)], cwd=clone, env=env, capture_output=True, text=True, timeout=1500
        )
    finally:
        subprocess.run(["bash", "-c", "source .venv/bin/activate && kfchaos demo down"], cwd=clone, env=env,
                       capture_output=True, timeout=120)  # fmt: skip
    codes = {int(i): int(c) for i, c in re.findall(rf"^{MARK} (\d+) exit (\d+)$", done.stdout, flags=re.M)}
    tracebacks = "".join(f"\n{crash.name}:\n{crash.read_text()}" for crash in sorted(crashes.iterdir()))
    assert len(codes) == len(lines), done.stdout[-4000:] + done.stderr[-4000:] + tracebacks
    run = next(i for i, line in enumerate(lines) if line.startswith("kfchaos run "))
    rejudge = next(i for i, line in enumerate(lines) if line.startswith("kfchaos verdict --run"))
    others = {lines[i]: code for i, code in codes.items() if i not in (run, rejudge)}
    assert all(code == 0 for code in others.values()), (others, done.stderr[-4000:] + tracebacks)
    assert codes[run] in (0, 1, 2), done.stdout[-4000:]
    assert codes[rejudge] == codes[run], done.stdout[-4000:] + done.stderr[-4000:]

    folders = sorted((clone / "runs").glob("my-experiment-*/"))
    assert len(folders) == 1
    verdict = json.loads((folders[0] / "verdict.json").read_text())
    assert {0: "PASS", 1: "FAIL", 2: "INCONCLUSIVE"}[codes[run]] == verdict["status"]
    baseline = (clone / "my-experiment.baseline.yaml").read_text()
    assert "experiment: my-experiment\n" in baseline and "records: my-experiment.baseline.control.parquet" in baseline
    verified = subprocess.run(
        ["bash", "-c", f"source .venv/bin/activate && kfchaos audit verify '{folders[0]}'"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr
