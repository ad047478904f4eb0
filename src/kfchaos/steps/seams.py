"""The one place the steps bind to the other parts of kfchaos: fault backend, replay engine, report.

Each function is the narrowest interface a step needs. Where a part has not landed yet the function raises
`PartMissing`, naming the module, so a run fails loudly (and the exit handler still cleans up) instead of
passing on missing data.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol

from kfchaos.errors import KfchaosError
from kfchaos.spec import Experiment


class PartMissing(KfchaosError):
    """A part of kfchaos this step needs is not installed in this build."""


def _module(name: str, why: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise PartMissing(f"{why} needs {name}, which this build does not have ({exc})") from None


class FaultBackend(Protocol):
    """DESIGN.md's FaultBackend: what inject, remove and cleanup use."""

    def preflight(self, faults: list[dict[str, Any]]) -> Any: ...
    def apply(self, fault: dict[str, Any]) -> Any: ...
    def wait_injected(self, handle: Any) -> Any: ...
    def remove(self, handle: Any) -> Any: ...
    def wait_recovered(self, handle: Any) -> Any: ...
    def sweep(self, run_id: str) -> Any: ...


def render_faults(experiment: Experiment, run_id: str) -> list[dict[str, Any]]:
    """The Chaos Mesh manifests of the run, labelled with the run id."""
    render = _module("kfchaos.faults.render", "rendering faults")
    manifests: list[dict[str, Any]] = render.render_experiment(experiment, run_id=run_id)
    return manifests


def fault_backend(experiment: Experiment) -> FaultBackend:
    """The Chaos Mesh backend on the cluster the step runs against (in-cluster config, else KUBECONFIG)."""
    chaosmesh = _module("kfchaos.faults.chaosmesh", "injecting faults")
    backend: FaultBackend = chaosmesh.ChaosMeshBackend.from_environment(experiment)
    return backend


def replay_stage(
    experiment: Experiment, stage: int, base_dir: str, target: str, records_path: str, duration: float | None
) -> dict[str, Any]:
    """Replay one stage (or a steady-state probe of `duration` seconds) and write Parquet records.

    Returns at least {'plan_hash': str, 'requests': int, 'valid': bool | str}.
    """
    replay = _module("kfchaos.traffic.replay", "replaying traffic")
    summary: dict[str, Any] = replay.replay_experiment_stage(
        experiment, stage, base_dir=base_dir, target=target or None, out=Path(records_path), duration=duration
    )
    return summary


def render_report(verdict: dict[str, Any], context: dict[str, Any]) -> tuple[str, str] | None:
    """(Markdown, HTML) from kfchaos.report, or None where it has not landed (the step then writes its own)."""
    try:
        report = importlib.import_module("kfchaos.report")
    except ImportError:
        return None
    rendered: tuple[str, str] = (report.markdown(verdict, context), report.html(verdict, context))
    return rendered


def metrics_snapshot(experiment: Experiment, window: tuple[float, float]) -> Any | None:
    """Prometheus series for the stage window (a kfchaos.metrics.snapshot.MetricsSnapshot), or None where the
    metrics client has not landed; the verdict then reports the metric-based checks INCONCLUSIVE, never PASS."""
    try:
        collect = importlib.import_module("kfchaos.metrics.collect")
    except ImportError:
        return None
    return collect.snapshot_for_experiment(experiment, window)
