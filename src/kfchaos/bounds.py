"""The limits every traffic input is held to: one place for each, so docs/traffic.md can quote them.

A traffic file, a flag or a target's answer is hostile input: whatever it says, a replay ends within its
duration (plus the request timeout), holds a bounded amount of memory, and puts only valid HTTP on the wire.
"""

from __future__ import annotations

import math

# Files: one line (jsonl, nginx, envoy, a gor record line) or one ShareGPT element is read up to this size;
# a longer one is skipped as malformed without being held whole.
MAX_LINE_BYTES = 16 << 20
MAX_ELEMENT_BYTES = 16 << 20
# JSON nesting deeper than this in a traffic record is refused before json.loads can recurse (RecursionError).
MAX_JSON_DEPTH = 200
# Timestamps: epoch seconds from 0 to 9999-12-31T23:59:59Z; NaN, infinities and anything outside are refused.
MAX_TIMESTAMP = 253402300799.0

# Settings (flags and experiment): a request rate multiplier or time compression outside this is a typo.
MAX_FACTOR = 1e6
MAX_DURATION = 30 * 86400.0  # one stage
MAX_TIMEOUT = 86400.0  # one request
MAX_CONCURRENCY = 1_000_000
MAX_SHARDS = 32768  # the records' int16 shard column
# Requests one stage (one shard) may send: its records (~150 bytes each) are held in memory until it ends, so a
# tiny recording looped at --speed 1e6 for a long --duration cannot exhaust memory (20M: about 3 GB).
MAX_REQUESTS = 20_000_000

# A target's answer: the bytes read for one response, one SSE event, and token counts it may report.
MAX_RESPONSE_BYTES = 64 << 20
MAX_SSE_EVENT_BYTES = 4 << 20
MAX_TOKENS = 2**31 - 1  # the records' int32 columns
# A prompt longer than this is no prompt any served model takes (a choice: the longest context windows served are
# 10M tokens, Llama 4 Scout's); a usage claiming more is a hostile answer, that request's `protocol` error.
MAX_CONTEXT_TOKENS = 1 << 24

# Traffic-side faults (kfchaos.traffic.trafficfaults.chain): one prompt a fault builds, the prompts of one wave together
# (all may be in flight at once), and the extra requests a fault may hold in flight at once.
MAX_FAULT_PROMPT_BYTES = 16 << 20
MAX_FAULT_WAVE_BYTES = 256 << 20
MAX_FAULT_CONCURRENCY = 10_000


def finite_timestamp(value: float) -> bool:
    return math.isfinite(value) and 0.0 <= value <= MAX_TIMESTAMP


def json_depth_ok(raw: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON arrays/objects in `raw` nest at most `limit` deep. Few brackets: yes at once; otherwise
    a scan that skips strings (pure Python, ~1 s for a 16 MB line, reached only by bracket-heavy lines)."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return True
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True
