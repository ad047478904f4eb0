"""Generate traffic/vllm-prod-sample.jsonl.gz: a small, synthetic stand-in for recorded production LLM traffic.

Ten minutes of OpenAI chat requests with bursty (gamma, shape 0.5) arrivals at about 3 requests/s,
prompts of varied length from templates, and recorded-looking headers (one in ten carries a Cookie, which
the replay strips). Deterministic: `python traffic/make_sample.py` rewrites the same bytes.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

OUT = Path(__file__).with_name("vllm-prod-sample.jsonl.gz")
START = 1_764_662_400.0  # 2025-12-02T08:00:00Z
SECONDS = 600.0
RATE = 3.0
TOPICS = ["kubernetes", "postgres", "a python error", "the quarterly report", "a haiku", "rust lifetimes",
          "GPU memory", "a travel plan", "unit tests", "an SQL query"]  # fmt: skip
ASKS = ["Explain {t} briefly.", "Write a short summary about {t}.", "What are common mistakes with {t}?",
        "Give three tips on {t}, with examples and a short justification for each one."]  # fmt: skip


def main() -> None:
    rng = random.Random(20261202)
    rows = []
    now = 0.0
    index = 0
    while True:
        now += rng.gammavariate(0.5, 1.0 / (RATE * 0.5))
        if now >= SECONDS:
            break
        ask = rng.choice(ASKS).format(t=rng.choice(TOPICS))
        context = " ".join(rng.choice(TOPICS) for _ in range(rng.choice([0, 0, 5, 20, 60])))
        headers = {"content-type": "application/json", "user-agent": rng.choice(["openai-python/1.40", "curl/8.5"])}
        if index % 10 == 0:
            headers["cookie"] = "session=recorded"
        body = {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "messages": [{"role": "user", "content": (context + "\n" + ask).strip()}],
            "max_tokens": rng.choice([64, 128, 256]),
        }
        rows.append({"id": f"prod-{index:05d}", "timestamp": round(START + now, 3), "method": "POST",
                     "path": "/v1/chat/completions", "headers": headers, "body": body})  # fmt: skip
        index += 1
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
    with OUT.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as stream:
        stream.write(text.encode())
    print(f"{OUT}: {len(rows)} requests over {SECONDS:.0f} s, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
