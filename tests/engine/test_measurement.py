"""The replay measures what the real engine did: for the same requests, kfchaos's records agree with vLLM's own
counters and histograms (deltas of /metrics around the replay), and with vLLM's own benchmark client on the same
request shape.

What must be equal, and what may differ (vllm-project/vllm vllm/v1/metrics/stats.py, loggers.py):
- Counts are exact: requests (vllm:e2e_request_latency_seconds_count, vllm:request_success_total by finished_reason),
  output tokens (vllm:generation_tokens_total against the records' usage counts, and max_tokens x requests: each
  request asks for exactly max_tokens with ignore_eos), prompt tokens (vllm:prompt_tokens_total, and POST /tokenize
  for each prompt), one TTFT and one TPOT observation per request, one ITL observation per output token after the
  first. A replay that miscounts a single token fails.
- Times are not equal, and the direction is known. vLLM's clock for a request starts at `arrival_time`, set when
  the engine's input processor takes it (vllm/v1/engine/input_processor.py), after the HTTP request was read and the
  prompt tokenized, and its TTFT and e2e stop when the API process's output processor handles the engine step
  (IterationStats.iteration_timestamp), before the text is detokenized, framed as SSE and written. The replay's
  clock starts before connecting and stops when the bytes arrive. So the records' mean TTFT and mean latency are at
  least the engine's (a millisecond is allowed for the two processes' clocks), and at most SLACK_S (+25 %) more:
  what a busy 2-core machine adds for HTTP, tokenization and delivery (measured on TTFT 8..160 ms, on e2e
  4..90 ms). Output is 128 tokens a request, so a decode phase of several tenths of a second sits between TTFT and
  the end: a replay that stopped its TTFT clock at the last token, or timed in milliseconds, is outside the bound.
- TPOT and ITL: vLLM's are per token (engine-core step timestamps: `last_token_ts - first_token_ts` over
  tokens - 1, and each step's gap). The replay sees SSE chunks, and vLLM merges the tokens of several steps into one
  chunk when the API process lags (vllm/v1/engine/output_processor.py RequestOutputCollector), so the records' ITL
  is per chunk (their chunks can only be fewer than the tokens) and their TPOT spans first to last chunk. The decode
  spans (TPOT x (tokens - 1)) differ by when the first and last chunks were delivered: within SLACK_S (+25 %).
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from kfchaos.demo.stack.vllmengine import MODEL_NAME, EngineInstall, EngineServer
from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.settings import ReplaySettings
from tests.engine.benchclient import (
    prompt_words,
    read_engine,
    run_bench,
    token_count,
    traffic_file,
    visible_seed,
    wait_idle,
)

pytestmark = pytest.mark.integration

REQUESTS = 8
OUTPUT = 128
PROMPT_WORDS = 60  # under one KV block of 128 tokens: no prefix-cache hit, whatever ran before
RATE = 4.0
SLACK_S = 0.25  # delivery, HTTP and tokenization on a busy 2-core machine (see the module's docstring)
CLOCKS_S = 0.001  # the replay's perf_counter against the engine's time.time(), over one request


def replay(server: EngineServer, source: Path, api: str) -> tuple[list[dict[str, Any]], float]:
    """The records, and the seconds the replayer's own event loop stalled (the summary's client_stall total)."""
    settings = ReplaySettings(stage=100, source=str(source), api=api, model=MODEL_NAME, timeout=120.0)
    result = run_stage(plan_stage(settings), server.url)
    rows: list[dict[str, Any]] = result.table.to_pylist()
    stall = result.summary.client_stall
    assert stall is not None
    return rows, stall["total"]


def engine_mean(delta: dict[str, float], histogram: str) -> float:
    return delta[f"{histogram}_sum"] / delta[f"{histogram}_count"]


def assert_later_by_a_bounded_amount(what: str, client: float, engine: float, stall: float) -> None:
    """`stall`: the replayer's own event-loop stalls in all (seconds). A request's times are late by at most the
    stalls it lived through, so the mean by at most their sum: the replay may be later than the engine by what it
    says it stalled, never by more (on 2 cores vLLM's worker spins on one and the client can starve: one run's
    records had a first chunk 1.6 s late, with 1.2 s of it before the connection was taken)."""
    assert engine - CLOCKS_S <= client <= engine + SLACK_S + 0.25 * engine + stall, (
        f"{what}: records' mean {client:.4f}s against the engine's {engine:.4f}s, the replayer stalled {stall:.3f}s"
    )


@pytest.mark.parametrize("api", ["openai-completions", "openai-chat"])
def test_the_replays_records_agree_with_the_engines_counters(
    vllm_engine: EngineServer, tmp_path: Path, api: str
) -> None:
    prompts = [f"[m{i}] " + prompt_words(i, PROMPT_WORDS) for i in range(REQUESTS)]
    seeds = [visible_seed(vllm_engine, api, p) for p in prompts]
    source = traffic_file(tmp_path / "traffic.jsonl", api, prompts, OUTPUT, RATE, seeds)
    if api == "openai-completions":
        expected_prompts = [token_count(vllm_engine, {"prompt": p}) for p in prompts]
    else:
        expected_prompts = [token_count(vllm_engine, {"messages": [{"role": "user", "content": p}]}) for p in prompts]
    wait_idle(vllm_engine)
    before = read_engine(vllm_engine)
    rows, stall = replay(vllm_engine, source, api)
    wait_idle(vllm_engine)  # the engine counts a request when its last step is processed: all of them are now
    delta = read_engine(vllm_engine).minus(before)

    assert [r["error"] for r in rows] == [None] * REQUESTS, rows
    assert {r["status"] for r in rows} == {200}
    assert {r["finish_reason"] for r in rows} == {"length"}  # max_tokens reached, as vLLM says it
    assert {r["model"] for r in rows} == {MODEL_NAME}
    # Requests: exact.
    assert delta["vllm:e2e_request_latency_seconds_count"] == REQUESTS
    assert delta["success:length"] == REQUESTS
    assert delta["vllm:request_success_total"] == REQUESTS  # no other finished_reason
    # Tokens: exact, per request and in total.
    by_id = sorted(rows, key=lambda r: int(r["request_id"][1:]))
    assert [r["output_tokens"] for r in by_id] == [OUTPUT] * REQUESTS
    assert sum(r["output_tokens"] for r in rows) == delta["vllm:generation_tokens_total"] == REQUESTS * OUTPUT
    assert [r["prompt_tokens"] for r in by_id] == expected_prompts
    assert sum(r["prompt_tokens"] for r in rows) == delta["vllm:prompt_tokens_total"]
    # One TTFT and one TPOT observation per request, one ITL observation per token after the first.
    assert delta["vllm:time_to_first_token_seconds_count"] == REQUESTS
    assert delta["vllm:request_time_per_output_token_seconds_count"] == REQUESTS
    assert delta["vllm:inter_token_latency_seconds_count"] == REQUESTS * (OUTPUT - 1)

    ttft = statistics.mean(r["ttft"] for r in rows)
    latency = statistics.mean(r["latency"] for r in rows)
    assert_later_by_a_bounded_amount("TTFT", ttft, engine_mean(delta, "vllm:time_to_first_token_seconds"), stall)
    assert_later_by_a_bounded_amount(
        "e2e latency", latency, engine_mean(delta, "vllm:e2e_request_latency_seconds"), stall
    )
    # Decode spans: the records' first-to-last chunk against the engine's first-to-last token (TPOT x (n - 1));
    # vLLM's ITL sum over a request is the same span, so both of its histograms say the same.
    span = statistics.mean(r["tpot"] * (OUTPUT - 1) for r in rows)
    engine_span = engine_mean(delta, "vllm:request_time_per_output_token_seconds") * (OUTPUT - 1)
    assert delta["vllm:inter_token_latency_seconds_sum"] == pytest.approx(engine_span * REQUESTS, rel=1e-6)
    assert abs(span - engine_span) <= SLACK_S + 0.25 * engine_span + stall, (span, engine_span, stall)
    for row in rows:
        # The records' ITL is per chunk: the chunk gaps add up to the decode span, and there are no more gaps than
        # tokens after the first (vLLM merges tokens into a chunk, never splits one).
        gaps = row["tpot"] * (OUTPUT - 1) / row["itl_mean"]
        assert 1 <= round(gaps) <= OUTPUT - 1, row
        assert row["itl_max"] >= row["itl_mean"] > 0
        assert row["ttft"] + row["tpot"] * (OUTPUT - 1) <= row["latency"] + 1e-6
    print(
        f"{api}: TTFT records {ttft * 1e3:.1f} ms vs engine "
        f"{engine_mean(delta, 'vllm:time_to_first_token_seconds') * 1e3:.1f} ms; e2e {latency * 1e3:.1f} vs "
        f"{engine_mean(delta, 'vllm:e2e_request_latency_seconds') * 1e3:.1f} ms; decode span {span * 1e3:.1f} vs "
        f"{engine_span * 1e3:.1f} ms; ITL per chunk {statistics.mean(r['itl_mean'] for r in rows) * 1e3:.2f} ms vs "
        f"per token {engine_mean(delta, 'vllm:inter_token_latency_seconds') * 1e3:.2f} ms; "
        f"replayer stalled {stall * 1e3:.0f} ms"
    )


BENCH_REQUESTS = 8
BENCH_INPUT = 64
BENCH_OUTPUT = 32
BENCH_RATE = 2.0  # a request every half second: each is served on its own, whichever client's arrivals


def test_the_replay_and_vllms_benchmark_client_agree_on_the_same_traffic(
    vllm_install: EngineInstall, vllm_engine: EngineServer, tmp_path: Path
) -> None:
    """Same shape for both clients: completions, 64 prompt tokens, 32 output tokens (ignore_eos), 8 requests at 2 a
    second with near-equal gaps. Each client's counts are checked against the engine's deltas during its own run,
    then the two clients' figures against each other."""
    # "[bN] " is 4 tokens in this tokenizer ("[", "b", "N", "]"), each filler word one more: 64 tokens.
    prompts = [f"[b{i}] " + prompt_words(i, BENCH_INPUT - 4) for i in range(BENCH_REQUESTS)]
    assert [token_count(vllm_engine, {"prompt": p}) for p in prompts] == [BENCH_INPUT] * BENCH_REQUESTS
    seeds = [visible_seed(vllm_engine, "openai-completions", p) for p in prompts]
    source = traffic_file(tmp_path / "traffic.jsonl", "openai-completions", prompts, BENCH_OUTPUT, BENCH_RATE, seeds)

    wait_idle(vllm_engine)
    before = read_engine(vllm_engine)
    rows, stall = replay(vllm_engine, source, "openai-completions")
    wait_idle(vllm_engine)
    ours = read_engine(vllm_engine).minus(before)
    assert [r["error"] for r in rows] == [None] * BENCH_REQUESTS
    assert ours["vllm:e2e_request_latency_seconds_count"] == BENCH_REQUESTS
    assert sum(r["output_tokens"] for r in rows) == ours["vllm:generation_tokens_total"]
    assert sum(r["prompt_tokens"] for r in rows) == ours["vllm:prompt_tokens_total"] == BENCH_REQUESTS * BENCH_INPUT

    before = read_engine(vllm_engine)
    started = time.monotonic()
    bench = run_bench(
        vllm_install, vllm_engine, tmp_path / "bench",
        input_len=BENCH_INPUT, output_len=BENCH_OUTPUT, prompts=BENCH_REQUESTS, rate=BENCH_RATE,
    )  # fmt: skip
    bench_s = time.monotonic() - started
    wait_idle(vllm_engine)
    theirs = read_engine(vllm_engine).minus(before)
    # serve.py's benchmark() sends the first prompt once more before the run (its endpoint ready check) unless
    # --ready-check-timeout-sec is 0, as here: the engine sees exactly the bench's requests.
    assert "Skipping endpoint ready check" in bench["stdout"]
    assert bench["completed"] == BENCH_REQUESTS and bench["failed"] == 0
    assert theirs["vllm:e2e_request_latency_seconds_count"] == BENCH_REQUESTS
    assert bench["output_lens"] == [BENCH_OUTPUT] * BENCH_REQUESTS
    assert theirs["vllm:generation_tokens_total"] == BENCH_REQUESTS * BENCH_OUTPUT
    assert theirs["vllm:prompt_tokens_total"] == sum(bench["input_lens"]) == bench["total_input_tokens"]

    # The two clients against each other. Output tokens: exact. Prompt tokens: the bench's random prompts are random
    # token ids decoded to text, whose re-encoding may merge or split a few tokens (vllm/benchmarks/datasets/datasets.py
    # RandomDataset warns of it); serve.py's _align_prompts_to_server_tokenizer re-cuts them only when the first
    # prompt's count is off, and only those that came out longer. So its total is 512 give or take a few: at most 8
    # (one token a request on average) either way.
    assert bench["total_output_tokens"] == sum(r["output_tokens"] for r in rows)
    assert abs(sum(r["prompt_tokens"] for r in rows) - bench["total_input_tokens"]) <= 8

    # Times: both are client-side clocks over the same shape on the same engine, a few minutes apart, and differ
    # by definition in small ways: the bench's TTFT stops at the first chunk with a choice, even one whose text is
    # empty (a byte-level BPE holds back a partial UTF-8 character), the replay's at the first with text; the
    # bench's latency stops at the last choice chunk, the replay's after the usage chunk and [DONE]. Each client's
    # mean is within SLACK_S (+25 %) above the engine's own for its run; so the two are within SLACK_S (+25 %) of
    # each other.
    ttft_ours = statistics.mean(r["ttft"] for r in rows)
    e2e_ours = statistics.mean(r["latency"] for r in rows)
    itl_ours = statistics.mean(r["itl_mean"] for r in rows)
    ttft_theirs = bench["mean_ttft_ms"] / 1e3
    e2e_theirs = statistics.mean(bench["latencies"])
    itl_theirs = bench["mean_itl_ms"] / 1e3
    engine_ttft = engine_mean(ours, "vllm:time_to_first_token_seconds")
    assert_later_by_a_bounded_amount("replay TTFT", ttft_ours, engine_ttft, stall)
    # The bench measures no stalls of its own: its bound is the plain one.
    assert_later_by_a_bounded_amount(
        "bench TTFT", ttft_theirs, engine_mean(theirs, "vllm:time_to_first_token_seconds"), 0.0
    )
    assert_later_by_a_bounded_amount(
        "replay e2e", e2e_ours, engine_mean(ours, "vllm:e2e_request_latency_seconds"), stall
    )
    # The bench's e2e ends at its last choice chunk, which is written after the engine's finishing step: same bound.
    assert_later_by_a_bounded_amount(
        "bench e2e", e2e_theirs, engine_mean(theirs, "vllm:e2e_request_latency_seconds"), 0.0
    )
    for what, a, b in (("TTFT", ttft_ours, ttft_theirs), ("e2e", e2e_ours, e2e_theirs)):
        assert abs(a - b) <= SLACK_S + 0.25 * max(a, b) + stall, f"{what}: replay {a:.4f}s, vllm bench {b:.4f}s"
    # ITL: both clients time chunks (serve.py appends a gap per chunk with a choice), so both are per chunk; the
    # bench counts empty-text chunks the replay skips. Their means are compared through the decode span they cover.
    assert abs(itl_ours - itl_theirs) * (BENCH_OUTPUT - 1) <= SLACK_S + 0.25 * e2e_ours + stall, (itl_ours, itl_theirs)
    assert math.isfinite(itl_ours) and math.isfinite(itl_theirs)
    print(
        f"replay vs vllm bench: TTFT {ttft_ours * 1e3:.1f} vs {ttft_theirs * 1e3:.1f} ms, e2e {e2e_ours * 1e3:.1f} vs "
        f"{e2e_theirs * 1e3:.1f} ms, ITL {itl_ours * 1e3:.2f} vs {itl_theirs * 1e3:.2f} ms; engine TTFT "
        f"{engine_mean(ours, 'vllm:time_to_first_token_seconds') * 1e3:.1f} / "
        f"{engine_mean(theirs, 'vllm:time_to_first_token_seconds') * 1e3:.1f} ms; bench took {bench_s:.0f}s"
    )
