"""What every step needs first: the experiment, parsed from the pipeline parameter that carries its YAML, and the
run's id."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import kubernetes

from kfchaos import kubeconnect
from kfchaos.errors import KfchaosError
from kfchaos.spec import Experiment
from kfchaos.validate import parse_experiment

PARAMETER_FILE = "experiment (pipeline parameter)"
# The pipeline passes the run's id as KFP's run-id placeholder (kfp.dsl.PIPELINE_JOB_ID_PLACEHOLDER). A backend
# that resolves only input and output placeholders hands it over as written: KFP 2.1.0's launcher knows
# `{{$.inputs...}}` and `{{$.outputs...}}` alone (kubeflow/pipelines, backend/src/v2/component/launcher_v2.go).
RUN_ID_PLACEHOLDER = "{{$.pipeline_job_uuid}}"
# What such a backend does give a task: its pod's name (KFP_POD_NAME, backend/src/v2/compiler/argocompiler/
# common.go) and, on every pod of a run, the run id as a label (backend/src/apiserver/template/argo_template.go:
# SetLabels(util.LabelKeyWorkflowRunId, options.RunId), propagated by Argo to the run's pods).
RUN_ID_LABEL = "pipeline/runid"
POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def experiment_from_text(text: str) -> Experiment:
    """Validated experiment; errors name the parameter and line like any experiment file."""
    if not text.strip():
        raise KfchaosError("the `experiment` pipeline parameter is empty: pass the experiment YAML")
    return parse_experiment(text, PARAMETER_FILE)


def text_hash(text: str) -> str:
    """sha256 of the text's UTF-8 bytes: equal to kfchaos.spec.experiment_hash of a file with that content."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pod_labels(name: str, namespace: str) -> dict[str, str]:
    pod = kubernetes.client.CoreV1Api(kubeconnect.api_client()).read_namespaced_pod(name, namespace)
    return dict(pod.metadata.labels or {})


def task_run_id(
    run_id: str,
    environ: Mapping[str, str] | None = None,
    pod_labels: Callable[[str, str], dict[str, str]] = _pod_labels,
) -> str:
    """The run's id: the pipeline parameter when the backend resolved it, else the `pipeline/runid` label of this
    task's pod (an older KFP backend). Raises, saying which, when neither is there: a run without its id could not
    label its faults, and cleanup finds faults by that label."""
    if run_id != RUN_ID_PLACEHOLDER:
        return run_id
    env = os.environ if environ is None else environ
    pod = env.get("KFP_POD_NAME", "")
    try:
        namespace = POD_NAMESPACE_FILE.read_text().strip()
    except OSError:
        namespace = ""
    if not pod or not namespace:
        raise KfchaosError(
            f"the run id arrived unresolved ({RUN_ID_PLACEHOLDER}) and this task is not a KFP pod "
            "(no KFP_POD_NAME or service-account namespace) to read it from: the backend must resolve KFP's "
            "run-id placeholder"
        )
    try:
        labels = pod_labels(pod, namespace)
    except Exception as error:
        raise KfchaosError(
            f"the run id arrived unresolved ({RUN_ID_PLACEHOLDER}, KFP older than 2.2 resolves only inputs and "
            f"outputs) and reading this pod's {RUN_ID_LABEL!r} label failed: {error}"
        ) from error
    resolved = labels.get(RUN_ID_LABEL, "")
    if not resolved:
        raise KfchaosError(
            f"the run id arrived unresolved ({RUN_ID_PLACEHOLDER}) and pod {namespace}/{pod} has no "
            f"{RUN_ID_LABEL!r} label to read it from"
        )
    return resolved
