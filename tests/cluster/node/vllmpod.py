"""The real vLLM engine as a pod on the local cluster's real node (issue 43): the engine and the tiny model from the
host's own install (`make vllm`, kfchaos.demo.stack.vllmengine), mounted into the component image built here.

Why mounted and not an image of its own: the engine's virtualenv is 5.6 GB (torch, vLLM's CPU kernels). An image
would be another layer of that size for umoci to pack and containerd to import at every change of the lock, where
the node can read the very files the engine's tests and the demo run. The image is the component image (Debian
bookworm, as this machine is, so the virtualenv's libraries find the same libc); the virtualenv's interpreter is
the one it was made from (its pyvenv.cfg `home`), mounted at the same path, as is the engine's folder. They live
under /root, so the container runs as root. A GPU cluster runs vLLM's own image instead: docs/cluster.md.

The Deployment is manifests/demo-target's (its Service `vllm`, its labels, Prometheus's scrape annotations, its
readiness on /health), with vLLM's command line, the memory limit of the case and the engine's environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kfchaos.demo.stack.vllmengine import EngineInstall, EngineSettings, engine_environment
from tests.cluster.node.conftest import demo_target_objects

PORT = 8000


def interpreter_home(install: EngineInstall) -> Path:
    """The Python installation the engine's virtualenv was made from (pyvenv.cfg `home` is its bin/)."""
    for line in (install.home / "venv" / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return Path(value.strip()).parent
    raise AssertionError(f"no home in {install.home / 'venv' / 'pyvenv.cfg'}")


def engine_objects(
    image: str, install: EngineInstall, settings: EngineSettings, *, namespace: str, memory: str
) -> list[dict[str, Any]]:
    """The demo target's Deployment and Service, running the real engine with `settings` under `memory`."""
    command = [
        str(install.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(install.model_dir),
        "--host", "0.0.0.0", "--port", str(PORT), *settings.args(),
    ]  # fmt: skip
    mounts = {"engine": install.home, "interpreter": interpreter_home(install)}
    environment = {
        k: v for k, v in engine_environment().items() if k.startswith(("HF_", "TRANSFORMERS_", "VLLM_", "DO_NOT"))
    }
    environment["HOME"] = "/tmp"  # vLLM's and torch's caches: the mounts are read-only
    objects = demo_target_objects(image, namespace=namespace, command=tuple(command), memory=memory)
    for obj in objects:
        if obj["kind"] != "Deployment":
            continue
        obj["spec"]["replicas"] = 1
        # One engine at a time, as a single-replica model server is rolled out where two do not fit (a GPU, or here
        # two cores and the engines' ~2 GiB each): the old pod ends before the new one starts.
        obj["spec"]["strategy"] = {"type": "Recreate"}
        pod = obj["spec"]["template"]["spec"]
        pod["securityContext"] = {"runAsUser": 0, "runAsGroup": 0}
        # The Service is named `vllm`, so the kubelet's service links would set VLLM_PORT=tcp://<ip>:8000 in the
        # container, a variable vLLM reads as its own port (vllm/envs.py get_vllm_port refuses a URI there): off,
        # as vLLM's Kubernetes guide says.
        pod["enableServiceLinks"] = False
        pod["volumes"] = [
            {"name": name, "hostPath": {"path": str(path), "type": "Directory"}} for name, path in mounts.items()
        ]
        # vLLM's engine and its worker share a 160 MiB ring buffer in /dev/shm
        # (vllm/distributed/device_communicators/shm_broadcast.py check_shm_free_space); a container's own is 64 MiB.
        pod["volumes"].append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Mi"}})
        container = pod["containers"][0]
        container["volumeMounts"] = [
            {"name": name, "mountPath": str(path), "readOnly": True} for name, path in mounts.items()
        ] + [{"name": "dshm", "mountPath": "/dev/shm"}]
        container["env"] = [{"name": k, "value": v} for k, v in sorted(environment.items())]
        container["resources"]["requests"]["memory"] = memory
        # The engine imports torch and vLLM and profiles its KV cache before /health answers: a minute or two.
        container["readinessProbe"] = {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 2,
            "failureThreshold": 3,
        }
    return objects
