"""The CLI's progress names each task as KFP's UI does (its display name), not by its task key."""

from __future__ import annotations

import io
import json

import yaml

from kfchaos.demo.runner.localrun import follow_output
from kfchaos.kfp.runs import TASK_NAMES_PREFIX, task_display_names
from tests.conftest import ROOT


def _spec() -> dict:
    lock = yaml.safe_load((ROOT / "pipelines" / "versions.lock.yaml").read_text())["pipelines"]
    text = (ROOT / lock["vllm-replica-kill"]["file"]).read_text()
    return next(d for d in yaml.safe_load_all(text) if isinstance(d, dict) and "root" in d)


def test_task_keys_map_to_the_display_names_in_the_compiled_ir() -> None:
    names = task_display_names(_spec())
    assert names["replay-stage-2"] == "replay 30%"
    assert names["collect-metrics-5"] == "metrics 100%"
    assert names["verdict-report"] == "verdict + report"
    assert names["cleanup"] == "cleanup (exit handler)"


def test_progress_uses_the_display_names_the_child_announces() -> None:
    names = task_display_names(_spec())
    seen: list[tuple[str, str]] = []
    lines = [
        TASK_NAMES_PREFIX + json.dumps(names) + "\n",
        "\x1b[32mTask 'replay-stage-2' finished with status SUCCESS\x1b[0m\n",
        "Task 'not-in-the-map' finished with status FAILURE\n",
    ]
    log = io.StringIO()
    follow_output(lines, log, lambda task, status: seen.append((task, status)))
    assert seen == [("replay 30%", "success"), ("not-in-the-map", "failure")]
    assert log.getvalue() == "".join(lines)
