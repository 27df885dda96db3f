"""One worker: an event loop serving every port on sockets bound by the supervisor (or by
``start()``), thread pools, heartbeat, graceful drain.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from fwrest import log
from fwrest.auth import BasicGuard
from fwrest.auth.oauth2 import BearerGuard, NoCheckPaths, ParamsSource, TokenService
from fwrest.auth.throttle import Throttle
from fwrest.routing import LocationTable
from fwrest.server.app import Guard, PortApp
from fwrest.server.build import PortPlan, ServicePlan
from fwrest.server.http import ConnectionSet, HttpProtocol
from fwrest.server.pool import ThreadPool
from fwrest.server.state import tunables

__all__ = ["Worker", "new_loop"]

GuardFactory = Callable[[PortPlan], Guard | None]


def default_guard(port: PortPlan) -> Guard | None:
    """The guard of a Basic port (the worker adds its throttle); oAuth2 guards are built by
    the worker, which owns the token service."""
    settings = port.auth_settings
    if settings is None or settings.scheme != "basic":
        return None
    return BasicGuard(settings, port.config.name)


def _locator(port: PortPlan) -> Callable[[str], tuple[str, str]]:
    table: LocationTable[str] = LocationTable((loc.prefix, loc.prefix) for loc in port.locations)

    def locate(path: str) -> tuple[str, str]:
        found = table.find(path)
        return found if found is not None else ("", path)

    return locate


def new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class Worker:
    """Serves a :class:`ServicePlan` on listening sockets until :meth:`request_stop`."""

    def __init__(
        self,
        plan: ServicePlan,
        sockets: list[socket.socket],
        *,
        index: int = 0,
        heartbeat: Any = None,
        parent_pid: int | None = None,
        guard_factory: GuardFactory | None = None,
    ) -> None:
        self.plan = plan
        self.sockets = sockets
        self.index = index
        self.heartbeat = heartbeat
        self.parent_pid = parent_pid
        self.guard_factory = guard_factory or default_guard
        self.loop: asyncio.AbstractEventLoop | None = None
        self.conns = ConnectionSet()
        self.pools: dict[str, ThreadPool] = {}
        self.apps: list[PortApp] = []
        self.services: list[TokenService] = []
        self.throttles: list[Throttle] = []
        self._servers: list[asyncio.base_events.Server] = []
        self._stop: asyncio.Event | None = None
        self.exit_code = 0

    async def run(self, on_ready: Callable[[], None] | None = None) -> int:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self._stop = asyncio.Event()
        tunables.swap(self.plan.config.tunables)
        for port in self.plan.ports:
            for loc in port.locations:
                pool_cfg = loc.config.thread_pool
                if pool_cfg.name.lower() not in self.pools:
                    self.pools[pool_cfg.name.lower()] = ThreadPool(pool_cfg, loop)
        for port, sock in zip(self.plan.ports, self.sockets, strict=True):
            guard = self.guard_factory(port)
            service = None
            settings = port.auth_settings
            if settings is not None and settings.scheme == "oAuth2":
                assert self.plan.store is not None and self.plan.signing_key is not None
                service = TokenService(
                    port_name=port.config.name,
                    key=self.plan.signing_key,
                    store=self.plan.store,
                    source=ParamsSource(settings.params_func, settings.params_file),
                    max_failures=settings.max_failures,
                    allow_get=settings.allow_get,
                )
                service.start()
                self.services.append(service)
                guard = BearerGuard(
                    service,
                    NoCheckPaths(settings.nocheck),
                    _locator(port),
                    settings.on_auth,
                    settings.on_auth_name,
                )
            if isinstance(guard, BasicGuard) and self.plan.store is not None and settings:
                throttle = Throttle(self.plan.store, settings.max_failures, port.config.name)
                throttle.start()
                self.throttles.append(throttle)
                guard.throttle = throttle
            app = PortApp(port, self.pools, guard)
            app.token_service = service
            self.apps.append(app)
            cfg = port.config
            server = await loop.create_server(
                lambda app=app, cfg=cfg: HttpProtocol(app, cfg, self.conns, loop),
                sock=sock,
                ssl=cfg.ssl_context(),
                ssl_handshake_timeout=cfg.tls_handshake_timeout_ms / 1000 if cfg.is_tls else None,
                backlog=2048,
            )
            self._servers.append(server)
        self._beat()
        if on_ready is not None:
            on_ready()
        await self._stop.wait()
        await self._drain()
        return self.exit_code

    def _beat(self) -> None:
        """Heartbeat from inside the loop: a blocked loop stops beating (SPEC 7)."""
        if self.heartbeat is not None:
            self.heartbeat[self.index] = time.monotonic()
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            log.server_log.error("the supervisor is gone; worker %d stops", self.index + 1)
            self.request_stop()
            return
        assert self.loop is not None
        self.loop.call_later(0.5, self._beat)

    def request_stop(self) -> None:
        """Stop accepting and drain (thread-safe through ``call_soon_threadsafe``)."""
        if self._stop is not None and not self._stop.is_set():
            self._stop.set()

    async def _drain(self) -> None:
        for server in self._servers:
            server.close()
        self.conns.drain()
        deadline = time.monotonic() + self.plan.config.graceful_timeout_ms / 1000
        while self.conns.items and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self.conns.items:
            log.server_log.warning(
                "worker %d: %d connection(s) still busy after GracefulTimeout; closing them",
                self.index + 1,
                len(self.conns.items),
            )
            for conn in list(self.conns.items):
                conn._close()
        for pool in self.pools.values():
            pool.shutdown()
        for service in self.services:
            service.stop()
        for throttle in self.throttles:
            throttle.stop()
