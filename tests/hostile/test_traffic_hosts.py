"""A traffic file sends to the experiment's target only, and carries no recorded credential unless the experiment
names it (kfchaos.traffic.tagging.HeaderPolicy; the readers of kfchaos.traffic.formats).

Two loopback servers: the target, and "elsewhere", which the file names every way a recording can (an absolute URL
in each format, a Host header). Elsewhere must see nothing; the target must get its own Host and none of the
recorded credentials (Authorization, Cookie, an API key's or a session's header) but those named.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kfchaos.cli import main
from kfchaos.errors import SpecError
from kfchaos.validate import parse_experiment
from tests.conftest import EXPERIMENTS
from tests.traffic.loopback_server import LoopbackServer

RECORDED = {
    "Authorization": "Bearer recorded-secret",
    "Cookie": "sid=recorded",
    "X-Api-Key": "recorded-key",
    "X-Session-Token": "recorded-session",
    "Proxy-Authorization": "Basic cmVjb3JkZWQ=",
    "X-Keep": "1",
}
CREDENTIALS = ("authorization", "cookie", "x-api-key", "x-session-token", "proxy-authorization")


def _files(folder: Path, elsewhere: str) -> dict[str, Path]:
    host = elsewhere.removeprefix("http://")
    jsonl = folder / "t.jsonl"
    lines = [
        {"id": "abs", "timestamp": 0.0, "path": f"{elsewhere}/steal"},
        {"id": "net", "timestamp": 0.01, "path": f"//{host}/steal"},
        {"id": "host", "timestamp": 0.02, "path": "/ok", "headers": {"Host": host, **RECORDED}},
    ]
    jsonl.write_text("".join(json.dumps(line) + "\n" for line in lines))
    nginx = folder / "access.log"
    nginx.write_text(
        f'1.2.3.4 - - [02/Dec/2026:10:00:00 +0000] "GET {elsewhere}/steal HTTP/1.1" 200 1 "-" "c"\n'
        '1.2.3.4 - - [02/Dec/2026:10:00:01 +0000] "GET /ok HTTP/1.1" 200 1 "-" "c"\n'
    )
    raw = f"GET {elsewhere}/steal HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    gor = folder / "gor.log"
    gor.write_bytes(b"1 abc 1764800000000000000 0\n" + raw + b"\n\xf0\x9f\x90\xb5\xf0\x9f\x99\x88\xf0\x9f\x99\x89\n")
    envoy = folder / "envoy.log"
    envoy.write_text(
        json.dumps({"start_time": "2026-12-02T10:00:00Z", "method": "GET", "path": f"{elsewhere}/x"}) + "\n"
    )
    return {"jsonl": jsonl, "nginx": nginx, "gor": gor, "envoy": envoy}


def _replay(traffic: Path, fmt: str, target: str, *flags: str) -> int:
    return main(["replay", str(traffic), "--format", fmt, "--target", target, "--no-loop", "--quiet", *flags])


def test_nothing_reaches_another_host_and_no_recorded_credential_is_sent(tmp_path: Path) -> None:
    with LoopbackServer() as target, LoopbackServer() as elsewhere:
        files = _files(tmp_path, elsewhere.url)
        for fmt, path in files.items():
            _replay(path, fmt, target.url)
        assert elsewhere.seen == [], "a recording sent traffic to another host"
        host = target.url.removeprefix("http://")
        assert target.seen and all(r.headers["host"] == host for r in target.seen)
        for request in target.seen:
            assert not [name for name in CREDENTIALS if name in request.headers], request.headers
        recorded = next(r for r in target.seen if r.headers.get("x-keep") == "1")
        assert recorded.path == "/ok"
        assert not [r for r in target.seen if r.path.endswith("/steal") and not r.path.startswith("//")]


def test_a_recorded_credential_is_sent_only_when_named(tmp_path: Path) -> None:
    with LoopbackServer() as target, LoopbackServer() as elsewhere:
        path = _files(tmp_path, elsewhere.url)["jsonl"]
        assert _replay(path, "jsonl", target.url, "--allow-credential", "authorization") in (0, 2)
        recorded = next(r for r in target.seen if r.headers.get("x-keep") == "1")
        assert recorded.headers["authorization"] == "Bearer recorded-secret"
        assert not [name for name in CREDENTIALS[1:] if name in recorded.headers]
        assert elsewhere.seen == []


def test_an_experiment_names_the_credentials_it_keeps() -> None:
    document = yaml.safe_load((EXPERIMENTS / "vllm-network-delay.yaml").read_text())
    document["spec"]["traffic"]["headers"] = {"allow_credentials": True}
    with pytest.raises(SpecError, match="name the recorded credential headers to keep"):
        parse_experiment(yaml.safe_dump(document), "e.yaml")
    document["spec"]["traffic"]["headers"] = {"allow_credentials": ["Authorization", "X-Api-Key"]}
    headers = parse_experiment(yaml.safe_dump(document), "e.yaml").spec.traffic.headers
    assert headers.allow_credentials == ["Authorization", "X-Api-Key"]
    document["spec"]["traffic"]["headers"] = {"allow_credentials": ["Bad Name"]}
    with pytest.raises(SpecError, match="not an HTTP header name"):
        parse_experiment(yaml.safe_dump(document), "e.yaml")
