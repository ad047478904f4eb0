"""A small model of a vLLM-style serving engine, for the embedded demo.

Not vLLM: a scheduler loop with the parts that decide whether a server survives long-context load.
- A KV cache of fixed capacity in blocks (`--block-size` tokens each), sized like vLLM from
  `--gpu-memory-utilization` x GPU memory minus the weights. Running requests hold blocks; decode needs a
  new block every `block_size` tokens.
- `--max-num-seqs` bounds the running batch; the rest wait (queueing shows up as TTFT).
- When a running request needs a block and none is free, the newest running request is preempted
  (recompute: its blocks are freed and it goes back to the front of the queue), counted like
  `vllm:num_preemptions_total`.
- `--enable-prefix-caching`: requests whose prompts share a prefix share its full blocks, and a finished
  request's prefixes stay cached (counted free) until their blocks are needed (prefixcache.py, after vLLM).
- Host memory: the process mirrors KV blocks in host memory (think CPU offload / pinned staging buffers)
  on top of a fixed base. With a high `--gpu-memory-utilization` the KV pool, and so its mirror, can outgrow
  the container memory limit: when that happens the engine reports OOM and the server process dies the way
  the kernel's OOM killer would end it. With the pool sized to fit under the limit it never does.
Step time = a fixed decode cost + a per-sequence cost + prefill time of the tokens newly prefilled.
Everything is deterministic for the same inputs, so tests can check the arithmetic exactly.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from kfchaos.demo.server.prefixcache import Chain, PrefixCache

if TYPE_CHECKING:
    from kfchaos.demo.server.lora import LoraState

GIB = 1024**3


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int = 256
    gpu_memory_utilization: float = 0.90
    block_size: int = 16
    enable_prefix_caching: bool = False
    gpu_memory_bytes: int = 24 * GIB  # the simulated accelerator
    weights_bytes: int = 14 * GIB
    kv_bytes_per_token: int = 32 * 1024
    host_base_bytes: int = 2 * GIB
    host_kv_mirror_ratio: float = 0.75  # host bytes per KV byte in use
    memory_limit_bytes: int = int(7.5 * GIB)  # the container's memory limit
    decode_step_s: float = 0.030
    decode_per_seq_s: float = 0.0002
    prefill_tokens_per_s: float = 80_000.0

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError("--gpu-memory-utilization must be in (0, 1]")
        if self.max_num_seqs < 1 or self.block_size < 1:
            raise ValueError("--max-num-seqs and --block-size must be positive")

    @property
    def num_gpu_blocks(self) -> int:
        free = self.gpu_memory_utilization * self.gpu_memory_bytes - self.weights_bytes
        if free <= 0:
            raise ValueError("--gpu-memory-utilization leaves no memory for the KV cache after the weights")
        return int(free // (self.block_size * self.kv_bytes_per_token))

    @property
    def block_bytes(self) -> int:
        return self.block_size * self.kv_bytes_per_token

    def host_bytes(self, used_blocks: int) -> int:
        return int(self.host_base_bytes + self.host_kv_mirror_ratio * used_blocks * self.block_bytes)

    @property
    def host_peak_bytes(self) -> int:
        """Host memory with the whole KV pool in use: above the limit means an OOM kill is possible."""
        return self.host_bytes(self.num_gpu_blocks)


@dataclass
class Sequence:
    request_id: str
    prompt_tokens: int
    max_tokens: int
    prefix_id: str | None = None
    prefix_tokens: int = 0
    # Every prefix of the prompt at a paragraph end, shortest first: (name, tokens up to it). Without it the
    # one prefix (prefix_id, prefix_tokens) is the chain.
    prefixes: tuple[tuple[str, int], ...] = ()
    generated: int = 0
    blocks: int = 0  # blocks held privately
    shared_prefix_blocks: int = 0  # blocks held in the shared prefix cache
    started: bool = False  # first token sent to the client (survives preemption)
    finished: bool = False
    arrival_step: int = 0
    lora: str | None = None  # the adapter the request names (kfchaos.demo.server.lora)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.generated


@dataclass
class StepResult:
    duration_s: float
    emitted: list[str] = field(default_factory=list)  # request ids that produced one token this step
    finished: list[str] = field(default_factory=list)
    first_tokens: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    oom: bool = False


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.total_blocks = config.num_gpu_blocks
        self.free_blocks = self.total_blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0
        self.prefix_cache = PrefixCache()
        self.steps = 0
        # Prompt tokens looked up in the prefix cache and found there, as vLLM's prefix_cache_queries / _hits
        # counters (tokens; vllm/v1/metrics/loggers.py). Counted only with prefix caching on, as vLLM does.
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.lora: LoraState | None = None  # --enable-lora: adapters, slots and their stalls (kfchaos.demo.server.lora)

    # ------------------------------------------------------------------ state

    @property
    def used_blocks(self) -> int:
        return self.total_blocks - self.free_blocks

    @property
    def kv_cache_usage(self) -> float:
        return self.used_blocks / self.total_blocks if self.total_blocks else 1.0

    @property
    def host_bytes(self) -> int:
        return self.config.host_bytes(self.used_blocks)

    def add(self, seq: Sequence) -> None:
        seq.arrival_step = self.steps
        self.waiting.append(seq)

    def abort(self, request_id: str) -> None:
        """A client went away: free what its request holds."""
        for seq in list(self.running):
            if seq.request_id == request_id:
                self._release(seq)
                self.running.remove(seq)
        self.waiting = deque(s for s in self.waiting if s.request_id != request_id)

    # ------------------------------------------------------------------ blocks

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)

    def _chain(self, seq: Sequence) -> Chain:
        """The prompt's prefixes as (name, full blocks up to it), each covering more full blocks than the one
        before (so every cached prefix holds blocks: at most as many prefixes as blocks); empty without prefix
        caching."""
        if not self.config.enable_prefix_caching:
            return ()
        prefixes = seq.prefixes
        if not prefixes and seq.prefix_id:
            prefixes = ((seq.prefix_id, seq.prefix_tokens),)
        chain: list[tuple[str, int]] = []
        for name, tokens in prefixes:
            blocks = min(tokens, seq.prompt_tokens) // self.config.block_size
            if blocks > (chain[-1][1] if chain else 0):
                chain.append((name, blocks))
        return tuple(chain)

    def _admit_cost(self, seq: Sequence) -> tuple[int, int, int]:
        """(new private blocks, blocks taken for the prefixes, prefix blocks found cached) to admit `seq` now."""
        chain = self._chain(seq)
        hit, take = self.prefix_cache.cost(chain)
        shared = chain[-1][1] if chain else 0
        return self._blocks_for(seq.prompt_tokens + 1) - shared, take, hit

    def _cached(self, change: Callable[[], object]) -> None:
        """Run a change of the prefix cache, keeping `free_blocks` = blocks neither private nor held there."""
        used = self.prefix_cache.used_blocks
        change()
        self.free_blocks += used - self.prefix_cache.used_blocks

    def _reclaim(self) -> None:
        """Evict cached-but-free prefixes, least recently freed first, until the free count covers them."""
        while self.prefix_cache.evictable_blocks > self.free_blocks and self.prefix_cache.evictable_blocks:
            short = self.prefix_cache.evictable_blocks - self.free_blocks
            self._cached(partial(self.prefix_cache.evict, short))

    def _release(self, seq: Sequence) -> None:
        self.free_blocks += seq.blocks
        seq.blocks = 0
        if seq.shared_prefix_blocks:
            chain = self._chain(seq)
            self._cached(partial(self.prefix_cache.release, chain))
        seq.shared_prefix_blocks = 0

    # ------------------------------------------------------------------ scheduling

    def step(self) -> StepResult:
        """One scheduler iteration: admit, prefill, decode one token for every running request."""
        config = self.config
        self.steps += 1
        result = StepResult(duration_s=0.0)
        prefill_tokens = 0
        skipped: list[Sequence] = []  # over --max-loras: they keep their place in the queue
        while self.waiting and len(self.running) < config.max_num_seqs:
            seq = self.waiting[0]
            if self.lora is not None and not self.lora.schedulable(seq.lora, (s.lora for s in self.running)):
                skipped.append(self.waiting.popleft())
                continue
            private, take, hit = self._admit_cost(seq)
            if private + take > self.free_blocks:
                break
            self.waiting.popleft()
            chain = self._chain(seq)
            if chain:
                self._cached(partial(self.prefix_cache.acquire, chain))
                seq.shared_prefix_blocks = chain[-1][1]
            self.free_blocks -= private
            seq.blocks = private
            self._reclaim()
            prefill_tokens += seq.prompt_tokens - hit * config.block_size
            if config.enable_prefix_caching:
                self.prefix_queries += seq.prompt_tokens
                self.prefix_hits += hit * config.block_size
            self.running.append(seq)
        self.waiting.extendleft(reversed(skipped))
        # Adapters read since the last step and those this batch activates into GPU slots stall the step.
        stall = self.lora.step_stall(s.lora for s in self.running) if self.lora is not None else 0.0
        if self.host_bytes > config.memory_limit_bytes:
            result.oom = True
            return result

        for seq in list(self.running):
            if seq not in self.running:
                continue  # preempted earlier in this step
            needed = self._blocks_for(seq.tokens + 1) - seq.blocks - seq.shared_prefix_blocks
            while needed > self.free_blocks:
                victim = self.running[-1]
                self._preempt(victim, result)
                if victim is seq:
                    break
            if seq not in self.running:
                continue
            if needed > 0:
                self.free_blocks -= needed
                seq.blocks += needed
                self._reclaim()
            if not seq.started:
                seq.started = True
                result.first_tokens.append(seq.request_id)
            seq.generated += 1
            result.emitted.append(seq.request_id)
            if seq.generated >= seq.max_tokens:
                seq.finished = True
                result.finished.append(seq.request_id)
        for seq in [s for s in self.running if s.finished]:
            self._release(seq)
            self.running.remove(seq)
        if self.host_bytes > config.memory_limit_bytes:
            result.oom = True
        result.duration_s = (
            config.decode_step_s
            + config.decode_per_seq_s * len(result.emitted)
            + prefill_tokens / config.prefill_tokens_per_s
            + stall
        )
        return result

    def _preempt(self, seq: Sequence, result: StepResult) -> None:
        # Recompute preemption: drop its KV and start it again from the prompt, keeping what it generated
        # (the client already has those tokens; they become part of the prompt to recompute).
        self._release(seq)
        self.running.remove(seq)
        seq.prompt_tokens += seq.generated
        seq.max_tokens -= seq.generated
        seq.generated = 0
        self.waiting.appendleft(seq)
        self.preemptions += 1
        result.preempted.append(seq.request_id)
