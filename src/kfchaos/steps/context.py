"""What every step needs first: the experiment, parsed from the pipeline parameter that carries its YAML."""

from __future__ import annotations

import hashlib

from kfchaos.errors import KfchaosError
from kfchaos.spec import Experiment
from kfchaos.validate import parse_experiment

PARAMETER_FILE = "experiment (pipeline parameter)"


def experiment_from_text(text: str) -> Experiment:
    """Validated experiment; errors name the parameter and line like any experiment file."""
    if not text.strip():
        raise KfchaosError("the `experiment` pipeline parameter is empty: pass the experiment YAML")
    return parse_experiment(text, PARAMETER_FILE)


def text_hash(text: str) -> str:
    """sha256 of the text's UTF-8 bytes: equal to kfchaos.spec.experiment_hash of a file with that content."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
