"""Previous container logs: the evidence that tells a GPU OOM crash from another crash (kfchaos.metrics.oom).

On a cluster this is the pod log API with previous=true (`kubectl logs --previous`): the kubelet keeps the
log of one previous container per container, so only the most recent crash can be read. Reading it needs
`get pods/log` in the target's namespace; without it every crash stays unread and the OOM check says
INCONCLUSIVE rather than assume the crash was not a GPU OOM. The embedded demo's supervisor keeps the same
single previous log in a file named in its state file.
Reads are bounded (the last TAIL_LINES lines, at most LIMIT_BYTES, TIMEOUT seconds).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kfchaos.metrics.oom import CrashLogReader

TAIL_LINES = 2000
LIMIT_BYTES = 1 << 20
TIMEOUT = 10.0


def demo_reader(state_file: Path) -> CrashLogReader:
    """The demo supervisor's previous container log (any pod: the demo has one)."""

    def read(namespace: str, pod: str, container: str) -> str | None:
        try:
            state = json.loads(state_file.read_text())
            path = Path(str(state["previous_log"]))
            with path.open("rb") as handle:
                size = path.stat().st_size
                handle.seek(max(0, size - LIMIT_BYTES))
                return handle.read().decode("utf-8", errors="replace")
        except (OSError, ValueError, KeyError, TypeError):
            return None

    return read


def kubernetes_reader() -> CrashLogReader | None:
    """The pod log API through the kubernetes client (in-cluster config, else kubeconfig), configured on the
    first crash to read: a run without crashes talks to no API server. None without the client."""
    try:
        from kubernetes import client
        from kubernetes.config.config_exception import ConfigException

        from kfchaos import kubeconnect
    except ImportError:
        return None
    api: list[object] = []

    def connect() -> object | None:
        if not api:
            try:
                api.append(client.CoreV1Api(kubeconnect.api_client()))
            except (ConfigException, OSError, TypeError, ValueError):
                return None
        return api[0]

    def read(namespace: str, pod: str, container: str) -> str | None:
        core = connect()
        if core is None:
            return None
        try:
            text = core.read_namespaced_pod_log(  # type: ignore[attr-defined]
                pod,
                namespace,
                container=container,
                previous=True,
                tail_lines=TAIL_LINES,
                limit_bytes=LIMIT_BYTES,
                _request_timeout=TIMEOUT,
            )
        except Exception:  # ApiException (403, 404: pod gone), connection errors: the evidence is unreadable
            return None
        return text if isinstance(text, str) else None

    return read


def from_environment() -> CrashLogReader | None:
    """The demo's reader under the local fault backend, else the cluster's (kfchaos.steps.seams env names)."""
    state = os.environ.get("KFCHAOS_DEMO_STATE")
    if os.environ.get("KFCHAOS_FAULT_BACKEND") == "local" and state:
        return demo_reader(Path(state))
    return kubernetes_reader()
