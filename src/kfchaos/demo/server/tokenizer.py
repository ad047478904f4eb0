"""The demo server's tokenizer: a token count, a cost model, one worker, and vLLM's max-model-len refusal.

vLLM tokenizes in the API server process, on a thread pool of one worker
(vllm-project/vllm vllm/entrypoints/openai/serving_engine.py: `self._tokenizer_executor =
ThreadPoolExecutor(max_workers=1)`, `make_async(self._tokenize_prompt_input, executor=...)`): prompts are
tokenized one at a time, so a prompt that is slow to tokenize delays the admission of every request queued
behind it -- their TTFT grows although the engine is idle. Modelled here by a FIFO lock held for the prompt's
tokenization time.

Then the limits of `--max-model-len` (L), as vLLM 0.32 checks them (vllm/renderers/params.py TokenizeParams),
each a 400 `{"error": {"message", "type": "BadRequestError", "param", "code": 400}}`:
- `max_tokens` above L, before tokenization (`__post_init__`): "max_tokens=M cannot be greater than
  max_model_len=L. Please request fewer output tokens. (parameter=max_tokens, value=M)" (`output_refusal`);
- a prompt of more than L tokens, after tokenization (`_token_len_check`), so an over-long prompt still costs its
  tokenization time: "This model's maximum context length is L tokens. However, your prompt contains at least
  L+1 input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the
  input prompt. (parameter=input_tokens, value=L+1)" -- "at least L+1" because the tokenizer stops at L+1
  tokens (`get_encode_kwargs`: max_length = max_input_tokens + 1).
A prompt that fits with a `max_tokens` that does not is served by vLLM 0.32 with max_tokens cut to L - prompt
(vllm/entrypoints/serve/utils/api_utils.py get_max_tokens). The demo refuses it as vLLM did before, "This model's
maximum context length is N tokens. However, you requested M tokens (P in the messages, C in the completion).
Please reduce the length of the messages or completion." -- an allowed difference (docs/demo.md, "Held to the
real engine"): no bundled scenario sends such a request.

Cost model (seconds for one prompt), cited where there is a source and marked a guess where not:
- 20 ns a byte: the Hugging Face tokenizers README ("Takes less than 20 seconds to tokenize a GB of text on a
  server's CPU").
- 200 ns more per byte outside ASCII: a guess (normalization of combining marks, byte fallback for rare code
  points; no published figure).
- 1 ns x L^2 for each run of L > 64 characters without whitespace: BPE merging is superlinear in the length of
  a pre-tokenizer piece (openai/tiktoken#195, a maintainer: "BPE is superlinear in chunk length"; measured
  quadratic in coder/ai-tokenizer#6: 50 000 underscores 3.9 s). The constant is a guess: 50 000 characters
  in one run cost 2.5 s.
Token count: ASCII text 4 characters a token (the server's old rule, unchanged for ASCII prompts), plus one
token per 2 UTF-8 bytes outside ASCII (a guess: byte-level BPE splits rare code points into byte tokens,
common ones merge).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

CHARS_PER_TOKEN = 4
SECONDS_PER_BYTE = 20e-9
SECONDS_PER_NON_ASCII_BYTE = 200e-9
SECONDS_PER_RUN_CHAR_SQUARED = 1e-9
RUN_FREE = 64  # runs up to this long are ordinary words
# Below this a tokenization is not worth a trip through the event loop, unless others are already waiting.
SLEEP_FLOOR = 0.0005

_LONG_RUN = re.compile(r"\S{" + str(RUN_FREE + 1) + ",}")


def measure(text: str) -> tuple[int, float]:
    """(tokens, seconds to tokenize) of one prompt, by the model above."""
    if text.isascii():
        ascii_chars, non_ascii_bytes = len(text), 0
    else:
        ascii_chars = len(text.encode("ascii", "ignore"))  # C speed: ASCII characters are one byte each
        non_ascii_bytes = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
    tokens = max(1, ascii_chars // CHARS_PER_TOKEN + non_ascii_bytes // 2)
    seconds = (ascii_chars + non_ascii_bytes) * SECONDS_PER_BYTE + non_ascii_bytes * SECONDS_PER_NON_ASCII_BYTE
    for run in _LONG_RUN.finditer(text):
        length = run.end() - run.start()
        seconds += SECONDS_PER_RUN_CHAR_SQUARED * length * length
    return tokens, seconds


class Tokenizer:
    """One tokenizer worker for the API front end, and the max-model-len check after it."""

    def __init__(self, max_model_len: int) -> None:
        self.max_model_len = max_model_len
        self._worker = asyncio.Lock()  # asyncio.Lock wakes its waiters first in, first out
        self.busy_seconds = 0.0  # time the worker spent tokenizing (for tests and the curious)

    async def tokenize(self, text: str) -> int:
        """The prompt's token count, after waiting for the worker and the prompt's tokenization time."""
        tokens, cost = measure(text)
        if cost >= SLEEP_FLOOR or self._worker.locked():
            async with self._worker:
                self.busy_seconds += cost
                await asyncio.sleep(cost)
        return tokens

    def output_refusal(self, max_tokens: int, param: str = "max_tokens") -> dict[str, Any] | None:
        """vLLM's 400 body when `max_tokens` (or chat's `max_completion_tokens`: `param`) alone is over max_model_len,
        checked before the prompt is tokenized; None when it is not."""
        limit = self.max_model_len
        if max_tokens <= limit:
            return None
        message = (
            f"{param}={max_tokens} cannot be greater than max_model_len={limit}. Please request fewer output tokens."
        )
        return _error(f"{message} (parameter={param}, value={max_tokens})", param)

    def refusal(self, prompt_tokens: int, max_tokens: int) -> dict[str, Any] | None:
        """vLLM's 400 body when the prompt, or the prompt and the completion, do not fit in max_model_len; None when
        they do (see the module's docstring for the second, the demo's older refusal)."""
        limit = self.max_model_len
        if prompt_tokens > limit:
            counted = limit + 1  # the tokenizer stopped there
            message = (
                f"This model's maximum context length is {limit} tokens. However, your prompt contains at least "
                f"{counted} input tokens, which exceeds this limit even without any output tokens. Please reduce the "
                "length of the input prompt."
            )
            return _error(f"{message} (parameter=input_tokens, value={counted})", "input_tokens")
        if prompt_tokens + max_tokens <= limit:
            return None
        message = (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion."
        )
        return _error(message, None)


def _error(message: str, param: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}
