"""One worker: an event loop serving every port on sockets bound by the supervisor (or by
``start()``), heartbeat, graceful drain.

What the ports are made of is built by :mod:`fwrest.server.assembly`; the service-wide usage
figures are shared by :mod:`fwrest.server.usage_sync`. The worker is also the
:class:`~fwrest.context.views.ServiceView` its native routes see.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fwrest import log
from fwrest.config.model import ServerConfig
from fwrest.monitor import Collector
from fwrest.server.app import PortApp
from fwrest.server.assembly import Assembly, assemble, monitor_throttle
from fwrest.server.build import ServicePlan
from fwrest.server.hooks import run_on_start, run_on_stop
from fwrest.server.http import ConnectionSet, HttpProtocol
from fwrest.server.monitor_port import MonitorPort, monitor_server_config
from fwrest.server.readiness import Probes, StoreCheck
from fwrest.server.settings import SettingsManager
from fwrest.server.shared import HostShared
from fwrest.server.state import tunables
from fwrest.server.tls_accept import HandshakeGate, TlsListener
from fwrest.server.usage_sync import UsageSync
from fwrest.store import StateStore, StoreError
from fwrest.store.audit import AuditLog
from fwrest.store.calls import StoreClient
from fwrest.wire import PortHandler

if TYPE_CHECKING:
    from fwrest.server.tracing import Tracing

__all__ = ["Worker", "new_loop"]


def new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


SECRET_RETRY_S = 5.0  # how often a worker asks a store that did not answer for the shared key
# what a stopping worker waits at most for the background tasks it cancelled to end, and
# after how long it cancels again one that is still running (_cancelled_ended)
CANCELLED_WAIT_S = 1.0
CANCELLED_GRACE_S = 0.1
# what a draining worker waits at most, once GracefulTimeout closed the connections still busy,
# for the application's calls running in its pools to return (a def generator's step, which
# then closes it; a chunked handler, told its client is gone) before OnStop runs
STEPS_END_S = 2.0


class Worker:
    """Serves a :class:`ServicePlan` on listening sockets until :meth:`request_stop`.

    :meth:`open` and :meth:`close` build and stop everything but the sockets (what
    ``fwrest.testing.Client`` uses); :meth:`run` does both around serving the sockets.
    """

    def __init__(
        self,
        plan: ServicePlan,
        sockets: list[socket.socket],
        *,
        index: int = 0,
        parent_pid: int | None = None,
        started: float | None = None,
        shared: HostShared | None = None,
    ) -> None:
        self.plan = plan
        self.sockets = sockets
        self.index = index
        self.parent_pid = parent_pid
        # what the workers of the host share (None: a worker alone, start() or a test client)
        self.heartbeat = shared.heartbeat if shared is not None else None
        self.counters = shared.counters if shared is not None else None
        self.worker_pids = shared.worker_pids if shared is not None else None
        self.started_pids = shared.started_pids if shared is not None else None
        self._service_started = shared.service_started if shared is not None else None
        # the workers of one generation: two generations' slots, a reload's (SPEC 13.1)
        self._generation = max(shared.workers // 2, 1) if shared is not None else 1
        self.lock_board = shared.lock_board if shared is not None else None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.conns = ConnectionSet()
        # the monitor's port: its own connections and listener, which a stop keeps until the
        # drain of the service's ports ends (its probes answer 503 meanwhile: SPEC 13.3)
        self.monitor_conns = ConnectionSet()
        self.built = Assembly()
        self._servers: list[asyncio.base_events.Server | TlsListener] = []
        self._monitor_server: asyncio.base_events.Server | TlsListener | None = None
        # TLS handshakes in progress over every TLS port of this worker (SPEC 7.1)
        self.handshakes = HandshakeGate()
        self._stop: asyncio.Event | None = None
        self._close_idle = True  # False: a reload's drain (request_stop(reload=True))
        self._stopping = False  # told to stop, not to drain for a reload: ready says draining
        self.exit_code = 0
        self.started = started if started is not None else time.time()
        # SPEC 17.4: Tracing set: its module (and OpenTelemetry) imported here, in the worker
        self.tracing: Tracing | None = None
        if plan.config.tracing is not None:
            from fwrest.server.tracing import Tracing

            self.tracing = Tracing()
        # how this worker calls the state store: its own threads, one deadline policy
        self.store_client: StoreClient | None = None
        if plan.store is not None:
            self.store_client = (
                self.tracing.store_client(plan.store)
                if self.tracing is not None
                else StoreClient(plan.store)
            )
        # SPEC 13.5: events kept through the same client, off the request's way
        self._audit = AuditLog(plan.store, self.store_client)
        self._settings = SettingsManager(
            plan.config.source,
            plan.config.tunables_in_file,
            plan.store,
            board=shared.settings_board if shared is not None else None,
            level_cell=shared.level if shared is not None else None,
            client=self.store_client,
            audit=self._audit,
            # one worker of a generation records the file's changes (every worker reads them)
            records_file=shared is None or index % max(shared.workers // 2, 1) == 0,
        )
        self.usage = UsageSync(plan.store, self._usage_tables, parent_pid, self.store_client)
        # SPEC 13.3's probes; the store's state kept by a background ping, not asked per probe
        client = self.store_client
        self._store_check = StoreCheck(client, client.store.kind) if client is not None else None
        self.probes = Probes(
            self._store_check,
            self.workers_started,
            lambda: self.built.pools.values(),
            lambda: self.conns.draining and self._stopping,
            self.service_started,
        )
        self._secret: bytes | None = None
        self._secret_retry_at = 0.0  # while the store does not answer: a worker's own key
        self._total_base = int(self.counters[2 * index + 1]) if self.counters is not None else 0

    @property
    def apps(self) -> list[PortApp]:
        return self.built.apps

    def _usage_tables(self) -> list[Any]:
        return [app.usage for app in self.built.apps]

    async def _serve_monitor(self, loop: asyncio.AbstractEventLoop) -> None:
        mon = self.plan.config.monitor
        assert mon is not None
        cfg = monitor_server_config(mon, self.plan.monitor_port)
        root = self.parent_pid if self.parent_pid is not None else os.getpid()
        pids = self.worker_pids
        slots = (lambda: list(pids)) if pids is not None else None
        collector = Collector(root, self.request_counts, self.started, slots)
        throttle = monitor_throttle(self.plan, self.built, self.lock_board, self.index)
        app = MonitorPort(
            cfg, mon.api_path, collector, self.plan.monitor_auth, throttle, probe=self.probe
        )
        sock = self.sockets[len(self.plan.ports)]
        context = cfg.ssl_context()
        conns = self.monitor_conns
        if context is not None:  # under the worker's handshake cap, as the ports
            self._monitor_server = TlsListener(
                loop,
                sock,
                lambda: HttpProtocol(app, cfg, conns, loop),
                context,
                cfg.tls_handshake_timeout_ms / 1000,
                self.handshakes,
            )
            return
        self._monitor_server = await loop.create_server(
            lambda: HttpProtocol(app, cfg, conns, loop), sock=sock, backlog=256
        )

    def request_counts(self) -> tuple[int, int]:
        """(requests in flight, requests answered) over every worker of the service."""
        if self.counters is None:
            return (sum(a.in_flight for a in self.apps), sum(a.total for a in self.apps))
        values = list(self.counters)
        return sum(values[0::2]), sum(values[1::2])

    # -- ServiceView: what native routes read ------------------------------------------------------
    @property
    def store(self) -> StateStore | None:
        return self.plan.store

    @property
    def settings(self) -> SettingsManager:
        return self._settings

    @property
    def draining(self) -> bool:
        return self.conns.draining

    @property
    def audit(self) -> AuditLog:
        return self._audit

    def service_secret(self) -> bytes:
        """A key shared by every worker and host of the service (anti-forgery tokens). While
        the store does not answer (a service may start so: SPEC 7), the worker's own key,
        and the store asked again at most every ``SECRET_RETRY_S`` seconds: once it answers,
        the shared key replaces it, without a restart (a page served meanwhile is posted
        again)."""
        secret = self._secret
        if secret is not None and not self._secret_retry_at:
            return secret
        now = time.monotonic()
        if secret is None or now >= self._secret_retry_at:
            candidate = secret if secret is not None else secrets.token_bytes(32)
            store = self.plan.store
            try:
                secret = store.signing_key(candidate) if store is not None else candidate
                self._secret_retry_at = 0.0
            except StoreError:
                secret = candidate
                self._secret_retry_at = now + SECRET_RETRY_S
            self._secret = secret
        return secret

    def probe(self, name: str) -> tuple[int, dict[str, Any]]:
        return self.probes.answer(name)

    def workers_alive(self) -> tuple[int, int]:
        if self.heartbeat is None or self.worker_pids is None:
            return 1, 1
        limit = self.plan.config.worker_timeout_ms / 1000
        now = time.monotonic()
        # the slots that hold a worker (two generations of slots: SPEC 13.1's reload)
        beats = [b for b, pid in zip(self.heartbeat, self.worker_pids, strict=True) if pid]
        return sum(1 for beat in beats if now - beat <= limit), len(beats)

    def workers_started(self) -> tuple[int, int, int]:
        """(workers whose heartbeat is fresh, workers that finished starting, workers
        expected) of one generation: one whose every worker beats and finished starting if
        there is one (a reload runs two side by side for a while, SPEC 13.1), else this
        worker's own. A worker finished starting once it reported ready to the supervisor
        (``started_pids``); one in its start, a replacement too, does not count."""
        pids, beats, started = self.worker_pids, self.heartbeat, self.started_pids
        if pids is None or beats is None or started is None:
            return 1, int(self.probes.started), 1
        count = self._generation
        limit = self.plan.config.worker_timeout_ms / 1000
        now = time.monotonic()
        own = (0, 0, count)
        for first in range(0, len(pids), count):
            alive = ready = 0
            for slot in range(first, first + count):
                pid = pids[slot]
                if not pid:
                    continue
                if now - beats[slot] <= limit:
                    alive += 1
                if started[slot] == pid:
                    ready += 1
            if alive == ready == count:
                return alive, ready, count
            if first <= self.index < first + count:
                own = (alive, ready, count)
        return own

    def service_started(self) -> bool:
        """Whether every worker of the service finished starting at least once (SPEC 13.3's
        ``started``): kept in the shared cell from the first time it is seen, by a worker or
        by the supervisor as it marks the generation serving."""
        cell = self._service_started
        if cell is None:
            return self.probes.started
        if not cell.value:
            _, ready, expected = self.workers_started()
            if ready < expected:
                return False
            cell.value = 1
        return True

    async def usage_figures(self) -> dict[str, Any]:
        return await self.usage.figures()

    async def reset_usage(self) -> None:
        await self.usage.reset()

    def on_reset_signal(self) -> None:
        """SIGUSR1 from a sibling that reset the usage figures."""
        assert self.loop is not None
        self.usage.on_reset_signal(self.loop)

    # -- lifecycle ---------------------------------------------------------------------------------
    async def open(self) -> None:
        """Build every port's pipeline, start the background work and run the pools'
        ``OnStart`` hooks (SPEC 11.1), on the running loop.

        Raises:
            StartFailed: an ``OnStart`` raised (logged); what was started is stopped again.
        """
        loop = asyncio.get_running_loop()
        self.loop = loop
        tunables.swap(self.plan.config.tunables)
        self.built = assemble(
            self.plan,
            loop,
            self,
            lock_board=self.lock_board,
            region=self.index,
            client=self.store_client,
            audit=self._audit,
            tracing=self.tracing,
        )
        self._settings.start()
        self.usage.start()
        if self._store_check is not None:
            await self._store_check.start()
        try:
            await run_on_start(self.plan.hooks, self.built.pools, self.index + 1)
        except BaseException:
            await self._shut()
            raise
        self.probes.started = True

    async def close(self) -> None:
        """Run the pools' ``OnStop`` hooks (at most 10 s in all: SPEC 11.1), then stop what
        :meth:`open` started (the thread pools let their calls finish)."""
        await run_on_stop(self.plan.hooks, self.built.pools, self.index + 1)
        await self._shut()

    async def _shut(self) -> None:
        if self._store_check is not None:
            self._store_check.stop()
        self.built.close()
        self._settings.stop()
        self.usage.stop()
        await _cancelled_ended()
        await self._audit.drain()
        if self.store_client is not None:
            self.store_client.close()
        if self.tracing is not None:
            self.tracing.flush()  # the last spans, before the process goes

    async def run(self, on_ready: Callable[[], None] | None = None) -> int:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await self.open()
        ports = zip(self.plan.ports, self.sockets[: len(self.plan.ports)], strict=True)
        for app, (port, sock) in zip(self.built.handlers, ports, strict=True):
            cfg = port.config
            factory = self._factory(app, cfg, loop)
            context = cfg.ssl_context()
            if context is not None:  # accepted under the worker's handshake cap
                self._servers.append(
                    TlsListener(
                        loop,
                        sock,
                        factory,
                        context,
                        cfg.tls_handshake_timeout_ms / 1000,
                        self.handshakes,
                    )
                )
                continue
            server = await loop.create_server(factory, sock=sock, backlog=2048)
            self._servers.append(server)
        if self.plan.config.monitor is not None:
            await self._serve_monitor(loop)
        self._beat()
        if self.started_pids is not None:  # finished starting: the probes count it (SPEC 13.3)
            self.started_pids[self.index] = os.getpid()
            self.service_started()  # the last of a generation to finish sees them all
        if on_ready is not None:
            on_ready()
        await self._stop.wait()
        await self._drain()
        return self.exit_code

    def _factory(
        self, app: PortHandler, cfg: ServerConfig, loop: asyncio.AbstractEventLoop
    ) -> Callable[[], HttpProtocol]:
        return lambda: HttpProtocol(app, cfg, self.conns, loop)

    def _beat(self) -> None:
        """Heartbeat from inside the loop: a blocked loop stops beating (SPEC 7)."""
        if self.heartbeat is not None:
            self.heartbeat[self.index] = time.monotonic()
        self._publish_counts()
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            log.server_log.error("the supervisor is gone; worker %d stops", self.index + 1)
            self.request_stop()
            return
        assert self.loop is not None
        self.loop.call_later(0.5, self._beat)

    def _publish_counts(self) -> None:
        """This worker's requests in flight and answered, in its cells for the monitor's
        ``requests_in_flight`` and ``requests_total`` (SPEC 5: the whole service)."""
        if self.counters is not None:
            self.counters[2 * self.index] = sum(a.in_flight for a in self.apps)
            self.counters[2 * self.index + 1] = self._total_base + sum(a.total for a in self.apps)

    def _close_listener(self, server: asyncio.base_events.Server | TlsListener) -> None:
        if isinstance(server, TlsListener):
            server.close(handshakes=self._close_idle)
        else:
            server.close()

    def request_stop(self, *, reload: bool = False) -> None:
        """Stop accepting and drain (thread-safe through ``call_soon_threadsafe``); for a
        reload, kept-alive connections are closed after their next answer, not at once."""
        if not reload:  # also during a reload's drain: the service stops now
            self._stopping = True
        if self._stop is not None and not self._stop.is_set():
            self._close_idle = not reload
            self._stop.set()

    def request_retire(self) -> None:
        """SIGUSR2 from the supervisor: a new generation serves; drain as for a reload."""
        self.request_stop(reload=True)

    async def _drain(self) -> None:
        """Stop accepting on the service's ports and finish what is in progress, within
        ``GracefulTimeout`` (SPEC 1, 7). A request that comes on an open connection meanwhile
        is served, its answer closing the connection (docs/decisions.md, "Drain"). A stop
        closes the idle connections once no request is in progress, and keeps the monitor's
        port answering (its ready probe 503) until then; a reload closes it at once and lets
        idle connections end with their ``KeepAliveTimeout``, as the new generation serves."""
        stop = self._close_idle
        for server in self._servers:
            self._close_listener(server)
        self.conns.drain()
        monitor = self._monitor_server
        if not stop and monitor is not None:
            self._close_listener(monitor)
            self.monitor_conns.drain()
        deadline = time.monotonic() + self.plan.config.graceful_timeout_ms / 1000
        if stop:
            while (self.conns.busy or self.handshakes.pending) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            self.conns.close_idle()
            if monitor is not None:
                self._close_listener(monitor)
                self.monitor_conns.close_idle()
        every = (self.conns, self.monitor_conns)
        while (
            any(conns.items for conns in every) or self.handshakes.pending
        ) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        left = [conn for conns in every for conn in conns.items]
        if left:
            log.server_log.warning(
                "worker %d: %d connection(s) still busy after GracefulTimeout; closing them",
                self.index + 1,
                len(left),
            )
            for conn in left:
                conn.give_up()
            await self._steps_ended(left)
        # the last count: what was answered since the last beat (a reload's generation may
        # drain within half a second of it) still counts in requests_total
        self._publish_counts()
        await self.close()
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

    async def _steps_ended(self, given_up: list[HttpProtocol]) -> None:
        """After GracefulTimeout closed ``given_up``: wait, ``STEPS_END_S`` at most, for their
        answers to end and the application's calls running in the pools to return, so that a
        ``def`` generator is closed by its step and a chunked handler ends before ``OnStop``
        (SPEC 11.1: after the worker's last request); what still runs then is left to it."""
        pools = list(self.built.pools.values())
        end = time.monotonic() + STEPS_END_S
        while any(conn.answering for conn in given_up) or any(p.busy for p in pools):
            if time.monotonic() >= end:
                log.server_log.warning(
                    "worker %d: %d call(s) still running in the thread pools %.0f s after "
                    "GracefulTimeout; OnStop runs beside them",
                    self.index + 1,
                    sum(p.busy for p in pools),
                    STEPS_END_S,
                )
                return
            await asyncio.sleep(0.02)


async def _cancelled_ended() -> None:
    """Let the loop's cancelled tasks end, at most ``CANCELLED_WAIT_S``: the background
    tasks that ``_shut`` and the assembly's ``close`` cancelled (the store's check, the
    settings' sync, the usage figures, the guards' and the token services' refreshes), before
    the store client closes and the loop does (after a stop, or a failed ``OnStart``): a task
    the loop still held would be destroyed pending ("Task was destroyed but it is
    pending!"). Python 3.11's ``asyncio.wait_for`` drops a cancellation that comes as what
    it waits for ends: a task still running after ``CANCELLED_GRACE_S`` is cancelled again."""
    me = asyncio.current_task()
    end = time.monotonic() + CANCELLED_WAIT_S
    while True:
        left = [t for t in asyncio.all_tasks() if t is not me and t.cancelling()]
        now = time.monotonic()
        if not left or now >= end:
            return
        _, running = await asyncio.wait(left, timeout=min(CANCELLED_GRACE_S, end - now))
        for task in running:
            task.cancel()
