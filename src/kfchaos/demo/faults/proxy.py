"""The fault proxy of the embedded mode: it stands in front of the target as Chaos Mesh stands beside a pod.

Traffic goes to `--listen`, is forwarded to `--upstream`, and the active faults act on it on the way:
network-delay (latency + jitter), network-loss (a share of connections dropped without a response),
http-abort (a share of requests answered with a status code, upstream never sees them), http-delay (a
share of requests held back). Each fault has a duration and expires by itself, so a fault ends even if
whoever created it dies. The control API on `--control` is what the local fault backend calls:

  PUT    /faults/{name}     create (idempotent: the same name returns the existing fault)
  GET    /faults            list (query `run_id` filters)
  GET    /faults/{name}     one fault, with injected/expired status and how many requests it hit
  DELETE /faults/{name}     remove
  DELETE /faults?run_id=ID  remove every fault of a run (the sweep)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

PROXY_FAULT_TYPES = ("network-delay", "network-loss", "http-abort", "http-delay")
OWNER_CHECK_S = 0.5
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length", "host"}


@dataclass
class ProxyFault:
    name: str
    type: str
    duration_s: float
    labels: dict[str, str] = field(default_factory=dict)
    latency_s: float = 0.0
    jitter_s: float = 0.0
    share: float = 1.0  # share of requests affected (loss, abort, http delay)
    code: int = 503
    # The process that asked for the fault (its controller, on this host): the fault ends when it dies, as a
    # fault whose controller is gone has no one left to remove it (a SIGKILLed run), not only when it expires.
    owner_pid: int | None = None
    created_at: float = field(default_factory=time.time)
    hits: int = 0

    @property
    def expires_at(self) -> float:
        return self.created_at + self.duration_s

    def expired(self, now: float | None = None) -> bool:
        return (now or time.time()) >= self.expires_at

    def orphaned(self) -> bool:
        return self.owner_pid is not None and process_gone(self.owner_pid)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["expires_at"] = self.expires_at
        data["injected"] = not self.expired()
        return data


def parse_fault(name: str, body: dict[str, Any]) -> ProxyFault:
    fault_type = body.get("type")
    if fault_type not in PROXY_FAULT_TYPES:
        raise ValueError(f"type must be one of {', '.join(PROXY_FAULT_TYPES)}")
    duration = body.get("duration_s")
    if not isinstance(duration, int | float) or duration <= 0:
        raise ValueError("duration_s must be a positive number: every fault expires")
    share = float(body.get("share", 1.0))
    if not 0 < share <= 1:
        raise ValueError("share must be in (0, 1]")
    labels = body.get("labels") or {}
    if not isinstance(labels, dict):
        raise ValueError("labels must be a mapping")
    owner = body.get("owner_pid")
    if owner is not None and (not isinstance(owner, int) or isinstance(owner, bool) or owner <= 0):
        raise ValueError("owner_pid must be a process id")
    return ProxyFault(
        name=name,
        type=fault_type,
        duration_s=float(duration),
        labels={str(k): str(v) for k, v in labels.items()},
        latency_s=float(body.get("latency_s", 0.0)),
        jitter_s=float(body.get("jitter_s", 0.0)),
        share=share,
        code=int(body.get("code", 503)),
        owner_pid=owner,
    )


def process_gone(pid: int) -> bool:
    """No such process, or a zombie (dead, not yet reaped by its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # no /proc: alive as far as we can tell
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


class FaultProxy:
    def __init__(self, upstream: str, seed: int | None = None, connect_retry_s: float = 0.0) -> None:
        self.upstream = upstream.rstrip("/")
        # Like a service mesh's retry on connect-failure: while the upstream restarts, hold requests this
        # long instead of failing them (they then show up as latency, as they would behind Envoy or Istio).
        self.connect_retry_s = connect_retry_s
        self.faults: dict[str, ProxyFault] = {}
        self.random = random.Random(seed)
        self._owners_checked = 0.0
        self._session: aiohttp.ClientSession | None = None

    def active(self) -> list[ProxyFault]:
        now = time.time()
        # Owners are looked at twice a second, not on every request the proxy forwards.
        owners = now - self._owners_checked >= OWNER_CHECK_S
        if owners:
            self._owners_checked = now
        for name in [n for n, f in self.faults.items() if f.expired(now) or (owners and f.orphaned())]:
            del self.faults[name]
        return list(self.faults.values())

    # ------------------------------------------------------------------ control API

    def control_app(self) -> web.Application:
        app = web.Application()
        app.router.add_put("/faults/{name}", self.put_fault)
        app.router.add_get("/faults", self.list_faults)
        app.router.add_get("/faults/{name}", self.get_fault)
        app.router.add_delete("/faults/{name}", self.delete_fault)
        app.router.add_delete("/faults", self.sweep)
        app.router.add_get("/health", self.health)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def put_fault(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.active()
        if name in self.faults:
            return web.json_response(self.faults[name].to_dict(), status=200)
        try:
            body = await request.json()
            fault = parse_fault(name, body if isinstance(body, dict) else {})
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": str(exc)}, status=422)
        self.faults[name] = fault
        return web.json_response(fault.to_dict(), status=201)

    async def list_faults(self, request: web.Request) -> web.Response:
        run_id = request.query.get("run_id")
        items = [f.to_dict() for f in self.active() if run_id is None or f.labels.get("run_id") == run_id]
        return web.json_response({"items": items})

    async def get_fault(self, request: web.Request) -> web.Response:
        self.active()
        fault = self.faults.get(request.match_info["name"])
        if fault is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response(fault.to_dict())

    async def delete_fault(self, request: web.Request) -> web.Response:
        fault = self.faults.pop(request.match_info["name"], None)
        if fault is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response(fault.to_dict())

    async def sweep(self, request: web.Request) -> web.Response:
        run_id = request.query.get("run_id")
        if not run_id:
            return web.json_response({"error": "run_id is required"}, status=400)
        names = [n for n, f in self.faults.items() if f.labels.get("run_id") == run_id]
        for name in names:
            del self.faults[name]
        return web.json_response({"deleted": names})

    # ------------------------------------------------------------------ data path

    def traffic_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.forward)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, app: web.Application) -> None:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            # An idle pooled connection is dropped before the upstream's own keep-alive closes it: vLLM's uvicorn
            # closes one idle for 5 s (vllm/envs.py VLLM_HTTP_TIMEOUT_KEEP_ALIVE), and a request sent on a connection
            # it is closing fails with "Server disconnected" (a 502 here that no server caused). aiohttp checks the
            # idle time when it hands a connection out (connector.py), so a busy loop cannot stretch it.
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0),
            auto_decompress=False,
        )

    async def _close(self, app: web.Application) -> None:
        if self._session:
            await self._session.close()

    def _hit(self, fault: ProxyFault) -> bool:
        if self.random.random() < fault.share:
            fault.hits += 1
            return True
        return False

    async def forward(self, request: web.Request) -> web.StreamResponse:
        delay = 0.0
        for fault in self.active():
            if fault.type == "network-loss" and self._hit(fault):
                # A lost connection: the client sees the connection closed with no response.
                if request.transport is not None:
                    request.transport.abort()
                raise ConnectionResetError("dropped by network-loss fault")
            if fault.type == "http-abort" and self._hit(fault):
                return web.Response(status=fault.code, text=f"aborted by fault {fault.name}\n")
            if fault.type == "network-delay" and self._hit(fault):
                delay += max(0.0, fault.latency_s + self.random.uniform(-fault.jitter_s, fault.jitter_s))
            if fault.type == "http-delay" and self._hit(fault):
                delay += fault.latency_s
        if delay:
            await asyncio.sleep(delay)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        body = await request.read()
        deadline = time.monotonic() + self.connect_retry_s
        while True:
            try:
                # A proxy hands a redirect back to its client, never follows it: the client's credentials are
                # for the upstream alone (aiohttp follows redirects by default).
                upstream = await self._session.request(
                    request.method,
                    self.upstream + request.rel_url.path_qs,
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                )
                break
            except aiohttp.ClientConnectorError as exc:
                if time.monotonic() >= deadline:
                    return web.Response(status=502, text=f"upstream unavailable: {exc}\n")
                await asyncio.sleep(0.1)
            except aiohttp.ClientError as exc:
                return web.Response(status=502, text=f"upstream unavailable: {exc}\n")
        async with upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP},
            )
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            except aiohttp.ClientError:
                # The upstream died mid-response (e.g. it was OOM-killed): the client sees a cut stream.
                if request.transport is not None:
                    request.transport.abort()
                return response
            await response.write_eof()
            return response


async def serve(proxy: FaultProxy, listen: tuple[str, int], control: tuple[str, int]) -> list[web.AppRunner]:
    runners = []
    for app, (host, port) in ((proxy.traffic_app(), listen), (proxy.control_app(), control)):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        runners.append(runner)
    return runners


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kfchaos-fault-proxy", description=__doc__)
    parser.add_argument("--listen", default="127.0.0.1:8100")
    parser.add_argument("--control", default="127.0.0.1:8101")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--connect-retry", type=float, default=0.0, help="seconds to retry a refused upstream")
    args = parser.parse_args(argv)

    def address(text: str) -> tuple[str, int]:
        host, _, port = text.rpartition(":")
        return host or "127.0.0.1", int(port)

    async def run() -> None:
        runners = await serve(
            FaultProxy(args.upstream, args.seed, args.connect_retry), address(args.listen), address(args.control)
        )
        try:
            await asyncio.Event().wait()
        finally:
            for runner in runners:
                await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
