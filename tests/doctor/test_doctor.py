"""`kfchaos doctor` against loopback servers: the Kubernetes API (access reviews decided by manifests/ plus
KFP's own RBAC), the KFP API (its healthz version) and a real Prometheus scraping a loopback exporter. A
healthy cluster passes every check it can; each blocker of issue 12, set up on purpose, is reported."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kfchaos.cli import main
from kfchaos.demo.stack.ports import free_port
from kfchaos.doctor import kfpcheck, series
from kfchaos.doctor.diagnose import Options, diagnose
from kfchaos.doctor.model import Report, Status
from kfchaos.metrics.catalog import Scope
from tests.conftest import ROOT
from tests.manifests.test_manifests import MANIFESTS, kustomize_build
from tests.support.kfpapi import KfpApiServer
from tests.support.kubeapi import KubeApiServer, kubernetes_client
from tests.support.prometheus import PrometheusServer, serve_text_exporter

EXPERIMENT = ROOT / "experiments/vllm-network-delay.yaml"
NAMESPACE = "llm-serving"
PODS = ("vllm-0", "vllm-1")
UPSTREAM_KFP_RBAC = [
    d for d in yaml.safe_load_all((ROOT / "tests/manifests/data/kfp-pipeline-runner-role.yaml").read_text()) if d
]
# Placement rules come from kfchaos.faults.clustercheck (the chaosmesh area); until it is merged they are
# UNKNOWN, which the doctor counts as not passing.
PERMISSION_ROWS = (
    "permissions kubeflow (KFP runtime)",
    "permissions llm-serving (faults)",
    "permissions cluster (cluster-wide)",
)
PLACEMENT = {"chaos-daemon on target nodes", "namespace filter annotation", "chaos mesh placement"}


@dataclass
class Live:
    prometheus: str
    gpu_prometheus: str


def _registry(exported: bool) -> CollectorRegistry:
    """What a scraped vLLM pod, cAdvisor, kube-state-metrics and DCGM give Prometheus for the target pods.
    `exported`: DCGM's pod labels renamed exported_* by a scrape without honor_labels."""
    registry = CollectorRegistry()
    labels = ["namespace", "pod"]
    for metric in (
        "vllm:e2e_request_latency_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
    ):
        histogram = Histogram(metric, metric, labels, registry=registry)
        for pod in PODS:
            histogram.labels(NAMESPACE, pod).observe(0.2)
    gauges = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]
    for metric in gauges:
        gauge = Gauge(metric, metric, labels, registry=registry)
        for pod in PODS:
            gauge.labels(NAMESPACE, pod).set(1)
    # vLLM v1 registers the prefix-cache counters unconditionally in PrometheusStatLogger.__init__
    # (vllm-project/vllm vllm/v1/metrics/loggers.py: vllm:prefix_cache_queries, vllm:prefix_cache_hits).
    counters = (
        "vllm:num_preemptions",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
        "container_oom_events",
        "kube_pod_container_status_restarts",
    )
    for metric in counters:
        counter = Counter(metric, metric, labels, registry=registry)
        for pod in PODS:
            counter.labels(NAMESPACE, pod).inc(0)
    http = Counter("http_requests", "http", [*labels, "status"], registry=registry)
    for pod in PODS:
        http.labels(NAMESPACE, pod, "2xx").inc()
    Gauge("kube_deployment_status_observed_generation", "gen", ["namespace", "deployment"], registry=registry).labels(
        NAMESPACE, "vllm"
    ).set(3)
    dcgm_labels = ["exported_namespace", "exported_pod"] if exported else labels
    for metric in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL"):
        gauge = Gauge(metric, metric, dcgm_labels, registry=registry)
        for pod in PODS:
            gauge.labels(NAMESPACE, pod).set(1000)
    return registry


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """Two real Prometheus servers: DCGM labelled as the queries expect, and DCGM relabelled exported_pod."""
    servers = []
    urls = []
    try:
        for exported in (False, True):
            port = free_port()
            servers.append(serve_text_exporter(_registry(exported), port)[0])
            prometheus = PrometheusServer(
                tmp_path_factory.mktemp("prom") / "data", scrape_targets=[f"127.0.0.1:{port}"]
            ).__enter__()
            servers.append(prometheus)
            prometheus.wait_for("DCGM_FI_DEV_GPU_UTIL")
            prometheus.wait_for("kube_deployment_status_observed_generation")
            urls.append(prometheus.url)
        yield Live(*urls)
    finally:
        for server in servers:
            if isinstance(server, PrometheusServer):
                server.__exit__(None, None, None)
            else:
                server.shutdown()  # type: ignore[attr-defined]


def healthy(server: KubeApiServer, gpu: bool = False) -> None:
    """A cluster set up as README "Running on your cluster" says: manifests/ applied next to KFP standalone's
    RBAC, Chaos Mesh 2.7, the Secret in the KFP namespace, target pods running."""
    server.rbac = kustomize_build(MANIFESTS) + copy.deepcopy(UPSTREAM_KFP_RBAC)
    (namespace,) = [o for o in server.rbac if o["kind"] == "Namespace"]
    server.rbac.remove(namespace)
    for account in [o for o in server.rbac if o["kind"] == "ServiceAccount"]:
        server.add_object("serviceaccounts", account)
    namespace["metadata"].setdefault("labels", {})["app.kubernetes.io/instance"] = "kfchaos"  # Argo CD tracks it
    server.add_object("namespaces", namespace)
    for index, pod in enumerate(PODS):
        body = server.add_pod(NAMESPACE, pod, {"app.kubernetes.io/name": "vllm"}, node=f"gpu-{index}")
        if gpu:
            body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    server.add_object(
        "deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "chaos-controller-manager", "namespace": "chaos-mesh"},
            "spec": {
                "selector": {"matchLabels": {"app": "cm"}},
                "template": {
                    "metadata": {"labels": {"app": "cm"}},
                    "spec": {"containers": [{"name": "m", "image": "ghcr.io/chaos-mesh/chaos-mesh:v2.7.2"}]},
                },
            },
        },
    )
    add_secret(server, "kubeflow")


def add_secret(server: KubeApiServer, namespace: str, token: str = "s3cret") -> None:
    data = {"token": base64.b64encode(token.encode()).decode()}
    server.add_object(
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "kfchaos-target", "namespace": namespace},
            "data": data,
        },
    )


def doctor(server: KubeApiServer, kfp: KfpApiServer, prometheus: str, **changes: Any) -> Report:
    options = Options(experiment=EXPERIMENT, root=ROOT, kfp_host=kfp.url, prometheus=prometheus)
    return diagnose(replace(options, **changes), api_client=kubernetes_client(server.url))


def by_name(report: Report) -> dict[str, Any]:
    return {c.name: c for c in report.checks}


def failing(report: Report) -> dict[str, str]:
    return {c.name: c.detail for c in report.checks if c.status is not Status.PASS and c.name not in PLACEMENT}


def test_a_healthy_cluster_passes_every_check(live: Live) -> None:
    with KubeApiServer() as server, KfpApiServer(tag_name="2.15.0") as kfp:
        healthy(server)
        report = doctor(server, kfp, live.prometheus)
    assert failing(report) == {}
    names = by_name(report)
    assert names["kfp backend version"].detail.startswith("backend 2.15.0")
    assert "optional Secret as env >= 2.15.0" in names["kfp backend version"].detail
    # The pipeline has no dsl.OneOf since it runs on KFP 2.1.0
    # (kfchaos/kfp/pipelines/chaos_experiment.py): no such need.
    assert "OneOf" not in names["kfp backend version"].detail
    for name in PERMISSION_ROWS:
        assert names[name].status is Status.PASS
    assert names["series vllm:e2e_request_latency_seconds_bucket"].status is Status.PASS
    assert not any(n.startswith("series DCGM") for n in names)  # no pod requests a GPU
    # The Chaos Mesh placement rules (kfchaos.faults.clustercheck): chaos-daemon runs on every node of the
    # loopback cluster (untainted), and the namespace filter is off.
    assert names["chaos-daemon on target nodes"].status is Status.PASS
    assert names["namespace filter annotation"].status is Status.PASS
    assert report.exit_code == 0


def test_an_old_kfp_backend_is_reported_with_what_it_lacks(live: Live) -> None:
    with KubeApiServer() as server, KfpApiServer(tag_name="2.5.0") as kfp:
        healthy(server)
        report = doctor(server, kfp, live.prometheus)
    check = by_name(report)["kfp backend version"]
    assert check.status is Status.FAIL and "optional Secret as env (>= 2.15.0" in check.detail
    assert "OneOf" not in check.detail  # the pipeline has none
    assert report.exit_code == 1


def test_the_run_identity_without_kfps_runner_role_fails_every_task(live: Live) -> None:
    with KubeApiServer() as server, KfpApiServer() as kfp:
        healthy(server)
        server.rbac = [o for o in server.rbac if o["metadata"]["name"] != "kfchaos-runner-pipeline-runner"]
        report = doctor(server, kfp, live.prometheus)
    assert set(failing(report)) == {"permissions kubeflow (KFP runtime)"}
    detail = failing(report)["permissions kubeflow (KFP runtime)"]
    assert "system:serviceaccount:kubeflow:kfchaos-runner may not: get configmaps/kfp-launcher" in detail
    assert "create workflowtaskresults.argoproj.io" in detail


def test_a_missing_service_account_is_reported_though_rbac_would_allow_it(live: Live) -> None:
    with KubeApiServer() as server, KfpApiServer() as kfp:
        healthy(server)
        server._store.pop(("serviceaccounts", "kubeflow", "kfchaos-runner"))
        report = doctor(server, kfp, live.prometheus)
    assert set(failing(report)) == {"run identity"}
    assert "no ServiceAccount kubeflow/kfchaos-runner" in failing(report)["run identity"]


def test_runs_as_kfps_default_identity_cannot_inject(live: Live) -> None:
    # What nightly runs did before schedules named the service account.
    with KubeApiServer() as server, KfpApiServer() as kfp:
        healthy(server)
        server.add_object("serviceaccounts", {"metadata": {"name": "pipeline-runner", "namespace": "kubeflow"}})
        report = doctor(server, kfp, live.prometheus, service_account="pipeline-runner")
    assert set(failing(report)) == {"permissions llm-serving (faults)", "permissions cluster (cluster-wide)"}
    assert "create networkchaos.chaos-mesh.org" in failing(report)["permissions llm-serving (faults)"]


def test_a_secret_in_the_target_namespace_instead_of_where_the_pods_run_is_reported(live: Live) -> None:
    with KubeApiServer() as server, KfpApiServer() as kfp:
        healthy(server)
        server._store.pop(("secrets", "kubeflow", "kfchaos-target"))
        add_secret(server, NAMESPACE)  # what the README used to say
        report = doctor(server, kfp, live.prometheus)
        assert set(failing(report)) == {"target secret"}
        check = by_name(report)["target secret"]
        assert "kubeflow/kfchaos-target missing" in check.detail and "KFCHAOS_TARGET_TOKEN is empty" in check.detail
        assert check.fix.startswith("kubectl -n kubeflow create secret generic kfchaos-target")
        add_secret(server, "kubeflow", token="")
        assert "no non-empty key 'token'" in by_name(doctor(server, kfp, live.prometheus))["target secret"].detail


def test_a_namespace_argo_cd_may_prune_is_reported(live: Live) -> None:
    with KubeApiServer() as server, KfpApiServer() as kfp:
        healthy(server)
        stored = server._store[("namespaces", "", NAMESPACE)].body
        del stored["metadata"]["annotations"]["argocd.argoproj.io/sync-options"]
        report = doctor(server, kfp, live.prometheus)
    assert set(failing(report)) == {"argo cd prune"}
    assert "without Prune=false and Delete=false" in failing(report)["argo cd prune"]


def test_missing_chaos_mesh_and_forbidden_access_reviews_are_not_passes(live: Live) -> None:
    with KubeApiServer(installed=[]) as server, KfpApiServer() as kfp:
        healthy(server)
        server.forbid("create", "subjectaccessreviews")
        report = doctor(server, kfp, live.prometheus)
    names = by_name(report)
    assert (
        names["chaos mesh installed"].status is Status.FAIL and "networkchaos" in names["chaos mesh installed"].detail
    )
    assert names["permissions kubeflow (KFP runtime)"].status is Status.UNKNOWN
    assert "HTTP 403" in names["permissions kubeflow (KFP runtime)"].detail
    assert report.exit_code == 1


def test_dcgm_series_relabelled_exported_pod_are_reported_with_the_relabel_fix(live: Live) -> None:
    with KubeApiServer() as server, KfpApiServer() as kfp:
        healthy(server, gpu=True)
        good = doctor(server, kfp, live.prometheus)
        relabelled = doctor(server, kfp, live.gpu_prometheus)
    assert by_name(good)["series DCGM_FI_DEV_FB_USED"].status is Status.PASS
    assert set(failing(relabelled)) == {"series DCGM_FI_DEV_FB_USED", "series DCGM_FI_DEV_FB_FREE",
                                        "series DCGM_FI_DEV_GPU_UTIL"}  # fmt: skip
    check = by_name(relabelled)["series DCGM_FI_DEV_FB_USED"]
    assert "exported_pod" in check.detail and "honorLabels: true" in check.fix


def test_cli_json_and_exit_code(live: Live, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with KubeApiServer() as server, KfpApiServer(tag_name="2.4.1") as kfp:
        healthy(server)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "loop", "cluster": {"server": server.url}}],
                    "users": [{"name": "admin", "user": {"token": "t"}}],
                    "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "admin"}}],
                    "current-context": "loop",
                }
            )
        )
        args = ["doctor", "--experiment", str(EXPERIMENT), "--root", str(ROOT), "--host", kfp.url,
                "--kubeconfig", str(kubeconfig), "--kube-context", "loop", "--prometheus", live.prometheus]  # fmt: skip
        assert main([*args, "--json"]) == 1
        out = json.loads(capsys.readouterr().out)
        assert out["ok"] is False
        rows = {c["name"]: c for c in out["checks"]}
        assert rows["kfp backend version"]["status"] == "FAIL"
        assert rows["permissions llm-serving (faults)"]["status"] == "PASS"
        assert main(args) == 1
        table = capsys.readouterr().out
        assert table.splitlines()[0].split() == ["CHECK", "STATUS", "DETAIL", "/", "FIX"]
        assert "fix: upgrade KFP to 2.15 or later" in table


def test_requirements_are_read_from_the_compiled_pipeline() -> None:
    documents = list(yaml.safe_load_all((ROOT / "pipelines/compiled/vllm-network-delay/1.0.0.yaml").read_text()))
    assert kfpcheck.requirements(documents) == [kfpcheck.ONE_OF, kfpcheck.OPTIONAL_SECRET]
    replay = list(yaml.safe_load_all((ROOT / "pipelines/compiled/vllm-replica-kill/1.0.0.yaml").read_text()))
    needs = kfpcheck.requirements(replay)
    assert kfpcheck.ONE_OF in needs
    assert kfpcheck.parse_version("v2.15.0") == (2, 15, 0) and kfpcheck.parse_version("dev") is None
    assert kfpcheck.parse_version("2.15.0-rc.1") == (2, 15, 0)


def test_catalog_series_keep_only_the_scope_matchers() -> None:
    found = {s.metric: s for s in series.catalog_series(Scope(NAMESPACE, PODS))}
    # Selected by a termination reason: exists only after one; the restart counter stands in for them.
    assert "kube_pod_container_status_last_terminated_reason" not in found
    assert "kube_pod_container_status_terminated_reason" not in found
    assert "kube_pod_container_status_restarts_total" in found
    assert found["http_requests_total"].selector == 'namespace="llm-serving",pod=~"vllm\\\\-0|vllm\\\\-1"'
    assert found["DCGM_FI_DEV_FB_USED"].gpu and not found["vllm:kv_cache_usage_perc"].gpu


def test_gpu_nodes_tainted_without_chaos_daemon_tolerations_fail_placement(live: Live) -> None:
    """Issue 12 item 7 on a loopback cluster set up to have it: GPU nodes tainted nvidia.com/gpu and the Helm
    default (no chaos-daemon tolerations), so the network fault would fail with 'cannot find daemonIP'."""
    with KubeApiServer() as server, KfpApiServer(tag_name="2.15.0") as kfp:
        healthy(server)
        taints = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
        for index in range(len(PODS)):
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"gpu-{index}"},
                "spec": {"taints": taints},
            }
            server.add_object("nodes", node)
        report = doctor(server, kfp, live.prometheus)
    check = by_name(report)["chaos-daemon on target nodes"]
    assert check.status is Status.FAIL and "nvidia.com/gpu" in check.detail and "chaosDaemon.tolerations" in check.fix
    assert report.exit_code == 1
