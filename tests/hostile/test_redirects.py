"""Credentials never leave their host: every HTTP client kfchaos uses, pointed at a loopback server that answers
307 to a second loopback server (another port, so another origin), must not send the planted token there. Each
client refuses the redirect (kfchaos.netsafe), so the second server sees no request at all."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from kfchaos import kubeconnect
from kfchaos.doctor.diagnose import Options, backend_tag, check_kfp
from kfchaos.doctor.model import Report, Status
from kfchaos.faults.lorachurn import LoraClient
from kfchaos.kfp.client import Connection, connect
from kfchaos.metrics.prometheus import PrometheusClient, PrometheusError, PrometheusUnreachable
from kfchaos.metrics.scrape import ScrapeSource
from tests.support.redirect import TOKEN, Pair, redirect_pair

HEADERS = {"Authorization": f"Bearer {TOKEN}", "Cookie": f"session={TOKEN}", "X-Api-Key": TOKEN}


def doctor_healthz(pair: Pair, tmp_path: Path) -> None:
    with pytest.raises(OSError, match="another origin"):
        backend_tag(pair.first, TOKEN)


def prometheus(pair: Pair, tmp_path: Path) -> None:
    client = PrometheusClient(pair.first, headers=HEADERS, retries=1, backoff=0.0)
    with pytest.raises(PrometheusError, match="another origin"):
        client.instant("up")


def metrics_scrape(pair: Pair, tmp_path: Path) -> None:
    with pytest.raises(PrometheusUnreachable, match="another origin"):
        ScrapeSource(pair.first + "/metrics").scrape()


def kfp(pair: Pair, tmp_path: Path) -> None:
    # The SDK may call healthz in its constructor or not (it depends on the user's KFP context file): either the
    # constructor or the first call meets the redirect, and neither may follow it.
    with pytest.raises(Exception, match="another origin"):
        client = connect(Connection(host=pair.first, token=TOKEN))
        client.list_experiments()


def kubernetes(pair: Pair, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{pair.first}"}}}}]
users: [{{name: u, user: {{token: "{TOKEN}"}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u, namespace: default}}}}]
current-context: x
"""
    )
    import kubernetes as k8s

    api = k8s.client.CoreV1Api(kubeconnect.api_client(str(kubeconfig)))
    with pytest.raises(Exception, match="another origin"):
        api.list_namespaced_pod("default")


def target_lora(pair: Pair, tmp_path: Path) -> None:
    status, _, _ = LoraClient(pair.first, HEADERS, timeout=5).models()
    assert status == 307  # handed back as it came, not followed


def target_replay(pair: Pair, tmp_path: Path) -> None:
    from kfchaos.traffic import http1

    async def once() -> int:
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[http1.Exchange] = loop.create_future()
        pool = http1.Pool(http1.parse_target(pair.first), loop, ended.set_result)
        host = pair.first.removeprefix("http://")
        data = f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
        pool.submit(http1.Exchange(None, b"", data, None))
        exchange = await asyncio.wait_for(ended, 30)
        pool.close()
        return exchange.status

    assert asyncio.run(once()) == 307


def fault_proxy(pair: Pair, tmp_path: Path) -> None:
    from aiohttp import web

    from kfchaos.demo.faults.proxy import FaultProxy

    async def once() -> int:
        runner = web.AppRunner(FaultProxy(pair.first).traffic_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
                session.get(f"http://127.0.0.1:{port}/v1/models", headers=HEADERS, allow_redirects=False) as r,
            ):
                return r.status
        finally:
            await runner.cleanup()

    assert asyncio.run(once()) == 307  # the proxy hands the redirect back to its client


CLIENTS: dict[str, Callable[[Pair, Path], None]] = {
    "doctor-healthz": doctor_healthz,
    "prometheus": prometheus,
    "metrics-scrape": metrics_scrape,
    "kfp": kfp,
    "kubernetes": kubernetes,
    "target-lora": target_lora,
    "target-replay": target_replay,
    "fault-proxy": fault_proxy,
}


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_client_refuses_a_redirect_to_another_origin(name: str, tmp_path: Path) -> None:
    with redirect_pair() as pair:
        CLIENTS[name](pair, tmp_path)
    assert pair.seen_first, "the client never reached the first server: the test proves nothing"
    assert not pair.leaked(), f"{name} sent the token to the second host"
    assert not pair.seen_second, f"{name} followed a redirect to another origin"


def test_a_planted_credential_reaches_no_second_host_in_any_client(tmp_path: Path) -> None:
    with redirect_pair() as pair:
        for name, client in CLIENTS.items():
            (tmp_path / name).mkdir()
            client(pair, tmp_path / name)
    reached = {s.path for s in pair.seen_first}
    assert len(reached) >= 4, reached
    assert not pair.leaked()
    assert not pair.seen_second


def test_doctor_host_never_passes_on_the_redirected_hosts_answer() -> None:
    report = Report()
    with redirect_pair() as pair:
        version = check_kfp(report, Options(Path("x.yaml"), kfp_host=pair.first, token=TOKEN), [], "test")
    assert version is None
    (check,) = report.checks
    assert check.status is Status.UNKNOWN, check
    assert "another origin" in check.detail
    assert not pair.seen_second


def test_a_redirect_within_the_same_origin_is_still_followed() -> None:
    from kfchaos import netsafe

    with (
        redirect_pair() as pair,
    ):
        answer = netsafe.fetch(urllib.request.Request(pair.second + "/hop"), 10, 1 << 20)
        assert answer.status == 200
    assert [s.path for s in pair.seen_second] == ["/hop", "/healthz"]
