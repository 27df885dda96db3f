"""One worker: an event loop serving every port on sockets bound by the supervisor (or by
``start()``), thread pools, heartbeat, graceful drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

import orjson
import psutil

from fwrest import log
from fwrest.auth import BasicGuard
from fwrest.auth.oauth2 import BearerGuard, NoCheckPaths, ParamsSource, TokenService
from fwrest.auth.throttle import LockBoard, Throttle
from fwrest.monitor import Collector
from fwrest.routing import LocationTable
from fwrest.server.app import Guard, PortApp
from fwrest.server.build import PortPlan, ServicePlan
from fwrest.server.http import ConnectionSet, HttpProtocol
from fwrest.server.monitor_port import MonitorPort, monitor_server_config
from fwrest.server.pool import ThreadPool
from fwrest.server.settings import SettingsManager
from fwrest.server.state import tunables
from fwrest.server.usage import merge
from fwrest.store import StoreError

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


_USAGE_STALE_S = 5.0


def _siblings(parent_pid: int) -> list[int]:
    """The other workers of this host's supervisor."""
    try:
        children = psutil.Process(parent_pid).children()
    except psutil.Error:
        return []
    return [child.pid for child in children if child.pid != os.getpid()]


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
        counters: Any = None,
        worker_pids: Any = None,
        started: float | None = None,
        lock_board: LockBoard | None = None,
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
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self.counters = counters
        self.worker_pids = worker_pids  # the supervisor's: pid per slot
        self.lock_board = lock_board  # the supervisor's: lock-outs its workers share at once
        self.started = started if started is not None else time.time()
        self.settings = SettingsManager(
            plan.config.source, plan.config.tunables_in_file, plan.store
        )
        self._usage_task: asyncio.Task[None] | None = None
        self._usage_epoch = b""
        self._secret: bytes | None = None
        self._total_base = int(counters[2 * index + 1]) if counters is not None else 0

    async def _serve_monitor(self, loop: asyncio.AbstractEventLoop) -> None:
        mon = self.plan.config.monitor
        assert mon is not None
        cfg = monitor_server_config(mon, self.plan.monitor_port)
        root = self.parent_pid if self.parent_pid is not None else os.getpid()
        pids = self.worker_pids
        slots = (lambda: list(pids)) if pids is not None else None
        collector = Collector(root, self.request_counts, self.started, slots)
        app = MonitorPort(cfg, mon.api_path, collector, self.plan.monitor_auth)
        if isinstance(app.guard, BasicGuard) and self.plan.store is not None:
            throttle = Throttle(
                self.plan.store,
                app.guard_max_failures(),
                "APP_MONITOR",
                board=self.lock_board,
                region=self.index,
            )
            throttle.start()
            self.throttles.append(throttle)
            app.guard.throttle = throttle
        server = await loop.create_server(
            lambda: HttpProtocol(app, cfg, self.conns, loop),  # type: ignore[arg-type]
            sock=self.sockets[len(self.plan.ports)],
            ssl=cfg.ssl_context(),
            ssl_handshake_timeout=cfg.tls_handshake_timeout_ms / 1000 if cfg.is_tls else None,
            ssl_shutdown_timeout=2.0 if cfg.is_tls else None,
            backlog=256,
        )
        self._servers.append(server)

    def request_counts(self) -> tuple[int, int]:
        """(requests in flight, requests answered) over every worker of the service."""
        if self.counters is None:
            return (sum(a.in_flight for a in self.apps), sum(a.total for a in self.apps))
        values = list(self.counters)
        return sum(values[0::2]), sum(values[1::2])

    # -- native routes read these -----------------------------------------------------------------
    def service_secret(self) -> bytes:
        """A key shared by every worker and host of the service (anti-forgery tokens)."""
        if self._secret is None:
            candidate = secrets.token_bytes(32)
            store = self.plan.store
            try:
                self._secret = store.signing_key(candidate) if store is not None else candidate
            except StoreError:
                self._secret = candidate
        return self._secret

    def workers_alive(self) -> tuple[int, int]:
        if self.heartbeat is None:
            return 1, 1
        limit = self.plan.config.worker_timeout_ms / 1000
        now = time.monotonic()
        beats = list(self.heartbeat)
        return sum(1 for beat in beats if now - beat <= limit), len(beats)

    async def usage_figures(self) -> dict[str, Any]:
        """Usage figures of every live worker of the service (published through the store)."""
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        per_worker: dict[str, list[list[Any]]] = {}
        store = self.plan.store
        if store is not None:
            with contextlib.suppress(StoreError, TimeoutError):
                await self._publish_once()
                blobs = await asyncio.wait_for(asyncio.to_thread(store.blobs, "usage:"), 1.4)
                now = time.time()
                for name, blob in blobs.items():
                    data = orjson.loads(blob)
                    # a worker that stopped publishing (gone, or a previous run) is left out
                    if isinstance(data, dict) and now - float(data.get("t", 0)) < _USAGE_STALE_S:
                        per_worker[name[len("usage:") :]] = data.get("rows", [])
        per_worker[self.identity] = [row for app in self.apps for row in app.usage.export()]
        return merge(per_worker)

    async def reset_usage(self) -> None:
        """Start the figures from zero in every worker: at once on this host (SIGUSR1 to the
        other workers), within a second on other hosts (the epoch in the store)."""
        store = self.plan.store
        epoch = secrets.token_hex(8).encode()
        for app in self.apps:
            app.usage.reset()
        if store is not None:
            await asyncio.wait_for(asyncio.to_thread(store.delete_blobs, "usage:"), 1.4)
            await asyncio.wait_for(asyncio.to_thread(store.put_blob, "epoch:usage", epoch), 1.4)
        self._usage_epoch = epoch
        if self.parent_pid is not None:
            for pid in _siblings(self.parent_pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGUSR1)

    def on_reset_signal(self) -> None:
        """SIGUSR1 from a sibling that reset the usage figures."""
        for app in self.apps:
            app.usage.reset()
        assert self.loop is not None
        self.loop.create_task(self._adopt_epoch())

    async def _adopt_epoch(self) -> None:
        store = self.plan.store
        if store is None:
            return
        with contextlib.suppress(StoreError, TimeoutError):
            epochs = await asyncio.wait_for(asyncio.to_thread(store.blobs, "epoch:usage"), 1.4)
            self._usage_epoch = epochs.get("epoch:usage", self._usage_epoch)

    async def _publish_once(self) -> None:
        store = self.plan.store
        if store is None:
            return
        epochs = await asyncio.wait_for(asyncio.to_thread(store.blobs, "epoch:usage"), 1.4)
        epoch = epochs.get("epoch:usage", b"")
        if epoch != self._usage_epoch:
            if self._usage_epoch or epoch:
                for app in self.apps:
                    app.usage.reset()
            self._usage_epoch = epoch
        rows = [row for app in self.apps for row in app.usage.export()]
        blob = orjson.dumps({"t": time.time(), "rows": rows})
        await asyncio.wait_for(
            asyncio.to_thread(store.put_blob, f"usage:{self.identity}", blob), 1.4
        )

    async def _publish_usage(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self._publish_once()
            except (StoreError, TimeoutError) as exc:
                log.server_log.debug("usage figures not published: %s", exc)

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
        for port, sock in zip(self.plan.ports, self.sockets[: len(self.plan.ports)], strict=True):
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
                throttle = Throttle(
                    self.plan.store,
                    settings.max_failures,
                    port.config.name,
                    board=self.lock_board,
                    region=self.index,
                )
                throttle.start()
                self.throttles.append(throttle)
                guard.throttle = throttle
            if isinstance(guard, BasicGuard | BearerGuard) and port.locations:
                # a def OnAuth/onAuth runs in the thread pool of the port's first location
                guard.pool = self.pools[port.locations[0].pool_name.lower()]
            app = PortApp(port, self.pools, guard)
            app.token_service = service
            app.worker = self
            self.apps.append(app)
            cfg = port.config
            server = await loop.create_server(
                lambda app=app, cfg=cfg: HttpProtocol(app, cfg, self.conns, loop),
                sock=sock,
                ssl=cfg.ssl_context(),
                ssl_handshake_timeout=cfg.tls_handshake_timeout_ms / 1000 if cfg.is_tls else None,
                ssl_shutdown_timeout=2.0 if cfg.is_tls else None,
                backlog=2048,
            )
            self._servers.append(server)
        if self.plan.config.monitor is not None:
            await self._serve_monitor(loop)
        self.settings.start()
        self._usage_task = loop.create_task(self._publish_usage())
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
        if self.counters is not None:
            self.counters[2 * self.index] = sum(a.in_flight for a in self.apps)
            self.counters[2 * self.index + 1] = self._total_base + sum(a.total for a in self.apps)
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
        self.settings.stop()
        if self._usage_task is not None:
            self._usage_task.cancel()
        # let the cancelled background tasks finish before the loop closes
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current and t.cancelled() is False]
        for task in pending:
            if not task.done():
                task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=2)
        # from the loop's last turn: its flush runs as the loop stops (and log.flush() before
        # the worker exits catches what any other way out leaves behind)
        log.server_log.info(
            "worker %d stopped after %d request(s)",
            self.index + 1,
            sum(app.total for app in self.apps),
        )
