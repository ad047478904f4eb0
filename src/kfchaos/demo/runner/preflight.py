"""Fail fast before `kfchaos run --local` starts a single task: one line, exit 3, instead of a minute of
kfp.local tasks that end in "no cluster access" or "unsupported fault".

Checks what the pipeline's own preflight step would find out later, with short time bounds:
- the local fault backend (KFCHAOS_FAULT_BACKEND=local, what `kfchaos demo up` exports) can do every
  cluster-side fault of the experiment, and its fault proxy answers;
- otherwise (Chaos Mesh) there is cluster access at all: a kubeconfig, in-cluster config or
  KFCHAOS_KUBE_HOST, and the API server answers;
- the target endpoint accepts a TCP connection.
"""

from __future__ import annotations

import os
import socket
import urllib.request
from urllib.parse import urlsplit

from kfchaos.errors import KfchaosError
from kfchaos.spec import Experiment, FaultBase

HINT = "to try it on this machine: `kfchaos demo up` prints what to export and the run line"
TIMEOUT_S = 3.0


def unsupported_faults(experiment: Experiment) -> list[FaultBase]:
    """The experiment's cluster-side faults the local fault backend cannot inject (`run --local`'s and `tune
    --local`'s one rule)."""
    from kfchaos.demo.faults.local_backend import LOCAL_FAULT_TYPES
    from kfchaos.steps.seams import cluster_faults

    return [f for f in cluster_faults(experiment) if f.type not in LOCAL_FAULT_TYPES]


def check_local_run(experiment: Experiment, target: str) -> None:
    """Raise KfchaosError (one line) when the local run cannot work; return quietly when it can."""
    from kfchaos.steps.seams import BACKEND_ENV, DEMO_STATE_ENV, PROXY_ENV, cluster_faults

    faults = cluster_faults(experiment)
    kind = os.environ.get(BACKEND_ENV, "chaosmesh")
    if kind == "local":
        from kfchaos.demo.faults.local_backend import LOCAL_FAULT_TYPES

        unsupported = unsupported_faults(experiment)
        if unsupported:
            names = ", ".join(f"{f.name} ({f.type})" for f in unsupported)
            raise KfchaosError(
                f"{BACKEND_ENV}=local cannot inject {names}: it does {', '.join(LOCAL_FAULT_TYPES)}; "
                "run this experiment on a cluster (kfchaos run --host)"
            )
        control, state = os.environ.get(PROXY_ENV), os.environ.get(DEMO_STATE_ENV)
        if faults and (not control or not state):
            raise KfchaosError(f"{BACKEND_ENV}=local needs {PROXY_ENV} and {DEMO_STATE_ENV}; {HINT}")
        if faults and control:
            _answers(f"{control.rstrip('/')}/health", f"the fault proxy ({PROXY_ENV}={control})")
    elif kind == "chaosmesh":
        if faults:
            _cluster_answers(experiment)
    else:
        raise KfchaosError(f"{BACKEND_ENV}={kind!r}: expected chaosmesh or local")
    _connects(target or experiment.spec.target.endpoint)
    from kfchaos.faults.lorachurn import readiness

    ready, detail = readiness(experiment, target)
    if ready is not True:
        raise KfchaosError(f"lora-adapter-churn: {detail}")


def _answers(url: str, what: str) -> None:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            if response.status < 500:
                return
    except OSError as exc:
        raise KfchaosError(f"{what} does not answer ({exc}); {HINT}") from None
    raise KfchaosError(f"{what} answers with an error; {HINT}")


def _connects(endpoint: str) -> None:
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            return
    except OSError as exc:
        raise KfchaosError(f"target {endpoint} does not accept connections ({exc}); give --target, or {HINT}") from None


def _cluster_answers(experiment: Experiment) -> None:
    import kubernetes

    from kfchaos.faults.chaosmesh import ChaosMeshBackend

    names = ", ".join(f.name for f in experiment.spec.faults if f.cluster_side)
    try:
        backend = ChaosMeshBackend.from_environment(experiment, "preflight")
        try:
            kubernetes.client.VersionApi(backend.api_client).get_code(_request_timeout=TIMEOUT_S)
        except kubernetes.client.ApiException as exc:
            # The server answered: reachable. Only refused credentials mean no access; the pipeline's own
            # preflight checks CRDs, RBAC and the target pods in detail.
            if exc.status in (401, 403):
                raise
    except Exception as exc:  # any failure here means the same thing: the faults cannot be injected
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise KfchaosError(f"no cluster access for fault(s) {names}: {reason[:200]}; {HINT}") from None
