"""Fitting a workload to a recording: known parameters recovered, the fit used by a plan, hostile files refused."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kfchaos.cli import main
from kfchaos.errors import KfchaosError
from kfchaos.spec import Synthetic
from kfchaos.traffic.fit import apply_fit, fit_file
from kfchaos.traffic.plan import plan_stage
from kfchaos.traffic.workload import workload_requests
from kfchaos.validate import load_experiment

MU, SIGMA = math.log(120), 0.6  # question lengths (tokens)
OUT_MU, OUT_SIGMA = math.log(200), 0.4
RATE = 8.0
SYSTEMS = ["You are a support agent. " * 100, "You review code. " * 150]


def recording(path: Path, n: int = 6000, seed: int = 1, gap_shape: float = 1.0) -> Path:
    """A jsonl chat recording with lognormal question and output lengths, gamma gaps at RATE per second, turns
    1..4 (a request at turn k carries k user messages), and two system prompts on half the conversations."""
    rng = np.random.default_rng(seed)
    questions = np.maximum(1, np.rint(rng.lognormal(MU, SIGMA, n))).astype(int)
    outputs = np.maximum(1, np.rint(rng.lognormal(OUT_MU, OUT_SIGMA, n))).astype(int)
    times = 1764662400.0 + np.cumsum(rng.gamma(gap_shape, 1.0 / (RATE * gap_shape), n))
    turns = rng.choice([1, 2, 3, 4], n, p=[0.4, 0.3, 0.2, 0.1])
    with gzip.open(path, "wt") as out:
        for i in range(n):
            messages: list[dict[str, str]] = []
            if i % 2 == 0:
                messages.append({"role": "system", "content": SYSTEMS[i % 4 // 2]})
            for _ in range(turns[i] - 1):
                messages += [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "answer"}]
            messages.append({"role": "user", "content": "x" * (4 * questions[i])})
            body = {"model": "m", "messages": messages, "max_tokens": int(outputs[i])}
            record = {"id": f"r{i}", "timestamp": float(times[i]), "method": "POST", "path": "/v1/chat/completions"}
            out.write(json.dumps({**record, "body": body}) + "\n")
    return path


def test_fit_recovers_known_parameters(tmp_path: Path) -> None:
    fit = fit_file(recording(tmp_path / "rec.jsonl.gz"))
    assert fit.requests == 6000 and fit.report.malformed_count == 0
    assert fit.questions is not None and fit.outputs is not None and fit.turns is not None
    assert fit.questions.mu == pytest.approx(MU, rel=0.01) and fit.questions.sigma == pytest.approx(SIGMA, rel=0.04)
    assert fit.outputs.mu == pytest.approx(OUT_MU, rel=0.01) and fit.outputs.sigma == pytest.approx(OUT_SIGMA, rel=0.04)
    assert fit.questions.ks < 0.03  # the lognormal describes a lognormal sample
    assert fit.output_source == "max_tokens"
    assert fit.rate == pytest.approx(RATE, rel=0.03)
    assert fit.gap_cv == pytest.approx(1.0, abs=0.05)  # Poisson
    # Requests at turn k are the conversations with at least k turns: mean turns = sum(N_k) / N_1.
    assert fit.turns.mean == pytest.approx(1 / 0.4, rel=0.05)
    assert fit.system_count == 2 and fit.system_share == pytest.approx(0.5, abs=0.03)


def test_a_bursty_recording_is_seen_as_bursty_and_resampled_as_recorded(tmp_path: Path) -> None:
    path = recording(tmp_path / "rec.jsonl.gz", gap_shape=0.25)  # CV of the gaps: 2
    fit = fit_file(path)
    assert fit.gap_cv == pytest.approx(2.0, rel=0.1)
    spec = apply_fit(Synthetic(fit_from=str(path), arrival="recorded", rate=40), fit)
    assert spec.rate == 40  # set rates win over the recorded one
    single = spec.model_copy(update={"conversations": None, "system_prompts": None})
    times = np.array([r.timestamp for r in itertools.islice(workload_requests(single, 1, fit.gaps), 20_000)])
    gaps = np.diff(times)
    assert 1 / gaps.mean() == pytest.approx(40, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.15)


def test_apply_fit_fills_only_what_the_experiment_leaves_unset(tmp_path: Path) -> None:
    path = recording(tmp_path / "rec.jsonl.gz")
    fit = fit_file(path)
    spec = apply_fit(Synthetic.model_validate({"fit_from": str(path), "output_tokens": {"mean": 50}}), fit)
    assert spec.rate == pytest.approx(RATE, rel=0.03)
    assert spec.prompt_tokens.distribution == "empirical" and spec.prompt_tokens.mean == pytest.approx(
        math.exp(MU + SIGMA**2 / 2), rel=0.05
    )
    assert spec.output_tokens.mean == 50
    assert spec.system_prompts is not None and spec.system_prompts.count == 2
    assert spec.conversations is not None and spec.conversations.turns.max == 4
    lognormal = apply_fit(Synthetic(fit_from=str(path), fit_lengths="lognormal"), fit)
    assert lognormal.prompt_tokens.distribution == "lognormal"
    assert lognormal.prompt_tokens.mean == pytest.approx(math.exp(MU + SIGMA**2 / 2), rel=0.03)


def fitted_experiment(folder: Path) -> Path:
    experiment = folder / "exp.yaml"
    experiment.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kfchaos.io/v1alpha1",
                "kind": "Experiment",
                "metadata": {"name": "fitted", "owner": "t", "version": "1.0.0"},
                "spec": {
                    "target": {
                        "namespace": "llm",
                        "selector": {"labels": {"app": "vllm"}},
                        "endpoint": "http://127.0.0.1:9",
                        "api": "openai-chat",
                        "model": "m",
                    },
                    "traffic": {
                        "synthetic": {"fit_from": "rec.jsonl.gz", "conversations": {"think_time": "5s"}},
                        "stage_duration": "20m",
                        "stages": [30, 100],
                    },
                    "baseline": {"file": "baselines/x.yaml"},
                },
            }
        )
    )
    return experiment


def test_an_experiment_fitted_to_its_recording_runs_at_the_recorded_rate(tmp_path: Path) -> None:
    recording(tmp_path / "rec.jsonl.gz")
    experiment = fitted_experiment(tmp_path)
    load_experiment(experiment)
    plan = plan_stage(experiment, 100)
    requests = [p.request for p in plan.schedule()]
    assert len(requests) / 1200 == pytest.approx(RATE, rel=0.06)
    assert max(r.turn.k for r in requests if r.turn) == 3  # turns 1..4 fitted
    # The plan hash covers the recording's bytes: a changed recording is a different plan.
    before = plan.hash
    recording(tmp_path / "rec.jsonl.gz", seed=2)
    assert plan_stage(experiment, 100).hash != before


def test_audit_verify_replans_a_fitted_workload_only_with_its_recording(tmp_path: Path) -> None:
    from kfchaos import audit

    recording(tmp_path / "rec.jsonl.gz")
    experiment = fitted_experiment(tmp_path)
    record = {
        "replay_plans": [{"stage": 30, "plan_hash": plan_stage(experiment, 30).hash}],
        "parameters": {"experiment": experiment.read_text(), "experiment_dir": str(tmp_path)},
    }
    [finding] = audit._verify_plans(record)
    assert finding.ok and finding.what == "replay_plans[stage 30]" and "not checked" not in finding.detail
    (tmp_path / "rec.jsonl.gz").unlink()
    [finding] = audit._verify_plans(record)
    assert "not checked" in finding.detail and "rec.jsonl.gz" in finding.detail  # never reported as ok


def test_sharegpt_conversations_fit_turns_directly(tmp_path: Path) -> None:
    path = tmp_path / "set.json"
    conversations = [
        {"id": f"c{i}", "conversations": [{"from": "system", "value": "be brief " * 50}] * (i % 2)
         + [{"from": "human", "value": "q" * 40}, {"from": "gpt", "value": "a" * 400}] * (1 + i % 3)}
        for i in range(300)
    ]  # fmt: skip
    path.write_text(json.dumps(conversations))
    fit = fit_file(path, "sharegpt")
    assert fit.turns is not None and fit.turns.mean == pytest.approx(2.0, rel=0.01)
    assert fit.questions is not None and fit.questions.mean == 10 and fit.outputs is not None
    assert fit.outputs.mean == 100 and fit.output_source == "usage"
    assert fit.rate is None and fit.system_share == pytest.approx(0.5)
    with pytest.raises(KfchaosError, match="no recorded rate"):
        apply_fit(Synthetic(fit_from=str(path), fit_format="sharegpt", rate=1.0).model_copy(update={"rate": None}), fit)


# ------------------------------------------------------------------ hostile input


def lines(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


GOOD = {"timestamp": 1.5, "body": {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 10}}


def test_an_empty_file_is_an_input_error_naming_it(tmp_path: Path) -> None:
    path = lines(tmp_path / "empty.jsonl", [])
    with pytest.raises(KfchaosError, match=r"empty\.jsonl: nothing to fit.*\(no records: empty file\)"):
        fit_file(path)
    with pytest.raises(KfchaosError, match="not found"):
        fit_file(tmp_path / "missing.jsonl")


def test_bad_values_skip_their_line_naming_file_line_and_field(tmp_path: Path) -> None:
    nan_usage = '{"timestamp": 2, "usage": {"completion_tokens": NaN}, "body": {"prompt": "x"}}'
    huge_float = '{"timestamp": 3, "body": {"prompt": "x", "max_tokens": 1e400}}'
    records: list[Any] = [
        GOOD,
        nan_usage,
        huge_float,
        {"timestamp": 4, "body": {"prompt": "x", "max_tokens": 10**30}},
        {"timestamp": 5, "body": {"prompt": "x", "max_tokens": True}},
        {"timestamp": float("1e300"), "body": {"prompt": "x"}},
        {"timestamp": 6, "body": {"messages": "not a list"}},
        {"timestamp": 7, "body": {"messages": [{"role": "user", "content": {"no": "text"}}]}},
        {"timestamp": 8},
        "[" * 500 + "]" * 500,
        {"timestamp": 9, "body": {"prompt": "ok", "max_tokens": 20}},
    ]
    path = lines(tmp_path / "rec.jsonl", records)
    fit = fit_file(path)
    assert fit.requests == 2 and fit.report.malformed_count == 9
    described = "\n".join(fit.describe())
    for line, field in [
        (2, "usage.completion_tokens"),
        (3, "body.max_tokens"),
        (4, "body.max_tokens: out of range"),
        (5, "body.max_tokens: not a number"),
        (6, "timestamp"),
        (7, "body.messages"),
        (8, "body.messages[0].content"),
        (9, "field body"),
        (10, "nested too deep"),
    ]:
        assert f"rec.jsonl:{line}: skipped: " in described and field in described, (line, field)
    assert fit.outputs is not None and fit.outputs.max == 20  # nothing huge got into the fit


def test_a_file_of_only_bad_lines_names_its_first_problems(tmp_path: Path) -> None:
    path = lines(tmp_path / "bad.jsonl", [{"timestamp": 1, "body": {"prompt": "x", "max_tokens": -3}}, "{"])
    with pytest.raises(KfchaosError, match=r"bad\.jsonl: nothing to fit.*line 1: field body\.max_tokens: out of range"):
        fit_file(path)


def test_long_files_are_fitted_from_a_bounded_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kfchaos.traffic.fit as fit_module

    monkeypatch.setattr(fit_module, "MAX_SAMPLES", 500)
    fit = fit_file(recording(tmp_path / "rec.jsonl.gz", n=3000))
    assert fit.questions is not None and fit.questions.count == 3000
    assert fit.gaps.size <= 500 and fit.questions.mu == pytest.approx(MU, rel=0.03)


# ------------------------------------------------------------------ command


def test_traffic_fit_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = recording(tmp_path / "rec.jsonl.gz", n=2000)
    out = tmp_path / "fitted.yaml"
    assert main(["traffic", "fit", str(path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2000 requests fitted" in text and "KS distance" in text and "synthetic:" in text
    block = yaml.safe_load(out.read_text())["synthetic"]
    fitted = Synthetic.model_validate(block)  # the block is valid experiment input as written
    assert fitted.rate == pytest.approx(RATE, rel=0.05) and fitted.arrival == "gamma"
    assert fitted.conversations is not None and fitted.system_prompts is not None
    assert main(["traffic", "fit", str(path), "--json", "--lengths", "lognormal"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["synthetic"]["prompt_tokens"]["distribution"] == "lognormal"
    assert document["fit"]["question_tokens"]["lognormal"]["mu"] == pytest.approx(MU, rel=0.02)
    empty = lines(tmp_path / "empty.jsonl", [])
    assert main(["traffic", "fit", str(empty)]) == 3
    assert "empty.jsonl: nothing to fit" in capsys.readouterr().err
    assert main(["traffic", "fit", str(path), "--format", "sharegpt"]) == 3  # no rate for a prompt set
