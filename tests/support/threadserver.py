"""A raw asyncio stream server on a loopback port, on a thread of its own: the base of the tests' model servers
(tests/traffic/loopback_server.py, tests/support/hostile_model.py), which answer each connection in `_client`.

Raw streams, not aiohttp.web: these servers answer as a misbehaving server would (cut streams, floods, bytes no HTTP
library writes)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Self


@dataclass
class ThreadedServer:
    """`with Server() as server:` then target `server.url`; the port is the kernel's pick, bound before `__enter__`
    returns."""

    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            server = loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()

            async def drain() -> None:
                await asyncio.gather(*tasks, return_exceptions=True)

            loop.run_until_complete(drain())
            loop.run_until_complete(server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        assert ready.wait(10), f"{type(self).__name__} did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
