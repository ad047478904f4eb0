"""Traffic formats: every reader streams requests, and every malformed line is counted with its number."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kfchaos.traffic.formats import READERS
from kfchaos.traffic.formats.gor import SEPARATOR
from kfchaos.traffic.formats.sharegpt import read_sharegpt
from kfchaos.traffic.source import SourceReport


def read(fmt: str, path: Path) -> tuple[list, SourceReport]:
    report = SourceReport(str(path), fmt)
    return list(READERS[fmt](path, report)), report


def jsonl_lines(n: int) -> list[str]:
    return [
        json.dumps(
            {
                "id": f"r{i}",
                "timestamp": 1000.0 + i / 10,
                "method": "POST",
                "path": "/v1/chat/completions",
                "headers": {"content-type": "application/json"},
                "body": {"messages": [{"role": "user", "content": f"q{i}"}]},
            }
        )
        for i in range(n)
    ]


def test_jsonl_plain_and_gzip_give_the_same_requests(tmp_path: Path) -> None:
    text = "\n".join(jsonl_lines(5)) + "\n"
    (tmp_path / "a.jsonl").write_text(text)
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    plain, _ = read("jsonl", tmp_path / "a.jsonl")
    zipped, report = read("jsonl", tmp_path / "a.jsonl.gz")
    assert plain == zipped
    assert [r.id for r in plain] == [f"r{i}" for i in range(5)]
    assert plain[1].timestamp == pytest.approx(1000.1)
    assert json.loads(plain[0].body) == {"messages": [{"role": "user", "content": "q0"}]}
    assert report.records == 5 and report.malformed_count == 0


def test_jsonl_malformed_lines_are_reported_with_numbers_and_skipped(tmp_path: Path) -> None:
    good = jsonl_lines(3)
    lines = [
        good[0],
        "{not json",
        json.dumps({"method": "GET"}),  # no timestamp
        good[1],
        json.dumps({"timestamp": 1, "path": "no-slash"}),
        json.dumps({"timestamp": "yesterday"}),
        "",
        good[2],
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    requests, report = read("jsonl", path)
    assert [r.id for r in requests] == ["r0", "r1", "r2"]
    assert report.malformed_count == 4
    assert [m.line for m in report.malformed] == [2, 3, 5, 6]
    assert "timestamp" in report.malformed[1].reason
    assert "path" in report.malformed[2].reason
    assert any(f"{path}:2: skipped" in line for line in report.describe())


def test_truncated_gzip_keeps_what_was_read_and_says_so(tmp_path: Path) -> None:
    data = gzip.compress(("\n".join(jsonl_lines(2000)) + "\n").encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    requests, report = read("jsonl", path)
    assert 0 < len(requests) < 2000
    assert report.truncated
    assert report.malformed_count >= 1
    assert "ends early" in report.malformed[-1].reason


def test_truncated_plain_file_last_line_is_malformed(tmp_path: Path) -> None:
    text = "\n".join(jsonl_lines(3))
    path = tmp_path / "cut.jsonl"
    path.write_text(text[:-10])
    requests, report = read("jsonl", path)
    assert len(requests) == 2
    assert [m.line for m in report.malformed] == [3]


def test_nginx_combined_log(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text(
        '10.0.0.1 - - [02/Dec/2026:10:00:00 +0000] "GET /healthz HTTP/1.1" 200 12 "-" "curl/8"\n'
        '10.0.0.1 - - [02/Dec/2026:10:00:01 +0000] "POST /v1/completions HTTP/1.1" 200 99 "-" "py" 1796205601.250\n'
        "garbage line\n"
    )
    requests, report = read("nginx", path)
    assert [(r.method, r.path) for r in requests] == [("GET", "/healthz"), ("POST", "/v1/completions")]
    assert requests[0].timestamp == 1796205600.0
    assert requests[1].timestamp == 1796205601.25  # $msec wins over the 1 s resolution of $time_local
    assert [m.line for m in report.malformed] == [3]


def test_envoy_default_and_json_formats(tmp_path: Path) -> None:
    path = tmp_path / "envoy.log"
    path.write_text(
        '[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" '
        '"nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"\n'
        + json.dumps({"start_time": "2016-04-15T20:17:01.000Z", "method": "GET", "path": "/x", "x-request-id": "j1"})
        + "\n"
        + json.dumps({"start_time": "2016-04-15T20:17:02.000Z", "method": "GET"})
        + "\n"
    )
    requests, report = read("envoy", path)
    assert [r.id for r in requests] == ["cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2", "j1"]
    assert requests[1].timestamp - requests[0].timestamp == pytest.approx(0.69)
    assert report.malformed[0].line == 3 and "path" in report.malformed[0].reason


def test_goreplay_file_keeps_requests_only(tmp_path: Path) -> None:
    sep = b"\n" + SEPARATOR + b"\n"
    body = b'{"a": 1}'
    records = [
        b"1 abc 1764669600000000000 0\nPOST /v1/x HTTP/1.1\r\nHost: prod\r\nContent-Length: 8\r\nX-A: b\r\n\r\n" + body,
        b"2 abc 1764669600100000000 100\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"1 def 1764669600500000000 0\nGET /y HTTP/1.1\r\nHost: prod\r\n\r\n",
        b"1 bad 17646696\nnot http at all\r\n\r\n",
    ]
    path = tmp_path / "capture.gor"
    path.write_bytes(sep.join(records) + sep)
    requests, report = read("gor", path)
    assert [(r.id, r.method, r.path) for r in requests] == [("abc", "POST", "/v1/x"), ("def", "GET", "/y")]
    assert requests[0].body == body
    assert requests[0].headers == (("X-A", "b"),)  # framing headers are the client's own
    assert requests[1].timestamp - requests[0].timestamp == pytest.approx(0.5)
    assert report.malformed_count == 1


def test_sharegpt_array_streamed_with_synthesized_arrivals(tmp_path: Path) -> None:
    conversations = [
        {"id": f"c{i}", "conversations": [{"from": "human", "value": f"hi {i}"}, {"from": "gpt", "value": "a b c"}]}
        for i in range(300)
    ]
    conversations.insert(5, {"id": "broken", "conversations": [{"from": "gpt", "value": "no question"}]})
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations, indent=1))
    report = SourceReport(str(path), "sharegpt")
    requests = list(read_sharegpt(path, report, rate=50.0, seed=1))
    assert len(requests) == 300 and requests[0].prompt == "hi 0" and requests[0].max_tokens == 3
    times = [r.timestamp for r in requests]
    assert times == sorted(times)
    assert 300 / times[-1] == pytest.approx(50, rel=0.25)  # Poisson arrivals at the rate asked for
    assert report.malformed_count == 1 and report.malformed[0].line > 1
    again = list(read_sharegpt(path, SourceReport(str(path), "sharegpt"), rate=50.0, seed=1))
    assert [r.timestamp for r in again] == times


def test_sharegpt_truncated_array_is_reported(tmp_path: Path) -> None:
    text = json.dumps([{"conversations": [{"from": "human", "value": "x" * 50}]}] * 10)
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    report = SourceReport(str(path), "sharegpt")
    requests = list(read_sharegpt(path, report, rate=10.0))
    assert 0 < len(requests) < 10
    assert report.truncated and report.malformed_count == 1
