"""The one validator of experiment files, shared by validate, compile, render and every run.

It lives above both halves it joins: the model (kfchaos.spec: the format and its own checks) and the safety
guards and the renderer (kfchaos.faults: the refusals `render` would make), so a file `validate` accepts is one
`render` accepts. `load_experiment(path)` returns a validated `Experiment` or raises `SpecError` listing every
problem as FILE:LINE: field.path: message.
"""

from __future__ import annotations

from pathlib import Path as FsPath

from pydantic import ValidationError

from kfchaos.errors import Problem, SpecError
from kfchaos.faults.render import render_fault
from kfchaos.faults.safety import FaultInputError, FaultSafetyError, check_fault, fault_path, short_duration_problem
from kfchaos.spec import Experiment, baseline_path, experiment_relative, model_problems
from kfchaos.yamlsource import YamlDocument, load_yaml, read_source


def checked_experiment(document: YamlDocument) -> tuple[Experiment | None, list[Problem]]:
    """The document's experiment and every problem with it, in file order: the model's (and then no experiment),
    else the safety guards' and renderer's. The model reads the document once."""
    experiment, problems = model_problems(document)
    if experiment is None:
        return None, problems
    return experiment, sorted(safety_problems(document, experiment), key=lambda p: p.line)


def validation_problems(document: YamlDocument) -> list[Problem]:
    """Every problem with the document, in file order (checked_experiment)."""
    return checked_experiment(document)[1]


def safety_problems(document: YamlDocument, experiment: Experiment) -> list[Problem]:
    """The refusals `render` (and so every run) would make, found at validation.

    One validator for validate, compile, render and run: the safety guards and the admission rules live
    in kfchaos.faults (where they also guard Experiments built in code); here every fault goes through
    them, so a file `validate` accepts is one `render` accepts.
    """
    problems: list[Problem] = []
    for fault in experiment.spec.faults:
        try:
            check_fault(experiment, fault)
            if fault.cluster_side:
                render_fault(experiment, fault, "validate")
        except (FaultSafetyError, FaultInputError) as exc:
            problems.append(document.problem(exc.path, str(exc)))
    return list(dict.fromkeys(problems))


def experiment_warnings(document: YamlDocument, experiment: Experiment) -> list[Problem]:
    """What is accepted but silently changed at run time: say so rather than surprise the user."""
    warnings: list[Problem] = []
    limit = experiment.spec.safety.max_fault_duration
    stages = experiment.spec.traffic.stages
    for fault in experiment.spec.faults:
        short = short_duration_problem(experiment, fault)
        if short:
            warnings.append(document.problem((*fault_path(experiment, fault), "duration"), f"warning: {short}"))
        if fault.duration is not None or not fault.cluster_side:
            continue
        active = [stages.index(s) for s in experiment.fault_stages(fault) if s in stages] or [0, len(stages) - 1]
        span = (max(active) - min(active) + 1) * experiment.spec.traffic.stage_duration
        if span > limit:
            warnings.append(
                document.problem(
                    fault_path(experiment, fault),
                    f"warning: the fault's stages span {span:g}s but safety.max_fault_duration is {limit:g}s; "
                    f"the fault is cut to {limit:g}s and the later stages run without it",
                )
            )
    baseline = baseline_path(document.file, experiment)
    if baseline is not None and experiment.spec.baseline.capture is None and not baseline.is_file():
        warnings.append(
            document.problem(
                ("spec", "baseline", "file"),
                f"warning: baseline file {experiment.spec.baseline.file} not found ({baseline}: paths in an "
                "experiment are relative to its file); a run without a baseline cannot judge P99 drift and ends "
                "INCONCLUSIVE",
            )
        )
    return warnings


def missing_files(path: str | FsPath, experiment: Experiment) -> list[Problem]:
    """The files the experiment's traffic is read from (traffic.file, traffic.synthetic.fit_from) that are not
    there, relative to the experiment file: errors where the run reads them here (validate, `run --local`), not
    in the pipeline's own steps, which find them in the task's experiment_dir."""
    document = load_yaml(read_source(path), str(path))
    traffic = experiment.spec.traffic
    named: list[tuple[tuple[str, ...], str | None]] = [(("spec", "traffic", "file"), traffic.file)]
    if traffic.synthetic is not None:
        named.append((("spec", "traffic", "synthetic", "fit_from"), traffic.synthetic.fit_from))
    return [
        document.problem(where, f"file {value} not found ({found}: paths in an experiment are relative to its file)")
        for where, value in named
        if value and not (found := experiment_relative(path, value)).is_file()
    ]


def parse_experiment(text: str | bytes, file: str) -> Experiment:
    experiment, problems = checked_experiment(load_yaml(text, file))
    if problems or experiment is None:
        raise SpecError(problems)
    return experiment


def load_experiment_warnings(path: str | FsPath) -> list[Problem]:
    """The warnings of a file that loads; [] for one that does not (its problems are errors instead)."""
    try:
        document = load_yaml(read_source(path), str(path))
        experiment, problems = checked_experiment(document)
    except (OSError, SpecError, ValidationError):
        return []
    if problems or experiment is None:
        return []
    return experiment_warnings(document, experiment)


def load_experiment(path: str | FsPath) -> Experiment:
    path = FsPath(path)
    try:
        raw = read_source(path)
    except OSError as exc:
        raise SpecError([Problem(str(path), 1, (), f"cannot read file: {exc.strerror or exc}")]) from None
    return parse_experiment(raw, str(path))
