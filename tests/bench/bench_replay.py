"""Replay engine benchmark (`make bench BENCH=replay`).

Reference: wrk against the same loopback nginx, measured in the same run. Server and client are pinned
to separate cores (taskset): nginx (or the SSE server) on core 0, wrk or the replayer on core 1. Each
replayer figure comes from a child process, so its memory and CPU are its own.

Figures: sustained open-loop rate (highest rate tried that stays valid and on schedule), p99 send lag at
20,000 req/s, SSE chunks parsed per second, concurrent open streams, bytes per recorded request, and a
large generated file streamed (and its first seconds replayed) with peak memory.
Environment: KFCHAOS_BENCH_LARGE (requests in the large file, default 2,000,000), KFCHAOS_BENCH_SECONDS
(length of each rate step, default 4), KFCHAOS_BENCH_TRIES (tries per rate step, best kept, default 3).
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kfchaos.demo.stack.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVER_CPU, CLIENT_CPU = "0", "1"
STEP_SECONDS = float(os.environ.get("KFCHAOS_BENCH_SECONDS", "4"))
LARGE = int(os.environ.get("KFCHAOS_BENCH_LARGE", "2000000"))
TRIES = int(os.environ.get("KFCHAOS_BENCH_TRIES", "3"))
NGINX_CONF = """worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 30000; }}
http {{
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  server {{ listen 127.0.0.1:{port} backlog=16384; location / {{ return 200 "ok"; }} }}
}}
"""


def _wait_port(port: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port}")


@contextmanager
def _process(argv: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_port(port)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _child(*args: str, timeout: float = 300) -> dict[str, Any]:
    """Run a measurement in a fresh replayer process pinned to the client core; it prints one JSON line.
    `cpu_s` is the child's CPU time (user + system): unlike rates, it hardly moves when other work shares the
    machine."""
    argv = ["taskset", "-c", CLIENT_CPU, sys.executable, "-m", "tests.bench.bench_replay", *args]
    before = _cpu_children()
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=True)
    result = dict(json.loads(out.stdout.strip().splitlines()[-1]))
    result["cpu_s"] = _cpu_children() - before
    return result


# ---------------------------------------------------------------- child measurements


def _small_requests_file(path: Path, rate: float, seconds: float, gzip_it: bool = False) -> None:
    opener: Any = gzip.open if gzip_it else open
    n = int(rate * seconds)
    with opener(path, "wt") as stream:
        for start in range(0, n, 10000):
            stream.write(
                "".join(
                    f'{{"id":"r{i}","timestamp":{i / rate:.6f},"path":"/"}}\n'
                    for i in range(start, min(n, start + 10000))
                )
            )


def child_rate(url: str, rate: str, seconds: str) -> dict[str, Any]:
    from kfchaos.traffic.api import plan_stage, run_stage
    from kfchaos.traffic.settings import ReplaySettings

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "small.jsonl"
        _small_requests_file(path, float(rate), float(seconds))
        plan = plan_stage(ReplaySettings(stage=100, source=str(path), timeout=10.0, concurrency_limit=20000))
        before = resource.getrusage(resource.RUSAGE_SELF)
        result = run_stage(plan, url, warm_connections=64)
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    s = result.summary
    lag = s.send_lag or {}
    return {"rate": float(rate), "achieved": s.achieved_rate, "ok": s.ok, "intended": s.intended,
            "lag_p50": lag.get("p50"), "lag_p99": lag.get("p99"), "lag_max": lag.get("max"),
            "valid": s.valid, "reason": s.invalid_reason, "errors": s.errors,
            "cpu_us": cpu / max(1, s.intended) * 1e6}  # fmt: skip


def child_streams(url: str, count: str) -> dict[str, Any]:
    from kfchaos.spec import Synthetic
    from kfchaos.traffic.api import plan_stage, run_stage
    from kfchaos.traffic.settings import ReplaySettings

    n = int(count)
    synthetic = Synthetic.model_validate(
        {"rate": n, "arrival": "constant", "prompt_tokens": {"distribution": "fixed", "mean": 16},
         "output_tokens": {"distribution": "fixed", "mean": 20}}
    )  # fmt: skip
    settings = ReplaySettings(stage=100, synthetic=synthetic, duration=1.0, api="openai-completions", model="m",
                              timeout=60.0, concurrency_limit=n + 100)  # fmt: skip
    result = run_stage(plan_stage(settings), url)
    rows = result.table.select(["sent", "latency", "error"]).to_pylist()
    events = []
    for row in rows:
        if row["sent"] is not None and row["latency"] is not None:
            events += [(row["sent"], 1), (row["sent"] + row["latency"], -1)]
    open_now = peak = 0
    for _, step in sorted(events):
        open_now += step
        peak = max(peak, open_now)
    s = result.summary
    return {"requests": s.intended, "ok": s.ok, "peak_open": peak, "errors": s.errors,
            "ttft_p99": (s.ttft or {}).get("p99"), "lag_p99": (s.send_lag or {}).get("p99")}  # fmt: skip


def child_large(path: str, url: str, replay_seconds: str) -> dict[str, Any]:
    from kfchaos.traffic.api import plan_stage, run_stage
    from kfchaos.traffic.settings import ReplaySettings

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    plan = plan_stage(ReplaySettings(stage=100, source=path))
    count = sum(1 for _ in plan.schedule())
    streamed = time.perf_counter() - started
    after_stream = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_stage(plan_stage(ReplaySettings(stage=100, source=path, duration=float(replay_seconds))), url,
                       warm_connections=64)  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"requests": count, "stream_s": streamed, "rss_start_kb": before, "rss_after_stream_kb": after_stream,
            "replayed": result.summary.sent, "replay_valid": result.summary.valid, "rss_peak_kb": peak}  # fmt: skip


def sse_server(port: str, tokens: str, gap: str) -> None:
    """A uvloop SSE server holding each stream open: `tokens` chunks `gap` seconds apart."""
    import asyncio

    import uvloop

    n, pause = int(tokens), float(gap)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

    def chunk(data: bytes) -> bytes:
        event = b"data: " + data + b"\n\n"
        return b"%x\r\n%s\r\n" % (len(event), event)

    token = chunk(b'{"choices":[{"index":0,"text":"tok"}],"usage":null}')
    tail = chunk(b'{"choices":[],"usage":{"prompt_tokens":16,"completion_tokens":%d}}' % n) + chunk(b"[DONE]")

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                headers = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in headers.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                writer.write(head)
                for _ in range(n):
                    await asyncio.sleep(pause)
                    writer.write(token)
                writer.write(tail + b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(client, "127.0.0.1", int(port), backlog=16384)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


# ---------------------------------------------------------------- in-process measurements


def sse_parse_rate(chunks: int = 400_000) -> tuple[float, float]:
    """(chunks/s through SseTimer, chunks/s of the bare json.loads of the same payloads as a reference)."""
    from kfchaos.traffic.sse import SseTimer

    payload = (
        b'{"id":"cmpl-1","object":"chat.completion.chunk",'
        b'"choices":[{"index":0,"delta":{"content":"tok"}}],"usage":null}'
    )
    stream = (b"data: " + payload + b"\n\n") * chunks
    pieces = [stream[i : i + 16384] for i in range(0, len(stream), 16384)]
    timer = SseTimer()
    started = time.perf_counter()
    for i, piece in enumerate(pieces):
        timer.feed(piece, float(i))
    parsed = timer.chunks / (time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(chunks):
        json.loads(payload)
    reference = chunks / (time.perf_counter() - started)
    return parsed, reference


def bytes_per_record(n: int = 1_000_000) -> tuple[float, float]:
    """(column bytes per record, peak RSS growth per record) after recording n requests."""
    import math

    from kfchaos.traffic.recorder import Recorder

    recorder = Recorder(100, 0)
    trace = bytes(range(16))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for i in range(n):
        recorder.add(f"r{i}", trace, 1.0, 1.0, 200, None, 0.001, math.nan, (math.nan,) * 3, math.nan, -1, -1, 80, 60)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    return recorder.nbytes() / n, grown / n


def _wrk(url: str) -> tuple[float, float]:
    """(requests/s, CPU microseconds per request) of wrk -t1 -c64."""
    before = _cpu_children()
    out = subprocess.run(
        ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", "-c64", f"-d{max(2, int(STEP_SECONDS))}s", url],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    cpu = _cpu_children() - before
    total = int(next(line for line in out.splitlines() if "requests in" in line).split()[0])
    return float(
        next(line for line in out.splitlines() if line.startswith("Requests/sec")).split()[1]
    ), cpu / total * 1e6


def run() -> None:
    if (
        shutil.which("taskset") is None
        or subprocess.run(["bash", str(ROOT / "scripts/ensure-bench-tools.sh")]).returncode
    ):
        print("replay: skipped (needs taskset, nginx and wrk: scripts/ensure-bench-tools.sh)")
        return
    cores = os.cpu_count() or 1
    print(f"machine: {cores} cores; server on core {SERVER_CPU}, client on core {CLIENT_CPU}; steps {STEP_SECONDS:g} s")
    parsed, reference = sse_parse_rate()
    print(f"sse parse: {parsed:,.0f} chunks/s (target 200,000: {parsed / 200_000:.2f}x); "
          f"bare json.loads of the same chunks {reference:,.0f}/s (ratio {parsed / reference:.2f})")  # fmt: skip
    columns, rss = bytes_per_record()
    print(f"memory per recorded request: {columns:.0f} B in columns, {rss:.0f} B peak RSS growth (target <= 200 B)")
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        for sub in ("body", "proxy", "fcgi", "uwsgi", "scgi", "logs"):
            Path(tmp, sub).mkdir()
        conf = Path(tmp, "nginx.conf")
        conf.write_text(NGINX_CONF.format(dir=tmp, port=port))
        url = f"http://127.0.0.1:{port}"
        with _process(["taskset", "-c", SERVER_CPU, "nginx", "-p", tmp, "-c", str(conf)], port):
            wrk_rate, wrk_cpu = _wrk(url + "/")
            print(f"reference: wrk -t1 -c64 against nginx: {wrk_rate:,.0f} req/s (closed loop), "
                  f"{wrk_cpu:.1f} us CPU per request")  # fmt: skip
            # Best of TRIES: on a machine shared with other work, a step can lose its core for a while.
            lag = min(
                (_child("rate", url, "20000", str(STEP_SECONDS)) for _ in range(TRIES)), key=lambda r: r["lag_p99"]
            )
            print(f"send lag at 20,000 req/s: p50 {lag['lag_p50'] * 1e3:.2f} ms, p99 {lag['lag_p99'] * 1e3:.2f} ms, "
                  f"max {lag['lag_max'] * 1e3:.1f} ms (target p99 <= 2 ms); "
                  f"ok {lag['ok']}/{lag['intended']}")  # fmt: skip
            best = None
            for rate in (30000, 40000, 50000, 60000):
                step = min(
                    (_child("rate", url, str(rate), str(STEP_SECONDS)) for _ in range(TRIES)),
                    key=lambda r: r["lag_p99"],
                )
                on_time = step["valid"] and step["ok"] == step["intended"]
                cpu_us = step["cpu_us"]  # the replay call: reading, sending, parsing, records, summary
                print(f"  open loop {rate:,} req/s: achieved {step['achieved']:,.0f}/s, lag p99 "
                      f"{step['lag_p99'] * 1e3:.1f} ms, "
                      f"{'valid' if on_time else 'INVALID: ' + str(step['reason'])}; "
                      f"{cpu_us:.1f} us CPU per request ({cpu_us / wrk_cpu:.1f}x wrk's)")  # fmt: skip
                if on_time:  # every rate is tried: on a shared machine a lower one can fail where a higher passes
                    best = rate
            if best:
                print(f"sustained open-loop rate: {best:,} req/s (target 50,000: {best / 50_000:.2f}x; "
                      f"{best / wrk_rate:.2f}x of wrk's closed-loop rate)")  # fmt: skip
            else:
                print("sustained open-loop rate: below 30,000 req/s")
            large = Path(tmp, "large.jsonl.gz")
            started = time.perf_counter()
            _small_requests_file(large, 20000.0, LARGE / 20000.0, gzip_it=True)
            print(f"large file: {LARGE:,} requests, {large.stat().st_size / 1e6:.1f} MB gzip, "
                  f"written in {time.perf_counter() - started:.0f} s")  # fmt: skip
            big = _child("large", str(large), url, "5", timeout=1800)
            print(f"  streamed the whole plan: {big['requests']:,} requests in {big['stream_s']:.1f} s "
                  f"({big['requests'] / big['stream_s']:,.0f}/s); RSS {big['rss_start_kb'] / 1024:.0f} MB at start, "
                  f"{big['rss_after_stream_kb'] / 1024:.0f} MB after (file held whole would be "
                  f">{big['requests'] * 100 / 1e6:.0f} MB of objects)")  # fmt: skip
            print(f"  replayed its first 5 s at 20,000 req/s: {big['replayed']:,} sent, valid {big['replay_valid']}, "
                  f"peak RSS {big['rss_peak_kb'] / 1024:.0f} MB")  # fmt: skip
        sse_port = free_port()
        server = ["taskset", "-c", SERVER_CPU, sys.executable, "-m", "tests.bench.bench_replay", "sse-server",
                  str(sse_port), "20", "0.25"]  # fmt: skip
        with _process(server, sse_port):
            streams = _child("streams", f"http://127.0.0.1:{sse_port}", "5000")
        print(f"concurrent open streams: peak {streams['peak_open']:,} of {streams['requests']:,} "
              f"(ok {streams['ok']:,}, errors {streams['errors']}, target 5,000)")  # fmt: skip


if __name__ == "__main__":
    commands = {"rate": child_rate, "streams": child_streams, "large": child_large}
    if sys.argv[1] == "sse-server":
        sse_server(*sys.argv[2:])
    else:
        print(json.dumps(commands[sys.argv[1]](*sys.argv[2:])))
