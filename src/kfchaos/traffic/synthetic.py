"""Synthetic traffic for when no recording exists, driven by `spec.traffic.synthetic`.

Arrivals: Poisson (exponential gaps), gamma (shape = burstiness, mean gap 1/rate, as vLLM's
`--burstiness`: below 1 is burstier than Poisson) or constant. With `daily_shape` the rate follows a
daily curve (peak at 15:00, 10 % of peak at 03:00; the clock starts at 12:00) by thinning. Prompt and
output lengths come from the configured distributions (or fitted quantiles), clipped to [min, max]; a
`long_context_share` of requests get `long_context_tokens`-token prompts. Everything is drawn from one
seeded generator in chunks, so the same seed gives the same requests and memory stays flat however long the stream.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from kfchaos.spec import Synthetic, TokenLengths
from kfchaos.traffic.request import TrafficRequest

CHUNK = 4096
DAY = 86400.0
START_HOUR = 12.0


def daily_factor(seconds: float) -> float:
    """Share of the peak rate at `seconds` after the synthetic clock starts (12:00)."""
    hour = (START_HOUR + seconds / 3600.0) % 24.0
    return 0.55 + 0.45 * math.cos(2 * math.pi * (hour - 15.0) / 24.0)


def draw_lengths(rng: np.random.Generator, spec: TokenLengths, n: int) -> np.ndarray:
    if spec.distribution == "empirical":
        # Inverse CDF: linear interpolation between the quantiles (as fitted by kfchaos.traffic.fit).
        q = np.asarray(spec.quantiles, dtype=np.float64)
        values = np.interp(rng.random(n) * (len(q) - 1), np.arange(len(q)), q)
    elif spec.distribution == "fixed" or spec.stddev == 0:
        values = np.full(n, spec.mean)
    elif spec.distribution == "uniform":
        half = spec.stddev * math.sqrt(3.0)  # a uniform with this standard deviation
        values = rng.uniform(spec.mean - half, spec.mean + half, n)
    elif spec.distribution == "normal":
        values = rng.normal(spec.mean, spec.stddev, n)
    else:  # lognormal with the given mean and standard deviation of the lengths themselves
        sigma2 = math.log1p((spec.stddev / spec.mean) ** 2)
        values = rng.lognormal(math.log(spec.mean) - sigma2 / 2, math.sqrt(sigma2), n)
    return np.clip(np.rint(values), spec.min, spec.max).astype(np.int64)


def arrival_gaps(rng: np.random.Generator, arrival: str, rate: float, burstiness: float, n: int) -> np.ndarray:
    if arrival == "constant":
        return np.full(n, 1.0 / rate)
    if arrival == "gamma":
        return rng.gamma(burstiness, 1.0 / (rate * burstiness), n)
    return rng.exponential(1.0 / rate, n)


def arrival_times(
    rng: np.random.Generator, arrival: str, rate: float, burstiness: float = 1.0, daily_shape: bool = False
) -> Iterator[float]:
    """Endless arrival offsets in seconds from 0, at `rate` per second (the peak rate with daily_shape)."""
    now = 0.0
    while True:
        gaps = arrival_gaps(rng, arrival, rate, burstiness, CHUNK)
        keep = rng.random(CHUNK) if daily_shape else None
        for i in range(CHUNK):
            now += float(gaps[i])
            if keep is not None and keep[i] >= daily_factor(now):
                continue
            yield now


def synthetic_requests(spec: Synthetic, seed: int) -> Iterator[TrafficRequest]:
    """Endless requests; the replay plan stops at the stage duration."""
    assert spec.rate is not None  # set, or filled from fit_from (then the workload generator makes the requests)
    rng = np.random.Generator(np.random.PCG64(seed))
    times = arrival_times(rng, spec.arrival, spec.rate, spec.burstiness, spec.daily_shape)
    index = 0
    while True:
        prompts = draw_lengths(rng, spec.prompt_tokens, CHUNK)
        outputs = draw_lengths(rng, spec.output_tokens, CHUNK)
        long_context = rng.random(CHUNK) < spec.long_context_share
        for i in range(CHUNK):
            prompt = spec.long_context_tokens if long_context[i] else int(prompts[i])
            yield TrafficRequest(
                id=f"s{index}",
                timestamp=next(times),
                method="POST",
                path=spec.path,
                prompt_tokens=prompt,
                max_tokens=int(outputs[i]),
            )
            index += 1
