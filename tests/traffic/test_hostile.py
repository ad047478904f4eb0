"""Hostile input (issue 13): traffic files, flags and a target's answers end in a result, an input error or
INCONCLUSIVE, within bounds, without header injection and without echoing a secret. Each test fails on the
code before the fix (named in its docstring)."""

from __future__ import annotations

import gzip
import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from kfchaos.cli import main
from kfchaos.demo.stack.ports import free_port
from kfchaos.traffic import engine, http1
from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.formats import READERS
from kfchaos.traffic.formats import sharegpt as sharegpt_module
from kfchaos.traffic.formats.sharegpt import read_sharegpt
from kfchaos.traffic.settings import ReplaySettings
from kfchaos.traffic.source import SourceReport
from kfchaos.traffic.tagging import HeaderPolicy
from tests.conftest import ROOT

from .loopback_server import LoopbackServer

pytestmark = pytest.mark.integration
SECRET = "sk-live-0123456789abcdef"
CLI = "import sys; from kfchaos.cli import main; sys.exit(main())"


def write_jsonl(path: Path, rows: list[Any]) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def ok_rows(n: int, step: float = 0.01) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "timestamp": 1000 + i * step, "path": "/ok"} for i in range(n)]


def read(fmt: str, path: str | Path) -> tuple[list[Any], SourceReport]:
    report = SourceReport(str(path), fmt)
    return list(READERS[fmt](path, report)), report


# ------------------------------------------------------------------ the blocker: replays that never end


@pytest.mark.parametrize("bad", ['{"id": "x", "timestamp": NaN, "path": "/ok"}', '{"timestamp": Infinity}'])
def test_a_nan_timestamp_is_refused_and_the_looping_plan_stays_bounded(tmp_path: Path, bad: str) -> None:
    """Before: NaN passed parse_timestamp, `offset >= end` was never true, the plan looped forever."""
    path = write_jsonl(tmp_path / "t.jsonl", [*ok_rows(5), bad, *ok_rows(5)])
    plan = plan_stage(ReplaySettings(stage=100, source=path, duration=1.0))
    planned = list(itertools.islice(plan.schedule(), 100_000))
    assert len(planned) < 1000
    assert plan.report.malformed_count == 1 and "field timestamp" in plan.report.malformed[0].reason


def test_an_envoy_nan_start_time_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "e.log"
    path.write_text(
        '{"start_time": NaN, "method": "GET", "path": "/a"}\n{"start_time": 5, "method": "GET", "path": "/b"}\n'
    )
    requests, report = read("envoy", path)
    assert [r.path for r in requests] == ["/b"] and "start_time" in report.malformed[0].reason


def test_a_recording_of_one_instant_does_not_loop_in_zero_time(tmp_path: Path) -> None:
    """Before: two requests at one timestamp gave a loop span of 0, so `--duration` was never reached."""
    path = write_jsonl(tmp_path / "t.jsonl", [{"id": "a", "timestamp": 5}, {"id": "b", "timestamp": 5}])
    planned = list(itertools.islice(plan_stage(ReplaySettings(stage=100, source=path, duration=2.0)).schedule(), 1000))
    assert len(planned) == 4  # one lap a second


def test_400_digit_timestamps_are_input_errors_not_crashes(tmp_path: Path) -> None:
    """Before: OverflowError (int too large to convert to float) ended the replay with a traceback."""
    big = "9" * 400
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(f'{{"timestamp": {big}}}\n{{"timestamp": 1, "path": "/ok"}}\n')
    requests, report = read("jsonl", jsonl)
    assert len(requests) == 1 and "out of range" in report.malformed[0].reason
    gor = tmp_path / "t.gor"
    sep = "\n🐵🙈🙉\n"
    gor.write_text(f"1 a {big}\nGET /a HTTP/1.1\r\n\r\n" + sep + "1 b 1000000000\nGET /b HTTP/1.1\r\n\r\n" + sep)
    requests, report = read("gor", gor)
    assert [r.path for r in requests] == ["/b"] and "out of range" in report.malformed[0].reason


@pytest.mark.parametrize(
    ("flags", "name"),
    [
        (["--speed", "nan"], "--speed"),
        (["--speed", "inf"], "--speed"),
        (["--rate", "nan"], "--rate"),
        (["--concurrency", "0"], "--concurrency"),
        (["--duration", "0s"], "--duration"),
        (["--timeout", "0s"], "--timeout"),
        (["--stage", "0"], "--stage"),
        (["--seed", "-1"], "--seed"),
        (["--header", "X-Note: ok\r\nAuthorization: Bearer x"], "--header"),
        (["--header", "Bad Name: x"], "--header"),
    ],
)
def test_bad_flags_are_usage_errors_naming_the_flag(
    tmp_path: Path, flags: list[str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: --speed nan/inf replayed forever; --concurrency 0 dropped every request and said VALID."""
    path = write_jsonl(tmp_path / "t.jsonl", ok_rows(3))
    with pytest.raises(SystemExit) as exit_:
        main(["replay", path, "--target", "http://127.0.0.1:9", "--quiet", *flags])
    assert exit_.value.code == 3 and f"argument {name}" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999", "http://u:pw@127.0.0.1:9", "http://a b/"])
def test_a_bad_target_is_an_input_error(tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: 'http://[::1' raised ValueError out of urlsplit: a traceback, exit 1 (FAIL)."""
    path = write_jsonl(tmp_path / "t.jsonl", ok_rows(3))
    assert main(["replay", path, "--target", url, "--quiet"]) == 3
    err = capsys.readouterr().err
    assert "--target" in err and "pw" not in err


def test_an_unwritable_out_is_refused_before_any_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the stage ran, then writing failed and the records were lost."""
    path = write_jsonl(tmp_path / "t.jsonl", ok_rows(3))
    blocker = tmp_path / "file"
    blocker.write_text("")
    with LoopbackServer() as server:
        code = main(["replay", path, "--target", server.url, "--out", str(blocker / "r.parquet"), "--quiet"])
        assert code == 3 and server.seen == []
    assert "--out" in capsys.readouterr().err


def test_a_dead_target_is_not_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: every request a connect error, and the summary said VALID, exit 0."""
    path = write_jsonl(tmp_path / "t.jsonl", ok_rows(5))
    assert main(["replay", path, "--target", f"http://127.0.0.1:{free_port()}", "--quiet"]) == 2
    out = capsys.readouterr().out
    assert "NO ANSWER" in out and "VALID" not in out.replace("INVALID", "")


@pytest.mark.parametrize(("gap", "seen_before"), [(0.05, 5), (1000.0, 1)])
def test_sigint_and_sigterm_write_the_records_then_exit(tmp_path: Path, gap: float, seen_before: int) -> None:
    """Before: SIGINT exited 130 with no records (and SIGTERM killed the process outright). With the next
    request 1000 s away, the signal must end the wait for it (the run ends long before)."""
    path = write_jsonl(tmp_path / "t.jsonl", ok_rows(400, step=gap))
    with LoopbackServer() as server:
        for signum in (signal.SIGINT, signal.SIGTERM):
            out = tmp_path / f"r{signum}.parquet"
            process = subprocess.Popen(
                [sys.executable, "-c", CLI, "replay", path, "--target", server.url, "--out", str(out),
                 "--duration", "2000s", "--quiet"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            seen = len(server.seen)
            while len(server.seen) < seen + seen_before and process.poll() is None:
                time.sleep(0.05)
            process.send_signal(signum)
            _, err = process.communicate(timeout=60)
            assert process.returncode == 128 + signum, err
            assert f"stopped by {signal.Signals(signum).name}" in err
            assert pq.read_metadata(out).num_rows >= seen_before


# ------------------------------------------------------------------ nothing from a file is injected


def test_header_injection_and_credential_bypass_lines_are_skipped(tmp_path: Path) -> None:
    """Before: values went onto the wire verbatim (CRLF injection) and "Authorization " passed the filter."""
    bad_headers = [
        {"X-Note": f"ok\r\nAuthorization: Bearer {SECRET}"},
        {"Authorization ": f"Bearer {SECRET}"},
        {"cookie\t": f"session={SECRET}"},
        {"Content-Length ": "0"},
        {"X-Nul": "a\x00b"},
    ]
    rows: list[Any] = [
        {"id": f"bad{i}", "timestamp": 1, "path": "/ok", "headers": h} for i, h in enumerate(bad_headers)
    ]
    rows.append({"id": "good", "timestamp": 1, "path": "/ok", "headers": {"X-Note": "fine"}})
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with LoopbackServer() as server:
        result = run_stage(plan_stage(ReplaySettings(stage=100, source=path)), server.url)
        seen = server.seen
    assert [s.headers.get("x-note") for s in seen] == ["fine"]
    assert all("authorization" not in s.headers and "cookie" not in s.headers for s in seen)
    assert result.report.malformed_count == len(bad_headers)
    assert SECRET not in json.dumps(result.summary.to_dict())


def test_paths_are_percent_encoded_in_every_format(tmp_path: Path) -> None:
    """Before: a non-Latin-1 path raised UnicodeEncodeError in wire.py and ended the replay; CR LF in a path
    split the request line."""
    jsonl = write_jsonl(
        tmp_path / "t.jsonl",
        [{"id": "a", "timestamp": 1, "path": "/é/€?q=1"}, {"id": "b", "timestamp": 1, "path": "/x\r\nX-Evil: 1"}],
    )
    nginx = tmp_path / "n.log"
    nginx.write_text('1.2.3.4 - - [02/Dec/2026:10:00:00 +0000] "GET /€ HTTP/1.1" 200 1 "-" "c"\n', encoding="utf-8")
    envoy = tmp_path / "e.log"
    envoy.write_text('{"start_time": 1, "method": "GET", "path": "/€"}\n', encoding="utf-8")
    paths = []
    with LoopbackServer() as server:
        for source, fmt in ((jsonl, "jsonl"), (str(nginx), "nginx"), (str(envoy), "envoy")):
            result = run_stage(plan_stage(ReplaySettings(stage=100, source=source, format=fmt)), server.url)
            assert result.summary.ok == result.summary.intended > 0
        paths = [s.path for s in server.seen]
        assert all("x-evil" not in s.headers for s in server.seen)
    assert paths == ["/%C3%A9/%E2%82%AC?q=1", "/x%0D%0AX-Evil:%201", "/%E2%82%AC", "/%E2%82%AC"]


def test_header_policy_compares_normalised_names_and_refuses_bad_additions() -> None:
    policy = HeaderPolicy(strip=frozenset({"X-Drop "}))
    assert policy.apply([("x-drop", "1"), ("Authorization", "b"), ("X-Keep", "k"), ("X-Bad", "a\r\nb")]) == [
        ("X-Keep", "k")
    ]
    assert SECRET not in repr(HeaderPolicy(add=(("X-Api-Key", SECRET),)))
    with pytest.raises(Exception, match="headers to add"):
        HeaderPolicy(add=(("X-A", "1\r\nX-B: 2"),))
    with pytest.raises(Exception, match="credential") as error:
        HeaderPolicy(credential=("Authorization", f"Bearer {SECRET}\r\n"))
    assert SECRET not in str(error.value)


# ------------------------------------------------------------------ a target's answer cannot destroy the records


@pytest.mark.parametrize(
    "usage", [{"completion_tokens": 3_000_000_000}, {"completion_tokens": "7"}, {"prompt_tokens": -1}]
)
def test_a_strange_usage_is_that_requests_protocol_error(tmp_path: Path, usage: dict[str, Any]) -> None:
    """Before: 3e9 ended the replay with a traceback and no Parquet; "7" silently dropped every record."""
    rows = [{"id": f"p{i}", "timestamp": i * 0.01, "method": "POST", "path": "/v1/completions",
             "body": {"prompt": "x"}} for i in range(12)]  # fmt: skip
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    out = tmp_path / "r.parquet"
    with LoopbackServer(tokens=2, gap_ms=1, usage=usage, misbehave_every=3) as server:
        settings = ReplaySettings(stage=100, source=path, api="openai-completions", model="m")
        result = run_stage(plan_stage(settings), server.url, out=out)
    table = pq.read_table(out)
    assert table.num_rows == 12
    assert result.summary.errors == {"protocol": 4} and result.summary.ok == 8


def test_an_oversized_answer_is_a_protocol_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http1, "MAX_RESPONSE_BYTES", 200)
    path = write_jsonl(tmp_path / "t.jsonl", [{"id": "p", "timestamp": 0, "method": "POST", "path": "/v1/completions"}])
    with LoopbackServer(tokens=20, gap_ms=1) as server:
        settings = ReplaySettings(stage=100, source=path, api="openai-completions", model="m")
        result = run_stage(plan_stage(settings), server.url)
    assert result.summary.errors == {"protocol": 1}


# ------------------------------------------------------------------ no secret in any message


def test_skip_reasons_never_echo_a_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: reasons quoted the value (`field path: 'api/x?api_key=...' must start with /`)."""
    jsonl = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"timestamp": f"2026-13-99T{SECRET}"},
            {"timestamp": 1, "method": f"Bearer {SECRET}"},
            {"timestamp": 1, "path": f"v1?api_key={SECRET}"},
            {"timestamp": 1, "headers": {f"Bearer {SECRET}": "x"}},
            {"timestamp": 1, "headers": {"X-Token": f"{SECRET}\n"}},
            *ok_rows(2),
        ],
    )
    envoy = tmp_path / "e.log"
    envoy.write_text(
        f'{{"start_time": "{SECRET}", "method": "GET", "path": "/a"}}\n'
        f'{{"start_time": 1, "method": "GET", "path": "x?api_key={SECRET}"}}\n'
        f'[{SECRET}] "GET /a HTTP/1.1" 200 - 1 1 1 1 "-" "-" "-" "-" "-"\n'
        f'[2026-01-01T00:00:00Z] "GET x?api_key={SECRET} HTTP/1.1" 200 - 1 1 1 1 "-" "-" "-" "-" "-"\n'
    )
    nginx = tmp_path / "n.log"
    nginx.write_text(
        f'1.2.3.4 - - [{SECRET}] "GET /a HTTP/1.1" 200 1 "-" "c"\n'
        f'1.2.3.4 - - [02/Dec/2026:10:00:00 +0000] "GET x?api_key={SECRET} HTTP/1.1" 200 1 "-" "c"\n'
    )
    gor = tmp_path / "t.gor"
    gor.write_text(f"1 a 1000000000\nGET /a HTTP/1.1\r\nAuthorization {SECRET}\r\n\r\n\n🐵🙈🙉\n")
    reasons = []
    for fmt, path in (("jsonl", jsonl), ("envoy", envoy), ("nginx", nginx), ("gor", gor)):
        _, report = read(fmt, path)
        assert report.malformed_count >= 1, fmt
        reasons.append(json.dumps(report.to_dict()) + "\n".join(report.describe()))
    assert all(SECRET not in r for r in reasons), [r for r in reasons if SECRET in r]
    assert main(["replay", jsonl, "--target", f"http://127.0.0.1:{free_port()}", "--json", "--quiet"]) == 2
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err


# ------------------------------------------------------------------ fuzzer crashes (each a traceback before)


def test_a_list_as_method_and_deep_json_are_skipped(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    jsonl = write_jsonl(
        tmp_path / "t.jsonl",
        [{"timestamp": 1, "method": ["GET"]}, '{"timestamp": 1, "body": ' + deep + "}", deep, *ok_rows(1)],
    )
    requests, report = read("jsonl", jsonl)
    assert len(requests) == 1 and report.malformed_count == 3
    envoy = tmp_path / "e.log"
    envoy.write_text('{"start_time": 1, "method": "GET", "path": "/a", "x": ' + deep + "}\n")
    assert read("envoy", envoy)[1].malformed_count == 1


def conversation(i: int, text: str = "hi") -> dict[str, Any]:
    return {"id": f"c{i}", "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "a b"}]}


def sharegpt(path: Path) -> tuple[list[Any], SourceReport]:
    report = SourceReport(str(path), "sharegpt")
    return list(read_sharegpt(path, report, rate=10.0)), report


def test_sharegpt_invalid_utf8_deep_json_and_truncated_gzip(tmp_path: Path) -> None:
    broken_utf8 = json.dumps(conversation(1, "caf")).encode().replace(b'"caf"', b'"caf\xff"')
    lines = tmp_path / "p.jsonl"
    lines.write_bytes(json.dumps(conversation(0)).encode() + b"\n\xff\xfe{\n" + b"[" * 100_000 + b"\n" + broken_utf8)
    requests, report = sharegpt(lines)
    assert [r.prompt for r in requests] == ["hi", "caf\ufffd"] and report.malformed_count == 2
    array = tmp_path / "p.json"
    deep = b"[" * 100_000 + b"]" * 100_000
    array.write_bytes(b"[" + json.dumps(conversation(0)).encode() + b",\n" + deep + b",\n" + broken_utf8 + b"]")
    requests, report = sharegpt(array)
    assert [r.id for r in requests] == ["c0", "c1"] and report.malformed_count == 1
    for name, data in (("a.json.gz", json.dumps([conversation(i) for i in range(200)])),
                       ("l.jsonl.gz", "\n".join(json.dumps(conversation(i)) for i in range(200)))):  # fmt: skip
        packed = gzip.compress(data.encode())
        cut = tmp_path / name
        cut.write_bytes(packed[: len(packed) // 2])
        requests, report = sharegpt(cut)
        assert report.truncated and report.malformed_count == 1 and len(requests) < 200


def test_a_huge_sharegpt_element_is_skipped_and_the_file_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: one element over the size bound ended the whole file ("rest of the file ignored")."""
    monkeypatch.setattr(sharegpt_module, "MAX_ELEMENT_BYTES", 1 << 20)
    path = tmp_path / "p.json"
    items = [conversation(0), conversation(1, "x" * (3 << 20)), conversation(2), conversation(3, 'q"[{\\"')]
    path.write_text(json.dumps(items))
    requests, report = sharegpt(path)
    assert [r.id for r in requests] == ["c0", "c2", "c3"] and report.malformed_count == 1 and not report.truncated


def test_the_request_count_of_a_stage_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-line recording at --speed 1e6 for a long --duration plans millions of requests a second: the
    records (held in memory) must stay bounded, and the stage says it was cut (INVALID), not VALID."""
    monkeypatch.setattr(engine, "MAX_REQUESTS", 50)
    path = write_jsonl(tmp_path / "t.jsonl", ok_rows(1))
    with LoopbackServer() as server:
        result = run_stage(plan_stage(ReplaySettings(stage=100, source=path, speed=1e6, duration=3600.0)), server.url)
    assert result.table.num_rows == 50 and not result.summary.valid
    assert "more than 50 requests" in (result.summary.invalid_reason or "")
