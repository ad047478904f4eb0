"""Put the doctor's checks together for one experiment."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kfchaos import kubeconnect, netsafe
from kfchaos.doctor import cluster, kfpcheck, series
from kfchaos.doctor.model import Report, Status
from kfchaos.kfp.client import RUN_SERVICE_ACCOUNT, TOKEN_ENV
from kfchaos.kfp.identity import CHAOS_PLURALS
from kfchaos.spec import Experiment
from kfchaos.validate import load_experiment

HTTP_TIMEOUT = 10.0
MAX_ANSWER = 1 << 20  # a healthz answer is a few hundred bytes; never read an unbounded body


@dataclass(frozen=True)
class Options:
    experiment: Path
    root: Path = Path(".")
    kfp_host: str | None = None
    token: str | None = None
    kfp_namespace: str = "kubeflow"
    service_account: str = RUN_SERVICE_ACCOUNT
    kubeconfig: str | None = None
    kube_context: str | None = None
    chaos_namespace: str = "chaos-mesh"
    prometheus: str | None = None


def pipeline_documents(root: Path, experiment_path: Path, experiment: Experiment) -> tuple[list[Any], str]:
    """The compiled pipeline `kfchaos upload` sends (the committed file), else compiled now; and where from."""
    meta = experiment.metadata
    committed = root / "pipelines" / "compiled" / meta.name / f"{meta.version}.yaml"
    if committed.is_file():
        return [d for d in yaml.safe_load_all(committed.read_text()) if d], str(committed)
    from kfchaos.kfp.compile import compile_target, experiment_target

    sealed, _ = compile_target(experiment_target(root, experiment_path, experiment))
    return [d for d in yaml.safe_load_all(sealed.decode()) if d], "compiled now (not committed)"


def backend_tag(host: str, token: str | None) -> str:
    """The KFP backend's release tag from its healthz (API server: `tag_name`; through ml-pipeline-ui:
    `apiServerTagName`, kubeflow/pipelines frontend/server/handlers/healthz.ts)."""
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    last = ""
    for prefix in ("v2beta1", "v1beta1"):
        request = urllib.request.Request(f"{host.rstrip('/')}/apis/{prefix}/healthz", headers=headers)
        try:
            # HTTP_TIMEOUT bounds the whole exchange (connect and every read), not each read
            body = json.loads(netsafe.fetch(request, HTTP_TIMEOUT, MAX_ANSWER).body[:MAX_ANSWER] or b"{}")
        except (urllib.error.URLError, OSError, ValueError, RecursionError) as exc:
            last = str(getattr(exc, "reason", exc))[:200]
            continue
        tag = body.get("tag_name") or body.get("apiServerTagName") if isinstance(body, dict) else None
        if tag:
            return str(tag)
        last = "healthz answered without a version (tag_name)"
    raise OSError(last or "no answer")


def check_kfp(report: Report, options: Options, documents: list[Any], source: str) -> kfpcheck.Version | None:
    needed = kfpcheck.requirements(documents)
    need_text = ", ".join(f"{r.feature} >= {kfpcheck.show(r.minimum)}" for r in needed) or "nothing version-specific"
    name = "kfp backend version"
    if not options.kfp_host:
        report.add(name, Status.UNKNOWN, f"pipeline needs {need_text}; no --host given", "give --host URL")
        return None
    token = options.token or os.environ.get(TOKEN_ENV) or None
    try:
        tag = backend_tag(options.kfp_host, token)
    except OSError as exc:
        report.add(name, Status.UNKNOWN, f"cannot read the version from {options.kfp_host}: {exc}",
                   "check --host and the token")  # fmt: skip
        return None
    version = kfpcheck.parse_version(tag)
    if version is None:
        report.add(name, Status.UNKNOWN, f"backend reports {tag!r}, not a release; pipeline needs {need_text}",
                   "use a released KFP backend (2.15 or later)")  # fmt: skip
        return None
    lacking = kfpcheck.missing(version, needed)
    if lacking:
        report.add(
            name,
            Status.FAIL,
            f"backend {kfpcheck.show(version)} lacks: "
            + "; ".join(f"{r.feature} (>= {kfpcheck.show(r.minimum)}: {r.why})" for r in lacking),
            "upgrade KFP to 2.15 or later",
        )
    else:
        report.add(name, Status.PASS, f"backend {kfpcheck.show(version)}; pipeline ({source}) needs {need_text}")
    return version


def check_image(report: Report, documents: list[Any]) -> None:
    from kfchaos.kfp.image import DEFAULT_REPOSITORY

    images = sorted(
        {
            str(executor["container"]["image"])
            for doc in documents
            for executor in ((doc.get("deploymentSpec") or {}).get("executors") or {}).values()
            if isinstance(executor, dict) and "container" in executor
        }
    )
    name = "component image"
    if len(images) != 1:
        report.add(name, Status.FAIL, f"the pipeline names {len(images)} images: {images}", "kfchaos compile")
        return
    image = images[0]
    last = image.rpartition("/")[2]
    if "@sha256:" not in image and (":" not in last or last.endswith(":latest")):
        report.add(name, Status.FAIL, f"{image} is not pinned to a release tag or digest",
                   "set KFCHAOS_IMAGE=<registry>/kfchaos:<version> and recompile")  # fmt: skip
        return
    where = "published by the release workflow on each tag" if image.startswith(DEFAULT_REPOSITORY) else "yours"
    report.add(name, Status.PASS, f"{image} ({where}; the cluster must be able to pull it)")


def check_prometheus(report: Report, options: Options, experiment: Experiment, pods: list[Any]) -> None:
    from kfchaos.metrics.catalog import Scope
    from kfchaos.metrics.collect import prometheus_url
    from kfchaos.metrics.prometheus import PrometheusClient

    url = options.prometheus or prometheus_url(experiment)
    if not url:
        report.add("prometheus series", Status.UNKNOWN, "no Prometheus configured",
                   "give --prometheus or spec.baseline.capture.prometheus")  # fmt: skip
        return
    names = tuple(sorted(p.metadata.name for p in pods))
    try:  # names from the API server reach PromQL matchers: Kubernetes names only (kfchaos.metrics.catalog.Scope)
        scope = Scope(experiment.spec.target.namespace, names)
    except ValueError as exc:
        report.add("prometheus series", Status.UNKNOWN, str(exc), "the API server answered a name no pod can have")
        return
    gpu = any(
        "nvidia.com/gpu" in ((c.resources.limits if c.resources else None) or {})
        for p in pods
        for c in (p.spec.containers or [])
    )
    series.check_series(report, PrometheusClient(url, timeout=HTTP_TIMEOUT, retries=1, backoff=0.2), scope, gpu)


def kube_client(options: Options) -> Any:
    # the default kubeconfig when none is named, not in-cluster config: doctor runs where the operator is
    return kubeconnect.api_client(options.kubeconfig, options.kube_context, in_cluster=False)


def api_server_unreachable(api_client: Any) -> str | None:
    """One line when the API server does not answer at all (every other check would fail the same way, each with
    its own misleading fix); None when it answers, even with an error status (then the checks say what it is)."""
    from kubernetes.client import VersionApi
    from kubernetes.client.exceptions import ApiException

    host = api_client.configuration.host
    try:
        VersionApi(api_client).get_code(_request_timeout=(HTTP_TIMEOUT / 2, HTTP_TIMEOUT))
    except ApiException:
        return None  # it answered (401, 403, ...)
    except Exception as exc:  # urllib3's MaxRetryError, timeouts, TLS and DNS errors: no answer
        reason = getattr(exc, "reason", None) or exc
        return f"cannot reach the API server at {host} ({str(reason)[:200]}); check the kube context and the network"
    return None


def diagnose(options: Options, api_client: Any | None = None) -> Report:
    """Every check; a check that cannot run is UNKNOWN (never a pass)."""
    from kfchaos.faults.render import render_experiment

    report = Report()
    experiment = load_experiment(options.experiment)
    documents, source = pipeline_documents(options.root.resolve(), options.experiment, experiment)
    backend = check_kfp(report, options, documents, source)
    check_image(report, documents)
    if api_client is None:
        try:
            api_client = kube_client(options)
        except Exception as exc:
            report.no_cluster = f"no cluster configured ({str(exc)[:200]}); give --kubeconfig / --kube-context"
            return report
    unreachable = api_server_unreachable(api_client)
    if unreachable is not None:
        report.no_cluster = unreachable
        return report
    cluster.check_identity(report, api_client, options.kfp_namespace, options.service_account)
    cluster.check_permissions(report, api_client, experiment, options.kfp_namespace, options.service_account)
    chaos = [m for m in render_experiment(experiment, "doctor") if m["kind"].lower() in CHAOS_PLURALS]
    chaos_kinds = [m["kind"].lower() for m in chaos]
    if chaos_kinds:  # an experiment of traffic-side faults only needs no Chaos Mesh
        cluster.check_chaos_mesh(report, api_client, chaos_kinds, options.chaos_namespace)
        cluster.check_chaos_mesh_admission(report, api_client, chaos, options.chaos_namespace)
    pods = cluster.check_target(report, api_client, experiment)
    if chaos_kinds:
        cluster.check_chaos_mesh_placement(report, api_client, experiment, pods)
    cluster.check_secret(report, api_client, experiment, documents, options.kfp_namespace, backend)
    check_prometheus(report, options, experiment, pods)
    check_lora(report, experiment)
    return report


def check_lora(report: Report, experiment: Experiment) -> None:
    """A lora-adapter-churn fault needs vLLM's runtime LoRA endpoints (kfchaos.faults.lorachurn.readiness)."""
    from kfchaos.faults.lorachurn import churn_faults, readiness

    if not churn_faults(experiment):
        return
    ready, detail = readiness(experiment)
    fix = "start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment"
    if ready is None:
        fix = "run doctor where spec.target.endpoint answers (and with spec.target.auth's variable set)"
    status = Status.PASS if ready else (Status.FAIL if ready is False else Status.UNKNOWN)
    report.add("lora runtime updating", status, detail[:300], fix)
