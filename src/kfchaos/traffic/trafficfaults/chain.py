"""Traffic-side faults along the LLM serving chain: tokenizer stress, batch shock, prefix-cache thrash.

Each is a generator of extra requests for a stage (kfchaos.traffic.trafficfaults); every request carries the
fault's name, so the verdict leaves it out of the traffic's figures.

- tokenizer-stress: prompts the API server's tokenizer finds costly or odd -- over and near `--max-model-len`,
  a long run without whitespace (one giant pre-tokenizer piece: BPE is superlinear in a piece's length,
  openai/tiktoken#195), combining marks, emoji ZWJ sequences, right-to-left text with bidi controls, rare but
  valid code points. vLLM tokenizes in the API server process on one worker thread
  (vllm/entrypoints/openai/serving_engine.py: `self._tokenizer_executor = ThreadPoolExecutor(max_workers=1)`),
  so a slow prompt delays every request queued behind it, and refuses a prompt over the limit with 400. vLLM
  0.32 says "This model's maximum context length is N tokens. However, your prompt contains at least N+1 input
  tokens, which exceeds this limit even without any output tokens. ..." (vllm/renderers/params.py
  `_token_len_check`: the tokenizer stops at N+1 tokens, hence "at least"; a prompt longer in characters than N
  times the vocabulary's longest token is refused before tokenizing, `_text_len_check`); older vLLMs said
  "However, you requested M tokens ..." (`_validate_prompt_and_tokenize`). A prompt under the limit whose
  max_tokens would pass it is not refused in 0.32: max_tokens is cut to the room left
  (vllm/entrypoints/serve/utils/api_utils.py `get_max_tokens`). The fault's own over-limit requests are expected to
  get 400; their answer time (fast 400 or stall) is in the records, and the traffic's TTFT is what the verdict
  judges (tests/engine/test_faults.py checks the 400 and the real token counts on the real engine).
- batch-shock: a step of K extra requests in flight at once (K = a share of the stage's in-flight estimate,
  stage rate x expected latency, Little's law, or a number), max_tokens spread wide, then K / expected_latency
  new requests a second for `hold`, keeping ~K extra in flight: the scheduler's preemption path.
- prefix-cache-thrash: N distinct long shared prefixes taken in turn, so the working set outgrows the blocks the
  prefix cache keeps (vLLM evicts free cached blocks in LRU order: vllm/v1/core/block_pool.py) and every
  request misses.

Prompt sizes in tokens are the client's estimate: words of three letters and a space (" the", " and", ...)
are one token each in Llama and GPT byte-level BPE vocabularies, and four characters (the demo server's rule)
either way. Prompts are built when the plan yields the request (just before it is sent), from cached text.
"""

from __future__ import annotations

import functools
import math
import random

from kfchaos.bounds import MAX_FAULT_CONCURRENCY, MAX_REQUESTS
from kfchaos.errors import KfchaosError
from kfchaos.faultspec.params import BatchShockParams, PrefixCacheThrashParams, TokenizerStressParams
from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.settings import ReplaySettings, TrafficFault
from kfchaos.traffic.trafficfaults.base import FaultRequests, api_path, repeat_starts

# Common three-letter English words: with the space before them one token each in byte-level BPE vocabularies.
_WORDS = (
    "the",
    "and",
    "for",
    "you",
    "are",
    "not",
    "but",
    "all",
    "can",
    "had",
    "was",
    "one",
    "our",
    "out",
    "day",
    "new",
)


@functools.lru_cache(maxsize=64)
def word_text(tokens: int) -> str:
    """`tokens` words of four characters each (three letters and a space), ~one token each."""
    line = " ".join(_WORDS)
    repeats = tokens // len(_WORDS) + 1
    return " ".join([line] * repeats)[: max(0, 4 * tokens - 1)]


# Odd but valid text, one unit each, repeated to the wanted length in code points.
_UNIT = {
    # Base letters each carrying three combining marks (acute, diaeresis, dot below): NFC/NFKC normalization work.
    "combining-marks": "a\u0301\u0308\u0323e\u0301\u0308\u0323o\u0301\u0308\u0323 ",
    # Emoji ZWJ sequences: family, technologist with skin tone, rainbow flag (variation selector + ZWJ).
    "emoji-zwj": "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 \U0001f468\U0001f3fd\u200d\U0001f4bb "
    "\U0001f3f3\ufe0f\u200d\U0001f308 ",
    # Arabic and Hebrew inside right-to-left isolates, left-to-right digits and a right-to-left mark.
    "rtl-mixed": "\u2067\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u2069 GPU 42 "
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd\u200f ",
    # Valid UTF-8 that looks broken: a BOM mid-text, the replacement character, private use (BMP and plane 16),
    # a noncharacter, zero-width space, line separator, a tag character, a 4-byte symbol.
    "odd-codepoints": "\ufeffx\ufffd\ue000\U0010fffd\ufdd0\u200b\u2028\U000e0041\U0001d11e ",
}


@functools.lru_cache(maxsize=64)
def odd_text(kind: str, chars: int) -> str:
    """`chars` code points of the kind's odd text (cached: every request of a wave shares the object)."""
    if kind == "no-spaces":
        # Lowercase letters without a break: one pre-tokenizer piece as long as the prompt.
        rng = random.Random(f"no-spaces:{chars}")
        return "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=chars))
    unit = _UNIT[kind]
    return (unit * (chars // len(unit) + 1))[:chars]


def tokenizer_prompt(params: TokenizerStressParams, kind: str, request_id: str) -> str:
    head = f"[{request_id}] "
    if kind == "over-limit":
        return head + word_text(params.max_model_len + params.over_tokens)
    if kind == "near-limit":
        # The id takes a few tokens of its own: it comes out of the share.
        fill = int(params.near * (params.max_model_len - params.max_tokens)) - 8
        return head + word_text(max(1, fill))
    return head + odd_text(kind, params.prompt_chars)


def tokenizer_stress(fault: TrafficFault, settings: ReplaySettings) -> FaultRequests:
    p = fault.params
    assert isinstance(p, TokenizerStressParams)
    path = api_path(settings)
    for k, start in enumerate(repeat_starts(p.start, p.every, settings.duration)):
        for j in range(p.requests):
            kind = p.kinds[j % len(p.kinds)]
            request_id = f"tok-{fault.name}-{k}-{j}-{kind}"
            yield (
                start,
                TrafficRequest(
                    id=request_id,
                    timestamp=start,
                    method="POST",
                    path=path,
                    prompt=tokenizer_prompt(p, kind, request_id),
                    max_tokens=p.max_tokens,
                    fault=fault.name,
                ),
            )


def stage_rate(settings: ReplaySettings) -> float | None:
    """Requests per second the stage sends, when the plan knows it (synthetic traffic with a set rate); None for
    a file, or a rate left to fit_from."""
    if settings.synthetic is None or settings.synthetic.rate is None:
        return None
    return float(settings.synthetic.rate) * settings.stage / 100.0 * settings.rate_scale


def shock_size(params: BatchShockParams, settings: ReplaySettings) -> int:
    """K: the extra requests in flight at the step."""
    if params.requests is not None:
        return params.requests
    rate = stage_rate(settings)
    if rate is None:
        raise KfchaosError(
            "batch-shock: extra_concurrency as a share needs synthetic traffic (its rate gives the in-flight "
            "estimate); for recorded or fitted traffic give requests: N"
        )
    assert params.extra_concurrency is not None and params.expected_latency is not None
    k = math.ceil(params.extra_concurrency * rate * params.expected_latency)
    if k > MAX_FAULT_CONCURRENCY:
        raise KfchaosError(f"batch-shock: {k} extra requests at once is over {MAX_FAULT_CONCURRENCY}")
    return max(1, k)


def batch_shock(fault: TrafficFault, settings: ReplaySettings) -> FaultRequests:
    p = fault.params
    assert isinstance(p, BatchShockParams)
    duration = settings.duration
    if duration is not None and p.start >= duration:
        return
    k = shock_size(p, settings)
    offsets = [p.start] * k
    if p.hold and p.expected_latency:
        gap = p.expected_latency / k  # k / expected_latency arrivals a second keep ~k more in flight
        end = p.start + p.hold if duration is None else min(p.start + p.hold, duration)
        count = int((end - p.start) / gap)
        if k + count > MAX_REQUESTS:
            raise KfchaosError(f"batch-shock: {k + count} requests in one stage is over {MAX_REQUESTS}")
        offsets += [p.start + i * gap for i in range(1, count + 1) if p.start + i * gap < end]
    # Deterministic for the plan hash: the same fault, seed and stage draw the same lengths.
    rng = random.Random(f"batch-shock:{fault.name}:{settings.seed}:{settings.stage}")
    path = api_path(settings)
    for i, offset in enumerate(offsets):
        yield (
            offset,
            TrafficRequest(
                id=f"shock-{fault.name}-{i}",
                timestamp=offset,
                method="POST",
                path=path,
                prompt_tokens=rng.randint(p.prompt_tokens.min, p.prompt_tokens.max),
                max_tokens=rng.randint(p.max_tokens.min, p.max_tokens.max),
                ignore_eos=p.ignore_eos,
                fault=fault.name,
            ),
        )


def thrash_prompt(params: PrefixCacheThrashParams, fault: str, index: int, request_id: str) -> str:
    """Prefix k (k = index mod prefixes) differs from the others in its first block, then a question after a
    blank line: a document and a question, the shape a prefix cache shares (kfchaos.demo.server)."""
    k = index % params.prefixes
    return f"[prefix {k} of {fault}] " + word_text(params.prefix_tokens) + f"\n\n[{request_id}] Summarize the above."


def prefix_cache_thrash(fault: TrafficFault, settings: ReplaySettings) -> FaultRequests:
    p = fault.params
    assert isinstance(p, PrefixCacheThrashParams)
    duration = settings.duration
    end = math.inf if p.hold is None else p.start + p.hold
    if duration is not None:
        end = min(end, duration)
    if not math.isfinite(end):
        raise KfchaosError("prefix-cache-thrash: give hold, or a stage duration, so the rotation ends")
    count = math.ceil((end - p.start) * p.rate) if end > p.start else 0
    if count > MAX_REQUESTS:
        raise KfchaosError(f"prefix-cache-thrash: {count} requests in one stage is over {MAX_REQUESTS}")
    path = api_path(settings)
    for i in range(count):
        offset = p.start + i / p.rate
        if offset >= end:
            return
        request_id = f"thrash-{fault.name}-{i}"
        yield (
            offset,
            TrafficRequest(
                id=request_id,
                timestamp=offset,
                method="POST",
                path=path,
                prompt=thrash_prompt(p, fault.name, i, request_id),
                max_tokens=p.max_tokens,
                ignore_eos=p.ignore_eos,
                fault=fault.name,
            ),
        )
