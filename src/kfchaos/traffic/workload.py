"""Synthetic traffic as production sends it: conversations, shared system prompts, tenants, fitted lengths.

What kubernetes-sigs/inference-perf and vllm-project/guidellm generate, as an open-loop stream in step with a
rate and the stage ramp:
- **Shared system prompts**: a few long system prompts, each shared by many conversations (inference-perf
  `inference_perf/datagen/shared_prefix_datagen.py`: `num_groups` prompts of `system_prompt_len` tokens;
  guidellm `src/guidellm/dataset/synthetic.py`: `prefix_buckets` of `prefix_count` x `prefix_tokens`).
- **Multi-turn conversations**: turn k sends the system prompt, turns 1..k-1 and a new question
  (kfchaos.traffic.conversation); turns follow each other after exponential think times.
  inference-perf's `enable_multi_turn_chat` (`inference_perf/apis/user_session.py`) does the same closed
  loop; here the history is synthetic so the replay stays open loop.
- **Tenants / LoRA mix**: each conversation belongs to one tenant drawn by weight (inference-perf
  `load.lora_traffic_split`: each session uses one adapter for all its turns), which names its model (a
  LoRA adapter), may have its own system prompts and lengths, and is tagged with `tenant_header`.
- **Fitted lengths and arrivals**: with `fit_from`, kfchaos.traffic.fit fills the rate, lengths, turns
  and system prompts from a recording; `arrival: recorded` resamples its inter-arrival gaps.

Rate: `rate` is requests per second at 100 %. Conversations start at rate / E[turns] (E over the turns
distribution as drawn: rounded and clipped, computed exactly), so requests arrive at `rate` on average. The
stream starts in steady state: conversations are started from a warm-up time before 0 (long enough that the
turns missing at 0 are under 0.1 % of the rate) and only turns at or after 0 are sent. A stage at p % keeps
the conversations whose hash is below p (kfchaos.traffic.sampling on `Conversation.key`), whole.

Deterministic for a seed: one generator, drawn in a fixed order. Memory: the conversations in progress.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kfchaos.spec import Synthetic, SystemPrompts, TokenLengths
from kfchaos.traffic.conversation import Conversation, Turn, history
from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.synthetic import CHUNK, arrival_gaps, daily_factor, draw_lengths

MISSING_RATE = 1e-3  # share of the rate the warm-up may miss at time 0
MAX_WARMUP = 86400.0
# Conversations started before 0 at most: the warm-up is generated and thrown away, so a huge rate with long
# think times (1e6 req/s, 24 h) would otherwise spend hours before the first request. Past it the first
# minutes run below the rate, as they would with no warm-up.
MAX_WARMUP_CONVERSATIONS = 200_000  # about 2 s of generation


def expected_length(spec: TokenLengths) -> float:
    """E[clip(rint(X), min, max)] for X drawn as kfchaos.traffic.synthetic.draw_lengths draws it."""
    lo, hi = spec.min, spec.max
    if spec.distribution == "fixed" or (spec.stddev == 0 and spec.distribution != "empirical"):
        return float(np.clip(np.rint(spec.mean), lo, hi))
    if spec.distribution == "empirical":
        # Inverse CDF by linear interpolation of the quantiles: integrate over a fine grid of u.
        u = (np.arange(200_000) + 0.5) / 200_000
        q = np.asarray(spec.quantiles, dtype=np.float64)
        values = np.interp(u * (len(q) - 1), np.arange(len(q)), q)
        return float(np.clip(np.rint(values), lo, hi).mean())
    from scipy import stats  # here, not at import, and only when needed: the import takes ~1 s

    if spec.distribution == "uniform":
        half = spec.stddev * math.sqrt(3.0)
        dist = stats.uniform(spec.mean - half, 2 * half)
    elif spec.distribution == "normal":
        dist = stats.norm(spec.mean, spec.stddev)
    else:
        sigma2 = math.log1p((spec.stddev / spec.mean) ** 2)
        dist = stats.lognorm(math.sqrt(sigma2), 0, math.exp(math.log(spec.mean) - sigma2 / 2))
    if hi - lo > 100_000:  # lengths, not turns: a Monte Carlo estimate is close enough for a mean
        rng = np.random.Generator(np.random.PCG64(0))
        return float(draw_lengths(rng, spec, 200_000).mean())
    k = np.arange(lo, hi + 1, dtype=np.float64)
    # P(rint(X) = k) = F(k + 0.5) - F(k - 0.5); everything below lo (above hi) is clipped onto it.
    upper = dist.cdf(k + 0.5)
    lower = dist.cdf(k - 0.5)
    pmf = upper - lower
    pmf[0] = upper[0]
    pmf[-1] = 1.0 - lower[-1]
    return float((k * pmf).sum())


def turns_survival(spec: TokenLengths) -> np.ndarray:
    """P(T >= j) for j = 1..max, by drawing (exact enough for the warm-up length, which only bounds a tail)."""
    rng = np.random.Generator(np.random.PCG64(1))
    turns = draw_lengths(rng, spec, 100_000)
    counts = np.bincount(turns, minlength=spec.max + 2)
    return 1.0 - np.cumsum(counts)[:-1] / turns.size  # index j-1 -> P(T > j-1) = P(T >= j)


def warmup_seconds(turns: TokenLengths, think_time: float) -> float:
    """How long before 0 conversations must start so the turns they would send after 0 are all but
    MISSING_RATE of the rate: turn j comes Gamma(j-1, think_time) after its conversation's start."""
    from scipy import stats

    survival = turns_survival(turns)[1:]  # P(T >= j) for j = 2..
    if survival.size == 0 or not survival.any():
        return 0.0
    mean = expected_length(turns)
    j = np.arange(2, 2 + survival.size)
    horizon = think_time
    while horizon < MAX_WARMUP:
        missing = float((survival * stats.gamma.sf(horizon, j - 1, scale=think_time)).sum()) / mean
        if missing < MISSING_RATE:
            return horizon
        horizon *= 1.5
    return MAX_WARMUP


@dataclass(frozen=True)
class _Profile:
    """What a conversation is drawn from: one per tenant (or one for everyone)."""

    name: str | None
    model: str | None
    headers: tuple[tuple[str, str], ...]
    system: SystemPrompts | None
    prompt_tokens: TokenLengths
    output_tokens: TokenLengths


class _Lengths:
    """Lengths handed out one by one from chunks drawn ahead (one numpy call per CHUNK values)."""

    def __init__(self, rng: np.random.Generator, spec: TokenLengths) -> None:
        self.rng, self.spec = rng, spec
        self.values: list[int] = []
        self.pos = 0

    def take(self, n: int) -> tuple[int, ...]:
        out: list[int] = []
        while len(out) < n:
            if self.pos >= len(self.values):
                self.values = draw_lengths(self.rng, self.spec, CHUNK).tolist()
                self.pos = 0
            k = min(n - len(out), len(self.values) - self.pos)
            out.extend(self.values[self.pos : self.pos + k])
            self.pos += k
        return tuple(out)


class _Uniforms:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.values: list[float] = []
        self.pos = 0

    def next(self) -> float:
        if self.pos >= len(self.values):
            self.values = self.rng.random(CHUNK).tolist()
            self.pos = 0
        self.pos += 1
        return self.values[self.pos - 1]


def _profiles(spec: Synthetic) -> tuple[list[_Profile], np.ndarray]:
    if not spec.tenants:
        return [_Profile(None, None, (), spec.system_prompts, spec.prompt_tokens, spec.output_tokens)], np.ones(1)
    profiles = [
        _Profile(
            name=t.name,
            model=t.model,
            headers=((spec.tenant_header, t.name),),
            system=t.system_prompts or spec.system_prompts,
            prompt_tokens=t.prompt_tokens or spec.prompt_tokens,
            output_tokens=t.output_tokens or spec.output_tokens,
        )
        for t in spec.tenants
    ]
    weights = np.array([t.weight for t in spec.tenants], dtype=np.float64)
    return profiles, np.cumsum(weights / weights.sum())


def _start_gaps(rng: np.random.Generator, spec: Synthetic, rate: float, gaps: np.ndarray | None) -> Iterator[float]:
    """Endless gaps between conversation starts at `rate` per second."""
    while True:
        if spec.arrival == "recorded":
            assert gaps is not None and gaps.size and gaps.mean() > 0
            # Resample recorded gaps (bootstrap), scaled to this rate: the recorded burst shape, the set rate.
            chunk = rng.choice(gaps, CHUNK) * (1.0 / rate) / float(gaps.mean())
        else:
            chunk = arrival_gaps(rng, spec.arrival, rate, spec.burstiness, CHUNK)
        yield from chunk.tolist()


def workload_requests(spec: Synthetic, seed: int, gaps: np.ndarray | None = None) -> Iterator[TrafficRequest]:
    """Endless requests from `spec` (a fit already applied: kfchaos.traffic.fit.apply_fit), at `spec.rate`
    per second from time 0 on; `gaps` are the recorded inter-arrival gaps for `arrival: recorded`."""
    assert spec.rate is not None
    rng = np.random.Generator(np.random.PCG64(seed))
    conv = spec.conversations
    turns_spec = conv.turns if conv else TokenLengths(distribution="fixed", mean=1)
    think = conv.think_time if conv else 0.0
    max_context = conv.max_context_tokens if conv else 2**31 - 1
    mean_turns = expected_length(turns_spec)
    start_rate = spec.rate / mean_turns
    profiles, cumulative = _profiles(spec)
    questions = [_Lengths(rng, p.prompt_tokens) for p in profiles]
    answers = [_Lengths(rng, p.output_tokens) for p in profiles]
    system_lengths = [_Lengths(rng, p.system.tokens) if p.system else None for p in profiles]
    system_sizes: list[list[int]] = []  # each profile's system prompts' lengths, drawn once
    for p, lengths in zip(profiles, system_lengths, strict=True):
        system_sizes.append(list(lengths.take(p.system.count)) if p.system and lengths else [])
    turn_counts = _Lengths(rng, turns_spec)
    uniform = _Uniforms(rng)
    start_gaps = _start_gaps(rng, spec, start_rate, gaps)
    think_gaps = iter(()) if conv is None else _exponential(rng, think)
    now = -min(warmup_seconds(turns_spec, think), MAX_WARMUP_CONVERSATIONS / start_rate) if conv else 0.0
    heap: list[tuple[float, int, int, Conversation, int, int, int]] = []
    order = 0
    number = 0
    while True:
        now += next(start_gaps)
        if spec.daily_shape and uniform.next() >= daily_factor(now):
            continue
        while heap and heap[0][0] <= now:  # every later conversation starts after `now`: these are final
            yield _request(spec.path, profiles, heapq.heappop(heap))
        which = 0 if len(profiles) == 1 else int(np.searchsorted(cumulative, uniform.next(), side="right"))
        which = min(which, len(profiles) - 1)
        profile = profiles[which]
        system_name, system_tokens = None, 0
        if profile.system and uniform.next() < profile.system.share:
            index = min(int(uniform.next() * profile.system.count), profile.system.count - 1)
            system_name = f"{profile.name or 'all'} {index}"
            system_tokens = system_sizes[which][index]
        n = turn_counts.take(1)[0]
        asked = list(questions[which].take(n))
        if spec.long_context_share > 0:
            asked = [spec.long_context_tokens if uniform.next() < spec.long_context_share else q for q in asked]
        conversation = Conversation(
            key=f"c{number}",
            system=system_name,
            system_tokens=system_tokens,
            questions=tuple(asked),
            answers=answers[which].take(n),
            model=profile.model,
        )
        number += 1
        at = now
        for index in range(n):
            if index:
                at += next(think_gaps)
            if at < 0:
                continue
            first, tokens = history(conversation, index, max_context)
            heapq.heappush(heap, (at, order, which, conversation, index, first, tokens))
            order += 1


def _exponential(rng: np.random.Generator, mean: float) -> Iterator[float]:
    while True:
        yield from rng.exponential(mean, CHUNK).tolist()


def _request(
    path: str, profiles: list[_Profile], item: tuple[float, int, int, Conversation, int, int, int]
) -> TrafficRequest:
    at, _, which, conversation, index, first, tokens = item
    turn = Turn(conversation, index, first)
    tenant = profiles[which].name
    return TrafficRequest(
        # The tenant in the id lets the records be split by tenant; the conversation key alone decides sampling.
        id=f"{tenant}.{conversation.key}.t{index}" if tenant else f"{conversation.key}.t{index}",
        timestamp=at,
        method="POST",
        path=path,
        headers=profiles[which].headers,
        prompt_tokens=tokens,
        max_tokens=conversation.answers[index],
        turn=turn,
    )


def workload_for(spec: Synthetic, seed: int) -> Iterator[TrafficRequest]:
    """The workload of `spec`, fitted first when it names a recording (`fit_from`)."""
    gaps = None
    if spec.fit_from:
        from kfchaos.traffic.fit import apply_fit, fit_file

        fit = fit_file(spec.fit_from, spec.fit_format, seed=seed)
        spec = apply_fit(spec, fit)
        gaps = fit.gaps
    return workload_requests(spec, seed, gaps)
