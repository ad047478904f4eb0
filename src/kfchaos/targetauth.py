"""The target's credential: the environment variable spec.target.auth names, read into one header; on a cluster,
the Kubernetes Secret the pipeline mounts that variable from, and the check that stops a run before any fault
when the token did not arrive.

Task pods run in the KFP namespace (`kubeflow` standalone; the profile namespace in multi-user mode), not
the target's: the Secret must be there. KFP backends >= 2.15 honour `optional` (kubeflow/pipelines#12216)
and start the task without it, so a missing Secret would otherwise show up only as 401s from the target.
The replay (kfchaos.traffic.plan), the LoRA churn's admin calls (kfchaos.faults.lorachurn), the steady-state step
and `kfchaos doctor` all read the rule here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kfchaos.errors import KfchaosError
from kfchaos.spec import Experiment

TARGET_SECRET = "kfchaos-target"
TARGET_SECRET_KEY = "token"
# Where a pod's own namespace is (the service account token projection).
POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def credential_from_env(env: str, kind: str, header: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(header, value) for spec.target.auth. A missing variable is an input error naming the variable only."""
    value = (os.environ if environ is None else environ).get(env)
    if not value:
        raise KfchaosError(f"target credential: environment variable {env} is not set (spec.target.auth.env)")
    return (header, f"Bearer {value}" if kind == "bearer" else value)


def _pod_namespace() -> str | None:
    try:
        return POD_NAMESPACE_FILE.read_text().strip()[:253] or None
    except OSError:
        return None


def require_target_credential(experiment: Experiment, environ: Mapping[str, str] | None = None) -> None:
    """Raise, naming the Secret and the namespace to create it in, when spec.target.auth's variable is empty."""
    auth = experiment.spec.target.auth
    if auth is None or (os.environ if environ is None else environ).get(auth.env, "").strip():
        return
    namespace = _pod_namespace()
    where = namespace or "<the KFP namespace>"
    raise KfchaosError(
        f"target credential missing: {auth.env} (spec.target.auth.env) is empty in this task, so every request "
        f"to the target would be refused (401). Create the Secret where the run's pods run, namespace "
        f"{namespace or 'of the KFP run (kubeflow standalone; your profile in multi-user mode)'}: "
        f"kubectl -n {where} create secret generic {TARGET_SECRET} --from-literal={TARGET_SECRET_KEY}=... "
        "(`kfchaos doctor` checks this before a run)"
    )
