"""Whole-call deadlines: a server that drips one byte a second (in the body, or in the status line and headers)
must not hold any client past its deadline. Without the deadline each client would wait out the drip (a socket
timeout bounds one read, and every byte is a new read) and then succeed: these tests fail then. The dripping
server stops itself after DRIP_LIMIT_S whatever the client does."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kfchaos import kubeconnect, netsafe
from kfchaos.doctor import diagnose as doctor
from kfchaos.faults.lorachurn import LoraClient
from kfchaos.kfp.client import Connection, connect
from kfchaos.metrics.prometheus import PrometheusClient, PrometheusUnreachable
from kfchaos.metrics.scrape import ScrapeSource
from tests.support.hostile import Answer, drip, hostile_server, json_answer

DEADLINE_S = 2.0
DRIP_LIMIT_S = 60.0
VECTOR = {"status": "success", "data": {"resultType": "vector", "result": []}}


def _body(document: Any) -> Answer:
    return 200, {"Content-Type": "application/json"}, drip(json.dumps(document).encode() + b" " * 40)


def _headers(document: Any) -> Answer:
    data = json.dumps(document).encode()
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: " + b"." * 40 + b"\r\n"
    return 0, {}, drip(raw + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)


def _answers(dripped: Callable[[Any], Answer]) -> Callable[[str, str], Answer]:
    def answer(method: str, path: str) -> Answer:
        if "healthz" in path and "experiments" not in path and method == "GET" and path.startswith("/apis/v2beta1"):
            return json_answer({"multi_user": False, "tag_name": "2.15.0"})  # the KFP constructor's own call
        if path.startswith("/api/v1/"):
            return dripped(VECTOR)
        if "/pods" in path:
            return dripped({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []})
        if "experiments" in path:
            return dripped({"experiments": [], "total_size": 0})
        if path.startswith("/metrics"):
            return dripped({"x": 1})
        return dripped({"tag_name": "2.15.0", "data": []})

    return answer


def prometheus(url: str) -> None:
    with pytest.raises(PrometheusUnreachable, match="whole-call deadline"):
        PrometheusClient(url, timeout=DEADLINE_S, retries=0).instant("up")


def metrics_scrape(url: str) -> None:
    with pytest.raises(PrometheusUnreachable, match="no whole answer"):
        ScrapeSource(url + "/metrics", timeout=DEADLINE_S).scrape()


def doctor_healthz(url: str) -> None:
    with pytest.raises(OSError, match="no whole answer"):
        doctor.backend_tag(url + "/doctor", "token")  # /doctor/apis/...: not the KFP constructor's healthz


def kubernetes(url: str) -> None:
    import kubernetes as k8s

    api = k8s.client.CoreV1Api(kubeconnect.api_client(host=url))
    with pytest.raises(netsafe.DeadlineExceeded):
        api.list_namespaced_pod("default")


def kfp(url: str) -> None:
    client = connect(Connection(host=url))
    with pytest.raises(netsafe.DeadlineExceeded):
        client.list_experiments()


def target_lora(url: str) -> None:
    status, _, error = LoraClient(url, timeout=DEADLINE_S).models()
    assert status == 0 and error


CLIENTS = {
    "prometheus": prometheus,
    "metrics-scrape": metrics_scrape,
    "doctor-healthz": doctor_healthz,
    "kubernetes": kubernetes,
    "kfp": kfp,
    "target-lora": target_lora,
}


@pytest.mark.parametrize("where", ["body", "headers"])
@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_a_dripping_server_cannot_hold_a_client_past_its_deadline(
    name: str, where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(netsafe, "DEFAULT_DEADLINE_S", DEADLINE_S)  # kubernetes and KFP: 60 s in use
    monkeypatch.setattr(doctor, "HTTP_TIMEOUT", DEADLINE_S)
    dripped = _body if where == "body" else _headers
    with hostile_server(_answers(dripped), max_drip_s=DRIP_LIMIT_S) as server:
        CLIENTS[name](server.url)
    assert server.seen, "the client never reached the server: the test proves nothing"
