"""Whether `kfchaos demo --engine vllm` can run here, said before anything starts: the real engine installed, and a
memory cgroup to give it a container's limit (without one the kernel's OOM killer would act at the machine's memory,
not the container's, and the unsafe scenario could not show its kill)."""

from __future__ import annotations

from kfchaos.demo.stack import memcgroup
from kfchaos.demo.stack.vllmengine import EngineInstall, engine_home


def cannot_run() -> str | None:
    """Why the real engine's demo cannot run on this machine, or None when it can."""
    why = memcgroup.unavailable()
    if why is not None:
        return f"cannot make a memory cgroup for the engine's container limit: {why}; nothing was started"
    install = EngineInstall(engine_home())
    if not install.ready():
        return f"{install.missing()}; nothing was started"
    return None
