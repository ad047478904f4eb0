"""Fuzz the traffic side: every reader, the `replay` flag parser, and the parsers of a target's answer (HTTP + SSE).

Contract (issue 13): a reader yields only requests that are valid HTTP to send (finite in-range timestamp,
token method, percent-encoded path, RFC 9110 header fields) and counts everything else as skipped, without
raising and without quoting a value; a flag is either accepted with finite, in-range settings or refused as
an input error naming the flag; an answer either parses or ends that one request as a protocol error.

CI runs a fixed, derandomized budget per test (tests/fuzz/conftest.py); `make fuzz` runs many more. The readers
run in a forked child under the harness's time and memory bound (tests/fuzz/harness.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfchaos.bounds import MAX_TIMESTAMP, MAX_TOKENS
from kfchaos.errors import KfchaosError
from kfchaos.traffic import http1
from kfchaos.traffic.formats import READERS
from kfchaos.traffic.formats.sharegpt import read_sharegpt
from kfchaos.traffic.http1 import Connection, Exchange, parse_target
from kfchaos.traffic.httpsyntax import header_problem, is_token
from kfchaos.traffic.source import SourceReport
from kfchaos.traffic.sse import SseError, SseTimer
from kfchaos.traffic.tagging import HeaderPolicy
from kfchaos.traffic.wire import RequestBuilder
from tests.fuzz.harness import bounded, budget


def fuzz(ci_examples: int) -> settings:
    """This test's CI budget (scaled under `make fuzz`); other settings come from the loaded profile."""
    return settings(
        max_examples=budget(ci_examples),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    )


PLANTED = "PLANTEDsecret0123"
_PATH_OK = re.compile(r"/[A-Za-z0-9/?:@!$&'()*+,;=%\-._~]*")

# JSON values with the shapes that broke readers before: NaN, infinities, huge integers, CR LF, non-Latin-1 text.
_atoms = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**400, -(10**400), 2**31, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["/ok", "/€", "/a\r\nX-Evil: 1", "Authorization ", "cookie\t", "Content-Length ", PLANTED]),
)
_json = st.recursive(
    _atoms,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_header_names = st.one_of(
    st.text(max_size=12), st.sampled_from(["Authorization ", "cookie\t", "Content-Length ", "X-A", "a b"])
)
_header_values = st.one_of(
    st.text(max_size=20), st.sampled_from(["ok\r\nAuthorization: Bearer x", "a\x00b", " pad ", "é€"])
)
_record = st.fixed_dictionaries(
    {},
    optional={
        "id": _json,
        "timestamp": st.one_of(_atoms, st.sampled_from(["2026-01-01T00:00:00Z", "2026-13-01T00:00:00Z", "x" * 100])),
        "method": st.one_of(_json, st.sampled_from(["GET", "post", "BREW", ["GET"]])),
        "path": _json,
        "headers": st.one_of(_json, st.dictionaries(_header_names, _header_values, max_size=3)),
        "body": _json,
        "body_base64": _json,
        "start_time": _atoms,
        ":path": _json,
    },
)


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, allow_nan=True).encode("utf-8", "surrogatepass")


def _lines_strategy() -> st.SearchStrategy[list[bytes]]:
    raw = st.binary(max_size=200)
    structured = _record.map(_line)
    deep = st.integers(min_value=1, max_value=3000).map(lambda n: b"[" * n + b"]" * n)
    return st.lists(st.one_of(structured, structured, raw, deep), max_size=8)


def assert_sendable(request: Any) -> None:
    assert math.isfinite(request.timestamp)
    assert -MAX_TIMESTAMP <= request.timestamp <= MAX_TIMESTAMP
    assert is_token(request.method), request.method
    assert _PATH_OK.fullmatch(request.path), request.path
    for name, value in request.headers:
        assert header_problem(name, value) is None


def assert_silent(report: SourceReport) -> None:
    text = json.dumps(report.to_dict()) + "\n".join(report.describe())
    assert PLANTED not in text


@pytest.mark.parametrize("fmt", sorted(READERS))
@fuzz(40)
@given(lines=_lines_strategy())
def test_readers_yield_only_sendable_requests(tmp_path: Path, fmt: str, lines: list[bytes]) -> None:
    path = tmp_path / f"fuzz.{fmt}"
    if fmt == "gor":  # records framed by the monkeys, each a meta line and an HTTP request
        path.write_bytes(
            b"".join(
                b"1 id 1000000000\n" + line + b"\r\n\r\n\n\xf0\x9f\x90\xb5\xf0\x9f\x99\x88\xf0\x9f\x99\x89\n"
                for line in lines
            )
        )
    else:
        path.write_bytes(b"\n".join(lines) + b"\n")
    outcome = bounded(lambda: _read(fmt, path))  # in a child, under the harness's time and memory bound
    assert outcome.broke is None and outcome.error is None, (outcome.broke, outcome.error)
    requests, report = outcome.value
    for request in requests:
        assert_sendable(request)
    assert report.records == len(requests)
    assert_silent(report)


def _read(fmt: str, path: Path) -> tuple[list[Any], SourceReport]:
    report = SourceReport(str(path), fmt)
    return list(READERS[fmt](path, report)), report


_gor_heads = st.lists(
    st.one_of(
        st.tuples(_header_names, _header_values).map(lambda h: f"{h[0]}: {h[1]}".encode("utf-8", "surrogatepass")),
        st.binary(max_size=40),
    ),
    max_size=4,
)


@fuzz(60)
@given(
    meta=st.one_of(
        st.just(b"1 id 1000000000"), st.binary(max_size=30), st.sampled_from([b"1 a " + b"9" * 400, b"1 a -5"])
    ),
    method=st.one_of(st.just(b"GET"), st.binary(max_size=8)),
    target=st.one_of(st.just(b"/a"), st.binary(max_size=20).map(lambda b: b"/" + b)),
    heads=_gor_heads,
)
def test_gor_records(tmp_path: Path, meta: bytes, method: bytes, target: bytes, heads: list[bytes]) -> None:
    path = tmp_path / "f.gor"
    head = b"\r\n".join([method + b" " + target + b" HTTP/1.1", *heads])
    path.write_bytes(meta + b"\n" + head + b"\r\n\r\nbody\n\xf0\x9f\x90\xb5\xf0\x9f\x99\x88\xf0\x9f\x99\x89\n")
    report = SourceReport(str(path), "gor")
    for request in READERS["gor"](path, report):
        assert_sendable(request)
    assert_silent(report)


_conversation = st.one_of(
    _json,
    st.fixed_dictionaries(
        {
            "conversations": st.lists(
                st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt", "x"]), "value": _json}), max_size=3
            )
        },
        optional={"id": _json},
    ),
)


@fuzz(60)
@given(
    items=st.lists(_conversation, max_size=6), array=st.booleans(), cut=st.integers(0, 400), junk=st.binary(max_size=20)
)
def test_sharegpt_reader(tmp_path: Path, items: list[Any], array: bool, cut: int, junk: bytes) -> None:
    text = json.dumps(items, allow_nan=True) if array else "\n".join(json.dumps(i, allow_nan=True) for i in items)
    data = text.encode("utf-8", "surrogatepass")
    data = data[: max(1, len(data) - cut)] + junk if cut % 3 == 0 else data
    path = tmp_path / "p.json"
    path.write_bytes(data)

    def read() -> tuple[list[Any], SourceReport]:
        report = SourceReport(str(path), "sharegpt")
        return list(read_sharegpt(path, report, rate=10.0)), report

    outcome = bounded(read)
    assert outcome.broke is None and outcome.error is None, (outcome.broke, outcome.error)
    requests, report = outcome.value
    for request in requests:
        assert request.prompt and math.isfinite(request.timestamp)
        assert request.max_tokens is not None and request.max_tokens >= 1
    assert report.records <= len(items)


# ------------------------------------------------------------------ flags


def _replay_parser() -> argparse.ArgumentParser:
    from kfchaos.cli import build_parser

    return build_parser("replay")


_flag_values = st.one_of(
    st.sampled_from(
        ["nan", "inf", "-inf", "0", "-1", "1e400", "1" * 50, "0s", "1ns", "99999h", "2/2", "-1/3", "", "1/0"]
    ),
    st.text(max_size=12),
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
_flags = [
    "--speed",
    "--rate",
    "--duration",
    "--timeout",
    "--concurrency",
    "--max-lag",
    "--stage",
    "--seed",
    "--shard",
    "--header",
]


@fuzz(150)
@given(
    chosen=st.lists(st.tuples(st.sampled_from(_flags), _flag_values), max_size=4),
    target=st.one_of(
        st.just("http://127.0.0.1:9"),
        st.text(max_size=20),
        st.sampled_from(["http://[::1", "http://u:p@h/", "http://h:0x/", "http://h/a\r\nb"]),
    ),
)
def test_replay_flags_are_refused_or_finite(tmp_path: Path, chosen: list[tuple[str, str]], target: str) -> None:
    from kfchaos.cli.cmd_replay import build_settings

    traffic = tmp_path / "t.jsonl"
    traffic.write_text('{"timestamp": 1}\n')
    argv = ["replay", str(traffic), "--target", target]
    for flag, value in chosen:
        argv += [f"{flag}={value}"]
    parser = _replay_parser()
    try:
        args = parser.parse_args(argv)
        parse_target(args.target)
        settings_ = build_settings(args)
    except SystemExit as exc:
        assert exc.code == 3
        return
    except KfchaosError as exc:
        assert "Traceback" not in str(exc)
        return
    for value in (settings_.speed, settings_.prompt_rate, settings_.timeout, settings_.max_send_lag_p99):
        assert math.isfinite(value) and value >= 0
    assert settings_.duration is None or 0 < settings_.duration < math.inf
    assert settings_.concurrency_limit >= 1 and 1 <= settings_.stage <= 100
    builder = RequestBuilder("h", "", settings_.stage, "http", None, settings_.headers)
    head = builder.plain_extra.decode("latin-1")
    assert all(header_problem(*line.split(": ", 1)) is None for line in head.split("\r\n") if line)


# ------------------------------------------------------------------ a target's answer

_chunks = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.one_of(
            _json, st.lists(st.fixed_dictionaries({}, optional={"delta": _json, "text": _json}), max_size=2)
        ),
        "usage": st.one_of(
            _json, st.fixed_dictionaries({}, optional={"completion_tokens": _atoms, "prompt_tokens": _atoms})
        ),
        "error": _json,
    },
)


@fuzz(200)
@given(
    events=st.lists(
        st.one_of(_chunks.map(lambda c: b"data: " + _line(c)), st.binary(max_size=40), st.just(b"data: [DONE]")),
        max_size=6,
    ),
    cuts=st.lists(st.integers(0, 400), max_size=5),
)
def test_sse_answers_parse_or_are_protocol_errors(events: list[bytes], cuts: list[int]) -> None:
    stream = b"\n\n".join(events) + b"\n\n"
    timer = SseTimer()
    points = [0, *sorted(c for c in cuts if c < len(stream)), len(stream)]
    try:
        for i in range(len(points) - 1):
            timer.feed(stream[points[i] : points[i + 1]], float(i))
        timer.finish(99.0)
    except SseError as exc:
        assert PLANTED not in str(exc)
        return
    for count in (timer.completion_tokens, timer.prompt_tokens):
        assert count is None or (type(count) is int and 0 <= count <= MAX_TOKENS)
    assert (timer.first is None) == (timer.last is None)
    assert timer.first is None or timer.first <= timer.last  # type: ignore[operator]


class _Pool:
    """What a Connection needs of its pool, recording the outcome."""

    def __init__(self) -> None:
        self.clock = lambda: 1.0
        self.finished_with: list[Exchange] = []

    def finished(self, connection: Connection, exchange: Exchange) -> None:
        self.finished_with.append(exchange)

    def lost(self, connection: Connection) -> None:
        pass


class _Transport(asyncio.Transport):
    def write(self, data: Any) -> None:
        pass

    def abort(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


_responses = st.one_of(
    st.binary(max_size=300),
    st.tuples(
        st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 999 X", b"HTTP/1.1 101 Switching", b"HTTP/9 200 OK", b"junk"]),
        st.lists(st.sampled_from([b"Content-Length: 5", b"Content-Length: -1", b"Transfer-Encoding: chunked",
                                  b"Content-Length: 99999999999999999999", b"Connection: close", b"X: \x00"]),
                 max_size=3),
        st.binary(max_size=200),
    ).map(lambda r: b"\r\n".join([r[0], *r[1]]) + b"\r\n\r\n" + r[2]),
)  # fmt: skip


@fuzz(200)
@given(response=_responses, streaming=st.booleans(), cut=st.integers(0, 300))
def test_http_answers_end_one_request_only(response: bytes, streaming: bool, cut: int) -> None:
    pool = _Pool()
    connection = Connection(pool)  # type: ignore[arg-type]
    connection.connection_made(_Transport())
    exchange = Exchange(None, b"\x00" * 16, b"GET / HTTP/1.1\r\n\r\n", SseTimer() if streaming else None)
    connection.send(exchange)
    connection.data_received(response[:cut])
    connection.data_received(response[cut:])
    connection.connection_lost(None)
    assert exchange.complete and pool.finished_with == [exchange]
    assert exchange.error in (None, "protocol", "connect")
    assert -1 <= exchange.status <= 999


def test_an_answer_over_the_byte_bound_is_a_protocol_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http1, "MAX_RESPONSE_BYTES", 1000)
    pool = _Pool()
    connection = Connection(pool)  # type: ignore[arg-type]
    connection.connection_made(_Transport())
    exchange = Exchange(None, b"\x00" * 16, b"", None)
    connection.send(exchange)
    connection.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 2000)
    assert exchange.error == "protocol" and pool.finished_with == [exchange]


def test_header_policy_never_emits_an_invalid_field() -> None:
    recorded = [("X-A", "ok"), ("X-B", "a\r\nInjected: 1"), ("Bad Name", "x"), ("authorization", "t")]
    for name, value in HeaderPolicy().apply(recorded):
        assert header_problem(name, value) is None
