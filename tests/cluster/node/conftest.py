"""The real node of the local cluster (docs/cluster.md, "The real node"): what its end-to-end tests share.

`llm_target` runs the demo LLM server as manifests/demo-target deploys it, on the real node, from the component
image built from this working tree, behind its Service; `kfchaos()` runs the installed command with the cluster's
image and KFP host; `scratch_root()` is a copy of the sources an experiment is compiled and uploaded from (as
scripts/e2e-kind.sh does), so the checkout's compiled pipelines and lock file stay as committed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes import client as k8s

from tests.cluster.conftest import ROOT, RealCluster
from tests.cluster.test_rbac_real import apply_all
from tests.manifests.test_manifests import MANIFESTS, kustomize_build

TARGET_NAMESPACE = "llm-serving"  # manifests/overlays/llm-serving
MODEL = "demo/llama-3-8b-sim"  # the demo server's model name
NODE_LABEL = "kfchaos.io/real-node"
NODE_TOLERATION = {"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
KFCHAOS = Path(sys.executable).parent / "kfchaos"


@dataclass(frozen=True)
class NodeCluster:
    cluster: RealCluster
    values: dict[str, str]  # <state>/env

    @property
    def kfp_host(self) -> str:
        return self.values["KFP_HOST"]

    @property
    def image(self) -> str:
        return self.values["KFCHAOS_IMAGE"]

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.cluster.admin_kubeconfig),
            "KFCHAOS_IMAGE": self.image,
            "PROMETHEUS_URL": self.cluster.prometheus_url,
            **{k: v for k, v in self.values.items() if k.startswith("KFCHAOS_ARTIFACT_")},
        }


def _read_env(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        values[key] = value
    return values


@pytest.fixture(scope="session")
def node_cluster(real_cluster: RealCluster) -> NodeCluster:
    values = _read_env(real_cluster.env.env_file)
    if "KFCHAOS_NODE" not in values:
        pytest.fail(f"the cluster at {real_cluster.env.state} has no real node (started before the node existed?)")
    admin = real_cluster.api_client()
    objects = kustomize_build(MANIFESTS)
    apply_all(admin, [o for o in objects if o["kind"] == "Namespace"])
    apply_all(admin, [o for o in objects if o["kind"] != "Namespace"])
    return NodeCluster(real_cluster, values)


def eventually(what: str, check: Callable[[], Any], timeout: float = 180.0, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as error:  # the condition's own failure, shown if it never comes true
            last = error
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


def demo_target_objects(
    image: str,
    *,
    namespace: str = TARGET_NAMESPACE,
    replicas: int = 1,
    command: tuple[str, ...] = (),
    memory: str = "512Mi",
) -> list[dict[str, Any]]:
    """manifests/demo-target on the real node: the image built here, the node's toleration and selector (and, when
    given, another server command line)."""
    objects = [o for o in yaml.safe_load_all((MANIFESTS / "demo-target" / "deployment.yaml").read_text()) if o]
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
        if obj["kind"] != "Deployment":
            continue
        obj["spec"]["replicas"] = replicas
        pod = obj["spec"]["template"]["spec"]
        pod["tolerations"] = [NODE_TOLERATION]
        pod["nodeSelector"] = {NODE_LABEL: "true"}
        container = pod["containers"][0]
        container["image"] = image
        container["command"] = list(command or container["command"])
        container["resources"]["limits"]["memory"] = memory
        container["resources"]["requests"]["cpu"] = "100m"
        container["resources"]["requests"]["memory"] = "128Mi"
    return objects


@dataclass(frozen=True)
class Target:
    cluster_ip: str
    port: int

    @property
    def url(self) -> str:
        """The Service's address, reachable from the host (the node routes the Service range)."""
        return f"http://{self.cluster_ip}:{self.port}"


def deploy_target(
    node: NodeCluster,
    namespace: str = TARGET_NAMESPACE,
    objects: list[dict[str, Any]] | None = None,
    rollout_timeout: float = 240,
    **options: Any,
) -> Target:
    """The demo target (or `objects` of its shape: a Deployment `demo-llm` behind the Service `vllm`) rolled out on
    the real node and answering through its Service."""
    admin = node.cluster.api_client()
    apply_all(admin, objects or demo_target_objects(node.image, namespace=namespace, **options))
    apps = k8s.AppsV1Api(admin)

    def rolled_out() -> bool:
        d = apps.read_namespaced_deployment("demo-llm", namespace)
        status = d.status
        return bool(
            status.observed_generation == d.metadata.generation
            and (status.updated_replicas or 0) == d.spec.replicas
            and (status.ready_replicas or 0) == d.spec.replicas
            and (status.replicas or 0) == d.spec.replicas
        )

    eventually("the demo target to be rolled out on the real node", rolled_out, timeout=rollout_timeout)
    service = k8s.CoreV1Api(admin).read_namespaced_service("vllm", namespace)
    target = Target(service.spec.cluster_ip, service.spec.ports[0].port)
    eventually("the demo target to answer through its Service", lambda: _answers(target), timeout=120, every=2)
    return target


def _answers(target: Target) -> bool:
    """Ready pods are not yet a Service that answers: kube-proxy programs the Service's rules after the endpoints
    change, and until then a connection to the cluster IP waits for SYN retries (a CI run's warm-up timed out so)."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback and node routes: no proxy
    try:
        with direct.open(f"{target.url}/health", timeout=3) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def remove_target(node: NodeCluster, namespace: str = TARGET_NAMESPACE) -> None:
    """The demo target gone with its pods: the rest of the cluster suite uses llm-serving with KWOK's pods only."""
    admin = node.cluster.api_client()
    core = k8s.CoreV1Api(admin)
    k8s.AppsV1Api(admin).delete_namespaced_deployment("demo-llm", namespace, propagation_policy="Foreground")
    core.delete_namespaced_service("vllm", namespace)
    eventually(
        "the demo target's pods gone",
        lambda: not core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/name=vllm").items,
        timeout=120,
    )


@pytest.fixture(scope="module")
def llm_target(node_cluster: NodeCluster) -> Iterator[Target]:
    yield deploy_target(node_cluster, replicas=2)
    remove_target(node_cluster)


def scratch_root(tmp: Path, experiments: dict[str, str]) -> Path:
    """A copy of what `kfchaos compile/upload` read, with `experiments` (file name -> text) as its only ones."""
    root = tmp / "root"
    root.mkdir()
    for name in ("components", "pipelines", "baselines", "traffic"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(root / "pipelines" / "compiled")
    (root / "pipelines" / "versions.lock.yaml").unlink()
    (root / "experiments").mkdir()
    for name, text in experiments.items():
        (root / "experiments" / name).write_text(text)
    return root


def kfchaos(
    node: NodeCluster,
    *args: str,
    cwd: Path | None = None,
    timeout: float = 1800,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {**node.env(), **(extra_env or {})}
    done = subprocess.run(
        [str(KFCHAOS), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False
    )
    print(f"$ kfchaos {' '.join(args)}\n-> exit {done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}")
    return done


def experiment_text(
    name: str,
    namespace: str,
    faults: list[dict[str, Any]],
    traffic: dict[str, Any],
    slo: dict[str, Any],
    *,
    version: str = "1.0.0",
    timeout: str = "10s",
    baseline: dict[str, Any] | None = None,
) -> str:
    """An experiment against the demo target in `namespace` (its Service `vllm`, its pods' labels). Without a
    `baseline` it names a file that is not there: such a run judges what its fault does, not drift (p99_drift
    INCONCLUSIVE). A busy 2-core node: the replayer's send lag is judged against 250 ms, as the demo's is."""
    return yaml.safe_dump(
        {
            "apiVersion": "kfchaos.io/v1alpha1",
            "kind": "Experiment",
            "metadata": {"name": name, "version": version, "owner": "kfchaos-tests", "description": "real node"},
            "spec": {
                "target": {
                    "namespace": namespace,
                    "selector": {"labels": {"app.kubernetes.io/name": "vllm"}},
                    "endpoint": f"http://vllm.{namespace}.svc:8000",
                    "api": "openai-completions",
                    "model": MODEL,
                    "timeout": timeout,
                },
                "traffic": {"max_send_lag_p99": "250ms", **traffic},
                "faults": faults,
                "slo": slo,
                "baseline": baseline or {"file": "../baselines/none.yaml"},
                "safety": {"max_pod_percent": "100%", "max_fault_duration": "30m"},
            },
        },
        sort_keys=False,
    )


def baseline_section(name: str, prometheus: str) -> dict[str, Any]:
    """An experiment's `spec.baseline`: `baselines/<name>.yaml`, captured from the cluster's Prometheus as the run's
    pods dial it (by its Service name), over the minutes the target has existed."""
    return {
        "file": f"../baselines/{name}.yaml",
        "capture": {
            "prometheus": prometheus,
            "days": 1,
            "step": "10s",
            "short_history": "local cluster: the target was deployed minutes before the run",
            "detect_releases": False,
        },
    }


async def _warm(url: str, seconds: float, rate: float, model: str) -> tuple[int, int]:
    """Fault-free traffic, so Prometheus holds the target's history before `baseline capture` reads it. Returns
    (sent, answered with 200): one slow or failed request is counted, not raised."""
    sent = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def one() -> bool:
            body = {"model": model, "prompt": "hello " * 200, "max_tokens": 16}
            try:
                async with session.post(f"{url}/v1/completions", json=body) as answer:
                    await answer.read()
                    return answer.status == 200
            except (aiohttp.ClientError, TimeoutError):
                return False

        tasks = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            tasks.append(asyncio.create_task(one()))
            sent += 1
            await asyncio.sleep(1 / rate)
        answered = sum(await asyncio.gather(*tasks))
    return sent, answered


def make_baseline(node: NodeCluster, target: Target, experiment: Path, model: str = MODEL) -> None:
    """`experiment`'s baseline as a team makes one: fault-free traffic (40 s at 10 req/s) for Prometheus to keep,
    `kfchaos baseline capture` of that history, then `kfchaos baseline control` (a fault-free replay of the
    experiment's own traffic: the drift reference at each stage's rate)."""
    sent, answered = asyncio.run(_warm(target.url, 40, 10, model))
    assert answered >= 0.95 * sent, f"the fault-free warm-up: {answered} of {sent} requests answered 200"
    time.sleep(3)  # a scrape after the last request
    exp = str(experiment)
    done = kfchaos(node, "baseline", "capture", "--experiment", exp, "--prometheus", node.cluster.prometheus_url)
    assert done.returncode == 0, done.stderr
    done = kfchaos(node, "baseline", "control", "--experiment", exp, "--target", target.url)
    assert done.returncode == 0, done.stderr


def run_compiled(node: NodeCluster, root: Path, name: str, *, wait: str = "25m") -> subprocess.CompletedProcess[str]:
    """`experiments/<name>.yaml` as a team runs it on the cluster: `kfchaos compile`, `upload` of its pipeline as a
    new version, then `run --wait` on KFP's API server (every step a real pod, as `kfchaos-runner`), the verdict
    read back from the run's object store."""
    experiment = root / "experiments" / f"{name}.yaml"
    assert kfchaos(node, "compile", "--root", str(root)).returncode == 0
    assert kfchaos(node, "upload", name, "--host", node.kfp_host, "--root", str(root)).returncode == 0
    return kfchaos(
        node,
        "run", str(experiment), "--root", str(root), "--host", node.kfp_host,
        "--service-account", "kfchaos-runner", "--wait", "--wait-timeout", wait, "--poll", "5s",
        "--artifact-store", node.values["KFCHAOS_ARTIFACT_STORE"],
        timeout=1800,
    )  # fmt: skip
