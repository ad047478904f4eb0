"""Fitting a synthetic workload to a recording: lengths, rate, arrival gaps, turns and system prompts.

`fit_file(path, format)` streams a `jsonl` recording or a `sharegpt` prompt set and returns a `Fit`: for the
new question of each request (the last user message), the output length, and the system prompt length, a
lognormal fit (maximum likelihood on the logs, with its Kolmogorov-Smirnov distance to the sample) and the
empirical quantiles (0, 1, ..., 100 %); the recorded rate and inter-arrival gaps (jsonl: timestamps); the
turns per conversation; the distinct system prompts and their share. `apply_fit(spec, fit)` fills what the
experiment does not set (`Synthetic.model_fields_set`) from it.

Token counts are estimated from text as characters / 4 (the usual rule of thumb for English with BPE
tokenizers, as the demo server counts), unless a jsonl record carries `usage.prompt_tokens` /
`usage.completion_tokens` (a gateway log that kept the response's usage); the output length is
`usage.completion_tokens`, else the request's `max_tokens` / `max_completion_tokens` (a cap, not what was
generated: say so when you read the fit). Turns per conversation from single requests (jsonl): a request
whose messages hold k user messages is turn k, so the conversations with at least k turns are the turn-k
requests: P(T >= k) = N_k / N_1. ShareGPT conversations are whole: their human turns are counted directly.

Hostile input: every line is bounded (kfchaos.traffic.source), each value is checked (finite, 0 .. 2^31-1,
the right type) and a bad one skips its line with `FILE:LINE: field ...: reason`, counted in the report; at
most MAX_SAMPLES values of each series are kept (a seeded reservoir sample), so memory is flat however long
the file. A file with nothing to fit is an input error that names it and its first problems.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from kfchaos.bounds import MAX_TOKENS, json_depth_ok
from kfchaos.errors import KfchaosError
from kfchaos.spec import Conversations, Synthetic, SystemPrompts, TokenLengths
from kfchaos.traffic.formats.jsonl import parse_timestamp
from kfchaos.traffic.formats.sharegpt import _elements
from kfchaos.traffic.source import SourceReport, iter_lines

FIT_FORMATS = ("jsonl", "sharegpt")
MAX_SAMPLES = 200_000  # values kept per series (reservoir sample): 1.6 MB of float64 each
MAX_TURNS = 1000  # as spec.Conversations.turns.max
MAX_SYSTEM_PROMPTS = 10_000  # distinct system prompts counted (by hash); more are counted as "many"
QUANTILES = 101  # 0 %, 1 %, ..., 100 %
CHARS_PER_TOKEN = 4
REORDER_DEPTH = 1000  # as kfchaos.traffic.plan: slightly out-of-order timestamps are put back in order


def estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


class _Reservoir:
    """At most `size` values, a uniform sample of all those added (Vitter's algorithm R), seeded."""

    def __init__(self, size: int | None = None, seed: int = 0) -> None:
        self.size = MAX_SAMPLES if size is None else size
        self.seen = 0
        self.values: list[float] = []
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def add(self, value: float) -> None:
        self.seen += 1
        if len(self.values) < self.size:
            self.values.append(value)
            return
        j = int(self._rng.integers(0, self.seen))
        if j < self.size:
            self.values[j] = value

    def array(self) -> np.ndarray:
        return np.asarray(self.values, dtype=np.float64)


@dataclass
class LengthFit:
    """One series of lengths (tokens): its summary, a lognormal fit and its empirical quantiles."""

    count: int  # values seen (the fit uses a sample of at most MAX_SAMPLES)
    mean: float
    stddev: float
    min: int
    max: int
    quantiles: list[float]
    mu: float  # lognormal: mean of log(length)
    sigma: float  # lognormal: standard deviation of log(length)
    ks: float  # Kolmogorov-Smirnov distance of the lognormal fit to the sample (0 = perfect, 1 = unrelated)

    @classmethod
    def of(cls, reservoir: _Reservoir) -> LengthFit | None:
        return cls.of_values(reservoir.array(), reservoir.seen)

    @classmethod
    def of_values(cls, values: np.ndarray, count: int) -> LengthFit | None:
        if values.size == 0:
            return None
        logs = np.log(np.maximum(values, 1.0))
        mu, sigma = float(logs.mean()), float(logs.std())
        lognormal = stats.lognorm(sigma, 0, math.exp(mu)) if sigma > 0 else None
        ks = float(stats.kstest(values, lognormal.cdf).statistic) if lognormal else 0.0
        return cls(
            count=count,
            mean=float(values.mean()),
            stddev=float(values.std()),
            min=int(values.min()),
            max=int(values.max()),
            quantiles=[round(float(q), 2) for q in np.quantile(values, np.linspace(0, 1, QUANTILES))],
            mu=mu,
            sigma=sigma,
            ks=ks,
        )

    def lengths(self, kind: str = "empirical", cap: int | None = None) -> TokenLengths:
        """As a `TokenLengths` for the experiment: the empirical quantiles or the lognormal fit, within the observed
        minimum and maximum (at most `cap`)."""
        low, high = max(1, self.min), max(1, self.max)
        if cap is not None:
            high = max(low, min(high, cap))
        if kind == "lognormal" and self.sigma > 0:
            mean = math.exp(self.mu + self.sigma**2 / 2)
            stddev = mean * math.sqrt(math.expm1(self.sigma**2))
            return TokenLengths(
                distribution="lognormal", mean=round(mean, 3), stddev=round(stddev, 3), min=low, max=high
            )
        mean = round(max(1.0, self.mean), 3)
        if self.max == self.min:
            return TokenLengths(distribution="fixed", mean=mean, min=low, max=high)
        return TokenLengths(distribution="empirical", mean=mean, min=low, max=high, quantiles=list(self.quantiles))

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean": round(self.mean, 3),
            "stddev": round(self.stddev, 3),
            "min": self.min,
            "max": self.max,
            "p50": self.quantiles[50],
            "p90": self.quantiles[90],
            "p99": self.quantiles[99],
            "lognormal": {"mu": round(self.mu, 4), "sigma": round(self.sigma, 4), "ks_distance": round(self.ks, 4)},
        }


@dataclass
class Fit:
    path: str
    format: str
    report: SourceReport
    requests: int = 0
    questions: LengthFit | None = None
    outputs: LengthFit | None = None
    output_source: str = "max_tokens"  # or "usage" (what was generated) when every output came from usage
    system: LengthFit | None = None  # system prompt lengths, one value per distinct prompt
    system_share: float = 0.0  # share of conversations (first turns) that carry a system prompt
    system_count: int = 0  # distinct system prompts (capped at MAX_SYSTEM_PROMPTS)
    turns: LengthFit | None = None  # turns per conversation
    rate: float | None = None  # recorded requests per second
    span: float | None = None  # seconds from the first to the last request
    gaps: np.ndarray = field(default_factory=lambda: np.zeros(0))  # inter-arrival gaps (a sample), seconds

    @property
    def mean_turns(self) -> float:
        return self.turns.mean if self.turns else 1.0

    @property
    def gap_cv(self) -> float | None:
        """Coefficient of variation of the gaps: 1 for Poisson arrivals, above 1 burstier."""
        if self.gaps.size < 2 or not self.gaps.mean() > 0:
            return None
        return float(self.gaps.std() / self.gaps.mean())

    def to_dict(self) -> dict[str, Any]:
        def d(fit: LengthFit | None) -> dict[str, Any] | None:
            return fit.to_dict() if fit else None

        return {
            "path": self.path,
            "format": self.format,
            "requests": self.requests,
            "rate": round(self.rate, 6) if self.rate is not None else None,
            "span_s": round(self.span, 3) if self.span is not None else None,
            "gap_cv": round(cv, 4) if (cv := self.gap_cv) is not None else None,
            "question_tokens": d(self.questions),
            "output_tokens": d(self.outputs),
            "output_source": self.output_source,
            "turns": d(self.turns),
            "system_prompts": {
                "count": self.system_count,
                "share": round(self.system_share, 4),
                "tokens": d(self.system),
            },
            "source": self.report.to_dict(),
        }

    def describe(self) -> list[str]:
        """The fit for a person: what was read, each series and how well the lognormal fits it."""
        lines = [f"{self.path}: {self.requests} requests fitted ({self.format})"]
        if self.rate is not None and self.span is not None:
            cv = self.gap_cv
            lines.append(
                f"  rate {self.rate:.4g}/s over {self.span:.1f} s"
                + (f"; gaps CV {cv:.2f} (1 = Poisson, above 1 burstier)" if cv is not None else "")
            )
        for name, fit in (
            ("question tokens", self.questions),
            (f"output tokens ({self.output_source})", self.outputs),
            ("turns per conversation", self.turns),
            ("system prompt tokens", self.system),
        ):
            if fit is None:
                continue
            lines.append(
                f"  {name}: n={fit.count} mean {fit.mean:.1f} sd {fit.stddev:.1f} min {fit.min} "
                f"p50 {fit.quantiles[50]:g} p90 {fit.quantiles[90]:g} p99 {fit.quantiles[99]:g} max {fit.max}; "
                f"lognormal mu {fit.mu:.3f} sigma {fit.sigma:.3f}, KS distance {fit.ks:.3f}"
            )
        if self.system_count:
            lines.append(f"  system prompts: {self.system_count} distinct, on {self.system_share:.0%} of conversations")
        lines.extend(self.report.describe())
        return lines


# ------------------------------------------------------------------ reading


def _int_field(value: Any, name: str) -> int:
    """A length from a record: an integer 0 .. 2^31-1 (NaN, infinities, booleans, text, 1e400 refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"field {name}: not a number")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(f"field {name}: not a whole finite number")
    if not 0 <= value <= MAX_TOKENS:
        raise ValueError(f"field {name}: out of range (0 to {MAX_TOKENS})")
    return int(value)


def _content_text(content: Any, name: str) -> str:
    """A message's text: a string, or OpenAI content parts (their `text` fields)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    if content is None:
        return ""
    raise ValueError(f"field {name}: not text or content parts")


class _Collector:
    def __init__(self, seed: int) -> None:
        self.questions = _Reservoir(seed=seed)
        self.outputs = _Reservoir(seed=seed + 1)
        self.gaps = _Reservoir(seed=seed + 2)
        self.turn_counts: Counter[int] = Counter()  # jsonl: requests at turn k; sharegpt: conversations of k turns
        self.system_prompts: dict[str, int] = {}  # hash -> tokens
        self.first_turns = 0
        self.first_turns_with_system = 0
        self.outputs_from_usage = 0
        self.requests = 0

    def system(self, text: str, tokens: int | None = None) -> None:
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        if key not in self.system_prompts and len(self.system_prompts) < MAX_SYSTEM_PROMPTS:
            self.system_prompts[key] = tokens if tokens is not None else estimate_tokens(text)


def _jsonl_request(data: Any, collector: _Collector) -> float:
    """Add one jsonl record to the collector; its timestamp. ValueError naming the field when it cannot be used."""
    if not isinstance(data, dict):
        raise ValueError("line is not a JSON object")
    if "timestamp" not in data:
        raise ValueError("missing field timestamp")
    try:
        timestamp = parse_timestamp(data["timestamp"])
    except ValueError as exc:
        raise ValueError(f"field timestamp: {exc}") from None
    body = data.get("body")
    if isinstance(body, str):
        try:
            body = json.loads(body) if json_depth_ok(body) else None
        except ValueError:
            body = None
    if not isinstance(body, dict):
        raise ValueError("field body: not a JSON object with prompt or messages")
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise ValueError("field usage: not an object")
    usage = usage or {}
    system_text: str | None = None
    user_turns = 1
    if "messages" in body:
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            raise ValueError("field body.messages: not a non-empty list")
        question = None
        user_turns = 0
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise ValueError(f"field body.messages[{i}]: not an object")
            role = message.get("role")
            text = _content_text(message.get("content"), f"body.messages[{i}].content")
            if role in ("system", "developer") and i == 0:
                system_text = text
            elif role == "user":
                user_turns += 1
                question = text
        if question is None:
            raise ValueError("field body.messages: no user message")
    elif "prompt" in body:
        prompt = body["prompt"]
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            prompt = " ".join(prompt)
        if not isinstance(prompt, str):
            raise ValueError("field body.prompt: not text")
        question = prompt
    else:
        raise ValueError("field body: neither prompt nor messages")
    if "prompt_tokens" in usage and system_text is None and user_turns <= 1:
        question_tokens = _int_field(usage["prompt_tokens"], "usage.prompt_tokens")
    else:
        question_tokens = estimate_tokens(question)
    if "completion_tokens" in usage:
        output: int | None = _int_field(usage["completion_tokens"], "usage.completion_tokens")
        from_usage = True
    else:
        cap = body.get("max_completion_tokens", body.get("max_tokens"))
        name = "body.max_completion_tokens" if "max_completion_tokens" in body else "body.max_tokens"
        output = _int_field(cap, name) if cap is not None else None
        from_usage = False
    # Everything checked: only now does the record count.
    collector.requests += 1
    collector.questions.add(float(question_tokens))
    if output is not None:
        collector.outputs.add(float(output))
        collector.outputs_from_usage += from_usage
    collector.turn_counts[min(user_turns, MAX_TURNS)] += 1
    if user_turns <= 1:
        collector.first_turns += 1
        if system_text is not None:
            collector.first_turns_with_system += 1
    if system_text is not None:
        collector.system(system_text)
    return timestamp


def _read_jsonl(path: str, report: SourceReport, collector: _Collector) -> tuple[float | None, float | None]:
    """Stream the file; (first, last) timestamp in time order, gaps into the collector."""
    heap: list[float] = []
    first: float | None = None
    last: float | None = None

    def emit(t: float) -> None:
        nonlocal first, last
        if first is None:
            first = t
        elif last is not None:
            collector.gaps.add(max(0.0, t - last))  # a straggler past the reorder window: a zero gap
        last = t if last is None else max(last, t)

    for line, raw in iter_lines(path, report):
        if not raw.strip():
            continue
        if not json_depth_ok(raw):
            report.skip(line, "JSON nested too deep")
            continue
        try:
            timestamp = _jsonl_request(json.loads(raw), collector)
        except json.JSONDecodeError as exc:
            report.skip(line, f"invalid JSON: {exc.msg} at column {exc.colno}")
            continue
        except UnicodeDecodeError:
            report.skip(line, "not UTF-8 text")
            continue
        except RecursionError:
            report.skip(line, "JSON nested too deep")
            continue
        except ValueError as exc:
            report.skip(line, str(exc))
            continue
        report.records += 1
        if len(heap) < REORDER_DEPTH:
            heapq.heappush(heap, timestamp)
        else:
            emit(heapq.heappushpop(heap, timestamp))
    while heap:
        emit(heapq.heappop(heap))
    return first, last


def _sharegpt_conversation(data: Any, collector: _Collector) -> None:
    if not isinstance(data, dict):
        raise ValueError("conversation is not a JSON object")
    turns = data.get("conversations")
    if not isinstance(turns, list):
        raise ValueError("missing list field conversations")
    questions: list[int] = []
    answers: list[int] = []
    system_text: str | None = None
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ValueError(f"field conversations[{i}].value: not text")
        who = turn.get("from")
        if who == "system" and i == 0:
            system_text = turn["value"]
        elif who in ("human", "user"):
            questions.append(estimate_tokens(turn["value"]))
        elif who in ("gpt", "assistant") and questions:
            answers.append(estimate_tokens(turn["value"]))
    if not questions:
        raise ValueError("field conversations: no human turn")
    collector.requests += len(questions)
    for q in questions:
        collector.questions.add(float(q))
    for a in answers:
        collector.outputs.add(float(a))
        collector.outputs_from_usage += 1  # a recorded reply: what was generated
    collector.turn_counts[min(len(questions), MAX_TURNS)] += 1
    collector.first_turns += 1
    if system_text is not None:
        collector.first_turns_with_system += 1
        collector.system(system_text)


def _read_sharegpt(path: str, report: SourceReport, collector: _Collector) -> None:
    for line, element in _elements(path, report):
        try:
            _sharegpt_conversation(element, collector)
        except ValueError as exc:
            report.skip(line, str(exc))
            continue
        report.records += 1


def _turns_sample(counts: Counter[int], per_request: bool) -> tuple[np.ndarray, int]:
    """Turns per conversation as (a sorted sample of at most MAX_SAMPLES, the conversations counted). From
    requests (jsonl), conversations with exactly k turns are N_k - N_(k+1) (never below zero: a recording that
    starts mid-conversation has turn-k requests without their first turn)."""
    if not counts:
        return np.zeros(0), 0
    ks = range(1, max(counts) + 1)
    if per_request:
        n = np.array([max(0, counts.get(k, 0) - counts.get(k + 1, 0)) for k in ks])
    else:
        n = np.array([counts.get(k, 0) for k in ks])
    total = int(n.sum())
    if total > MAX_SAMPLES:  # evenly spaced ranks of the sorted sample keep its quantiles
        n = np.floor(n * (MAX_SAMPLES / total)).astype(np.int64)
    return np.repeat(np.arange(1, len(ks) + 1), n).astype(np.float64), total


def fit_file(path: str | Path, format: str = "jsonl", seed: int = 0) -> Fit:
    """Fit a recording. KfchaosError (an input error) when it is missing or holds nothing to fit."""
    path = str(path)
    if format not in FIT_FORMATS:
        raise KfchaosError(f"fit: format {format!r} is not one of {', '.join(FIT_FORMATS)}")
    if not Path(path).is_file():
        raise KfchaosError(f"fit: traffic file {path}: not found")
    report = SourceReport(path, format)
    collector = _Collector(seed)
    first = last = None
    if format == "jsonl":
        first, last = _read_jsonl(path, report, collector)
    else:
        _read_sharegpt(path, report, collector)
    if collector.requests == 0:
        problems = "; ".join(f"line {m.line}: {m.reason}" for m in report.malformed[:3])
        raise KfchaosError(
            f"{path}: nothing to fit: no usable request in {report.lines} lines"
            + (
                f" ({report.malformed_count} skipped; {problems})"
                if report.malformed_count
                else " (no records: empty file)"
            )
        )
    fit = Fit(path=path, format=format, report=report, requests=collector.requests)
    fit.questions = LengthFit.of(collector.questions)
    fit.outputs = LengthFit.of(collector.outputs)
    fit.output_source = "usage" if collector.outputs_from_usage == collector.outputs.seen > 0 else "max_tokens"
    fit.turns = LengthFit.of_values(*_turns_sample(collector.turn_counts, per_request=format == "jsonl"))
    system = _Reservoir()
    for tokens in collector.system_prompts.values():
        system.add(float(tokens))
    fit.system = LengthFit.of(system)
    fit.system_count = len(collector.system_prompts)
    fit.system_share = collector.first_turns_with_system / collector.first_turns if collector.first_turns else 0.0
    if first is not None and last is not None and last > first and collector.requests > 1:
        fit.span = last - first
        fit.rate = (report.records - 1) / fit.span
        fit.gaps = collector.gaps.array()
    return fit


# ------------------------------------------------------------------ using a fit


def apply_fit(spec: Synthetic, fit: Fit) -> Synthetic:
    """The synthetic settings with what the experiment leaves unset taken from the fit: `rate`, `prompt_tokens`
    (the new question of each turn), `output_tokens`, and, when the recording has them, `system_prompts` and
    the turns of `conversations` (think time cannot be seen in single requests: the default or the set one)."""
    given = spec.model_fields_set
    update: dict[str, Any] = {}
    kind = spec.fit_lengths
    if "rate" not in given or spec.rate is None:
        if fit.rate is None:
            raise KfchaosError(f"{fit.path}: no recorded rate (needs two timestamps apart): give synthetic.rate")
        update["rate"] = fit.rate
    if "prompt_tokens" not in given and fit.questions is not None:
        update["prompt_tokens"] = fit.questions.lengths(kind)
    if "output_tokens" not in given and fit.outputs is not None:
        update["output_tokens"] = fit.outputs.lengths(kind)
    if "system_prompts" not in given and fit.system is not None and fit.system_share > 0:
        prompts = SystemPrompts(count=max(1, min(fit.system_count, 10_000)), tokens=fit.system.lengths(kind))
        update["system_prompts"] = prompts.model_copy(update={"share": min(1.0, fit.system_share)})
    if fit.turns is not None and fit.turns.max > 1:
        conversations = spec.conversations or Conversations()
        if spec.conversations is None or "turns" not in conversations.model_fields_set:
            update["conversations"] = conversations.model_copy(update={"turns": fit.turns.lengths(kind, MAX_TURNS)})
    if spec.arrival == "recorded" and fit.gaps.size == 0:
        raise KfchaosError(f"{fit.path}: no recorded gaps to resample (needs two timestamps apart): arrival recorded")
    return spec.model_copy(update=update)


def suggested(spec: Synthetic, fit: Fit) -> Synthetic:
    """The fitted settings as an experiment would write them, without the recording: arrivals gamma with the
    recorded burstiness (shape 1/CV^2 of the gaps: 1 is Poisson) when the recording has times."""
    fitted = apply_fit(spec, fit)
    update: dict[str, Any] = {"fit_from": None}
    cv = fit.gap_cv
    if cv is not None and cv > 0 and "arrival" not in spec.model_fields_set:
        update.update(arrival="gamma", burstiness=round(min(100.0, max(0.01, 1.0 / cv**2)), 4))
    return fitted.model_copy(update=update)


def fitted_yaml(spec: Synthetic) -> str:
    """The `synthetic:` block to paste into an experiment (what `kfchaos traffic fit --out` writes)."""
    import yaml

    from kfchaos.units import format_duration, format_percent

    data = spec.model_dump(mode="json", exclude_defaults=True, exclude={"fit_from", "fit_format", "fit_lengths"})
    if "rate" in data:
        data["rate"] = round(data["rate"], 6)
    for name in ("prompt_tokens", "output_tokens"):  # say which distribution, even the default one
        if name in data:
            data[name] = {"distribution": getattr(spec, name).distribution, **data[name]}
    # Durations and shares as an experiment writes them (`30s`, `75%`), so the block validates as it is.
    if "long_context_share" in data:
        data["long_context_share"] = format_percent(spec.long_context_share)
    if spec.conversations is not None and "conversations" in data:
        data["conversations"]["think_time"] = format_duration(spec.conversations.think_time)
    for owner, model in [(data, spec), *zip(data.get("tenants", []), spec.tenants, strict=True)]:
        prompts = getattr(model, "system_prompts", None)
        if prompts is not None and "system_prompts" in owner:
            owner["system_prompts"]["share"] = format_percent(round(prompts.share, 4))
    return yaml.safe_dump({"synthetic": data}, sort_keys=False, default_flow_style=None, width=110)
