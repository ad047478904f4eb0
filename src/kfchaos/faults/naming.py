"""Object names and labels that tie every cluster object to one run of one experiment.

The name is deterministic per (experiment, run, fault), so a retried pipeline step finds the object it
created before instead of making a second fault; the labels let the exit handler and `kfchaos cleanup`
find every object of a run without any local state.
"""

from __future__ import annotations

import hashlib

from kfchaos.errors import KfchaosError
from kfchaos.types import check_label

LABEL_RUN_ID = "kfchaos.io/run-id"
LABEL_EXPERIMENT = "kfchaos.io/experiment"
LABEL_PIPELINE_VERSION = "kfchaos.io/pipeline-version"
LABEL_FAULT = "kfchaos.io/fault"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "kfchaos"
ANNOTATION_FAULT_TYPE = "kfchaos.io/fault-type"

_MAX_NAME = 63  # a DNS label: also valid as a label value and as a Pod name


def object_name(experiment: str, fault: str, run_id: str) -> str:
    """`<fault>-<10 hex digits of sha256(experiment/run/fault)>`, at most 63 characters."""
    digest = hashlib.sha256(f"{experiment}/{run_id}/{fault}".encode()).hexdigest()[:10]
    prefix = fault[: _MAX_NAME - len(digest) - 1].rstrip("-")
    return f"{prefix}-{digest}"


def run_labels(experiment: str, run_id: str, pipeline_version: str) -> dict[str, str]:
    """The labels every object of a run carries. Raises KfchaosError if a value is not a valid label value."""
    labels = {
        LABEL_RUN_ID: run_id,
        LABEL_EXPERIMENT: experiment,
        LABEL_PIPELINE_VERSION: pipeline_version,
        LABEL_MANAGED_BY: MANAGED_BY,
    }
    for key, value in labels.items():
        try:
            check_label(key, value)
        except ValueError as exc:
            raise KfchaosError(f"{key}: {exc} (at most 63 letters, digits, '-', '_' or '.')") from None
    return labels


def run_selector(run_id: str) -> str:
    """The label selector that finds every object of one run. KfchaosError for a run id that is not one run's: empty
    (a sweep would fall back to every run's objects), or not a label value (selector syntax such as `a,b` or
    `x in (y)` could change what it selects): it comes from a flag or a pipeline parameter, outside input."""
    return f"{LABEL_RUN_ID}={check_run_id(run_id)}"


def check_run_id(run_id: str) -> str:
    """`run_id` when it names one run (a non-empty Kubernetes label value), else KfchaosError saying why."""
    if not run_id:
        raise KfchaosError("run id '': empty; it would select no run, or every run's objects: give the run's id")
    try:
        check_label(LABEL_RUN_ID, run_id)
    except ValueError:
        raise KfchaosError(
            f"run id {run_id!r}: not a run's id (at most 63 letters, digits, '-', '_' or '.', a letter or digit at "
            "each end); it reaches a label selector, where other characters could select other runs"
        ) from None
    return run_id
