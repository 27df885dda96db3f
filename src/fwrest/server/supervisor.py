"""``fwrest serve``: bind every port once, fork the workers, keep them alive, reload them,
stop gracefully.

The supervisor is single-threaded until it forks (no thread crosses a fork). Workers inherit
the listening sockets; a worker that dies is replaced (a crash-loop breaker stops the service
when workers keep dying); a worker whose event loop stops beating for ``WorkerTimeout`` is
killed and replaced; workers stop when the supervisor is gone. SIGTERM/SIGINT drain for at
most ``GracefulTimeout``; a second signal forces.

SIGHUP reloads (SPEC 13.1): the workers of one plan are a *generation*. A reload loads the
configuration and the repository afresh (``Reload``, given by ``serve``), forks a new
generation on the sockets the ports keep (and those of ports added), and once every one of
its workers is ready sends the previous generation SIGUSR2: they stop accepting and drain,
closing kept-alive connections after their next answer. The slots of the shared memory are
two sets of ``--workers``, one per generation, so both beat and count during the switch; a
reload that comes while a previous generation still drains waits for it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Protocol

from fwrest import log
from fwrest.errors import ConfigError
from fwrest.server.binding import Listening, listening
from fwrest.server.build import ServicePlan
from fwrest.server.hooks import ON_STOP_LIMIT_S, StartFailed
from fwrest.server.monitor_port import monitor_url
from fwrest.server.pidfile import remove_pid_file
from fwrest.server.shared import HostShared
from fwrest.server.watch import watch_files
from fwrest.server.worker import Worker, new_loop
from fwrest.store.audit import ACTOR_SIGNAL, AuditEvent, AuditLog

__all__ = ["Reload", "announce", "run_supervisor", "say"]

_CRASH_WINDOW_S = 30.0
_CRASH_LIMIT = 5
_READY_TIMEOUT_S = 60.0
_START_FAILED = 3  # a worker's exit code when an OnStart raised (SPEC 11.1)
_HOST = socket.gethostname()  # a reload's audit event names the host it ran on


def say(text: str) -> None:
    """Lifecycle lines for the operator, on standard output, whatever the log level."""
    # under start(workers=N) standard output is a pipe to a program that may have ended
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(f"fwrest: {text}\n")
        sys.stdout.flush()


def announce(plan: ServicePlan) -> None:
    """The ``serving URL [SECTION]`` lines of a plan (``start(workers=N)`` reads them)."""
    for port in plan.ports:
        for url in port.urls():
            say(f"serving {url} [{port.config.name}]")
    mon = plan.config.monitor
    if mon is not None:
        say(f"serving {monitor_url(mon, plan.monitor_port)} [APP_MONITOR]")


class _Generation:
    """The workers of one plan, in the slots ``slots``."""

    def __init__(
        self, number: int, plan: ServicePlan, sockets: list[socket.socket], slots: range
    ) -> None:
        self.number = number
        self.plan = plan
        self.sockets = sockets
        self.slots = slots
        self.serving = False  # every worker was ready once
        self.retiring = False  # told to drain: no replacements
        self.failed = False  # a reload's worker died before its generation served


class _Supervisor:
    def __init__(
        self,
        plan: ServicePlan,
        sockets: list[socket.socket],
        workers: int,
        reload: Reload | None,
        pid_file: Path | None,
    ) -> None:
        self.count = workers
        self.reload_plan = reload
        self.pid_file = pid_file
        # rest_log_level in force; the workers write a change into the shared cell
        self.level = plan.config.tunables.rest_log_level
        # two slots per worker: a reload's two generations run side by side for a while
        self.shared = HostShared.create(2 * workers, self.level)
        self.heartbeat = self.shared.heartbeat
        self.worker_pids = self.shared.worker_pids
        self.current = _Generation(1, plan, sockets, range(workers))
        self.gens = [self.current]  # the current one, and one that drains or starts
        self.made = 1  # generations made
        self.started_at = time.time()
        self.pids: dict[int, int] = {}  # pid -> slot
        self.ready_pids: set[int] = set()
        self.crashes: deque[float] = deque()
        self.signals: list[int] = []
        self.loading = False  # a reload loads the configuration and the repository
        self.reloads = 0  # SIGHUPs not handled yet
        self.waiting_said = False
        self.watcher: int | None = None  # --reload: the process that watches the files
        self.watched: list[Path] = []
        self.watcher_deaths: deque[float] = deque()
        self.ready_r, self.ready_w = os.pipe()
        # start(workers=N): the program that started this supervisor; its end stops the service
        parent = os.environ.pop("FWREST_PARENT_PID", "")
        self.parent_pid = int(parent) if parent.isdigit() else None

    @property
    def plan(self) -> ServicePlan:
        return self.current.plan

    def gen_of(self, slot: int) -> _Generation:
        return next(g for g in self.gens if slot in g.slots)

    # -- workers ------------------------------------------------------------------------------
    def spawn(self, gen: _Generation, slot: int) -> None:
        self.heartbeat[slot] = time.monotonic()
        self.shared.started_pids[slot] = 0  # its worker writes its pid once it is ready
        log.flush()  # else the worker inherits buffered lines and writes them again
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                os.close(self.ready_r)
                # another generation's sockets: a port removed must close with its workers
                for other in self.gens:
                    for sock in other.sockets:
                        if all(sock is not own for own in gen.sockets):
                            sock.close()
                code = self._worker_main(gen, slot)
            except StartFailed:
                code = _START_FAILED  # its OnStart's traceback is logged
            except BaseException:
                log.server_log.exception("worker %d failed", slot + 1)
            finally:
                log.flush()  # os._exit skips logging's own shutdown
                os._exit(code)
        self.pids[pid] = slot
        self.worker_pids[slot] = pid

    def _worker_main(self, gen: _Generation, slot: int) -> int:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor; it decides
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a hang-up of the terminal: its reload
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # until the loop handles it (usage reset)
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # sent only to a ready worker
        log.set_worker_label(f"w{slot + 1}")
        worker = Worker(
            gen.plan,
            gen.sockets,
            index=slot,
            parent_pid=os.getppid(),
            started=self.started_at,
            shared=self.shared,
        )
        loop = new_loop()

        def ready() -> None:
            loop.add_signal_handler(signal.SIGTERM, worker.request_stop)
            loop.add_signal_handler(signal.SIGUSR1, worker.on_reset_signal)
            loop.add_signal_handler(signal.SIGUSR2, worker.request_retire)
            os.write(self.ready_w, slot.to_bytes(2, "big"))
            log.server_log.info("worker %d ready (pid %d)", slot + 1, os.getpid())

        try:
            return loop.run_until_complete(worker.run(ready))
        finally:
            loop.close()

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.watcher:
                self.watcher = None
                if not self.signals:
                    self.watcher_died(status)
                continue
            slot = self.pids.pop(pid, None)
            if slot is None:
                continue
            self.ready_pids.discard(pid)
            self.worker_pids[slot] = 0
            self.shared.started_pids[slot] = 0
            self.shared.counters[2 * slot] = 0  # its requests in flight ended with it
            gen = self.gen_of(slot)
            if self.signals or gen.retiring:
                continue  # stopping, or drained: no replacements
            start_failed = os.WIFEXITED(status) and os.WEXITSTATUS(status) == _START_FAILED
            if not gen.serving and gen.number > 1:
                gen.failed = True  # a reload's generation: the reload fails, no replacement
                continue
            if start_failed and not gen.serving:
                raise _StartFailed(slot)
            how = (
                f"signal {os.WTERMSIG(status)}"
                if os.WIFSIGNALED(status)
                else f"exit code {os.WEXITSTATUS(status)}"
            )
            log.server_log.error(
                "worker %d (pid %d) died (%s); starting a replacement", slot + 1, pid, how
            )
            now = time.monotonic()
            self.crashes.append(now)
            while self.crashes and now - self.crashes[0] > _CRASH_WINDOW_S:
                self.crashes.popleft()
            if len(self.crashes) >= _CRASH_LIMIT:
                raise _CrashLoop()
            self.spawn(gen, slot)

    def read_ready(self, wait: float = 0) -> None:
        """Take the ready reports (replacement workers report too); mark the generations
        whose every worker is ready as serving."""
        if select.select([self.ready_r], [], [], wait)[0]:
            data = os.read(self.ready_r, 512)  # whole reports: each is 2 bytes, written at once
            for i in range(0, len(data) - 1, 2):
                pid = int(self.worker_pids[int.from_bytes(data[i : i + 2], "big")])
                if pid in self.pids:
                    self.ready_pids.add(pid)
        for gen in self.gens:
            ready = all(self.worker_pids[s] in self.ready_pids for s in gen.slots)
            if ready and not gen.retiring:
                gen.serving = True
                self.shared.service_started.value = 1  # the started probe's 200 (SPEC 13.3)

    def check_heartbeats(self) -> None:
        now = time.monotonic()
        for pid, slot in list(self.pids.items()):
            limit = self.gen_of(slot).plan.config.worker_timeout_ms / 1000
            silent = now - self.heartbeat[slot]
            if silent > limit:
                log.server_log.error(
                    "worker %d (pid %d): its event loop has been blocked for %.1f s "
                    "(WorkerTimeout=%d ms); killing it",
                    slot + 1,
                    pid,
                    silent,
                    limit * 1000,
                )
                self.heartbeat[slot] = now  # once
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def follow_level(self) -> None:
        """Take up a ``rest_log_level`` a worker applied (run time or the file's [GENERAL])."""
        level = int(self.shared.level.value)
        if level != self.level:
            self.level = level
            log.set_level(level)

    def check_parent(self) -> None:
        """Under ``start(workers=N)``: stop, as on SIGTERM, once the starting program is gone."""
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            log.server_log.warning(
                "the program that started the service (pid %d) is gone; stopping", self.parent_pid
            )
            self.parent_pid = None
            self.signals.append(signal.SIGTERM)

    # -- reload (SPEC 13.1) -------------------------------------------------------------------
    def on_reload(self, _signum: int, _frame: Any) -> None:
        self.reloads += 1

    def settle(self) -> None:
        """Forget a retiring generation whose workers are all gone; then a reload that waited
        runs."""
        for gen in [g for g in self.gens if g.retiring]:
            if not any(slot in gen.slots for slot in self.pids.values()):
                self.gens.remove(gen)
                if gen.plan.store is not None and gen.plan.store is not self.plan.store:
                    gen.plan.store.close()  # the supervisor's own connection
                if not gen.failed and gen.serving:
                    log.server_log.info(
                        "reload: the workers of generation %d have drained", gen.number
                    )
        if not self.reloads:
            return
        if len(self.gens) > 1:
            if not self.waiting_said:
                self.waiting_said = True
                log.server_log.warning(
                    "reload: waiting for the workers of the previous reload to drain"
                )
            return
        self.reloads = 0
        self.waiting_said = False
        self.reload()

    def reload(self) -> None:
        if self.reload_plan is None:  # pragma: no cover - serve always gives one
            return
        say("reloading: loading the configuration and the repository afresh")
        old = self.current
        level = self.level  # in force before; the load sets up the log at the new one
        try:
            self.loading = True  # a stop signal now ends the load (an import that hangs)
            try:
                plan, sockets = self.reload_plan.load(listening(old.plan, old.sockets))
            finally:
                self.loading = False
        except _Abandoned:
            log.server_log.warning("reload abandoned: a stop signal came while it loaded")
            return
        except ConfigError as exc:
            log.server_log.error(
                "reload failed, the service goes on unchanged: fwrest: configuration error: %s",
                exc,
            )
            say("reload failed: the service goes on unchanged (see the log)")
            self.audit_reload(old.plan, "failed", reason="configuration error")
            return
        except BaseException:  # the application's KeyboardInterrupt too: never a real Ctrl-C
            log.server_log.exception("reload failed, the service goes on unchanged")
            say("reload failed: the service goes on unchanged (see the log)")
            self.audit_reload(old.plan, "failed", reason="error")
            return
        first = self.count if old.slots.start == 0 else 0
        self.made += 1  # a failed generation's number is not used again
        new = _Generation(self.made, plan, sockets, range(first, first + self.count))
        self.gens.append(new)
        for slot in new.slots:
            self.spawn(new, slot)
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not (new.serving or new.failed or self.signals) and time.monotonic() < deadline:
            self.read_ready(0.1)
            self.reap()
            self.check_heartbeats()
        if not new.serving:
            if not self.signals:
                log.server_log.error(
                    "reload failed: the new workers did not start (see above); the service "
                    "goes on unchanged"
                )
                say("reload failed: the service goes on unchanged (see the log)")
                self.audit_reload(old.plan, "failed", reason="the new workers did not start")
            self.retire(new, drain=False)
            return
        self.current = new
        self.retire(old, drain=True)
        self.level = plan.config.tunables.rest_log_level
        self.shared.level.value = self.level
        announce(new.plan)
        say(
            f"reloaded: generation {new.number}, {self.count} worker(s); the previous workers drain"
        )
        # a reload that turned the log off is in it (SPEC 13.5: at the level before it)
        self.audit_reload(plan, "done", logged=level > 0, generation=new.number)
        self.watch()

    def audit_reload(
        self, plan: ServicePlan, outcome: str, *, logged: bool = False, **details: object
    ) -> None:
        """SPEC 13.5: a reload (done or failed) in the audit trail, kept by the plan's store
        (the supervisor's own connection; with a memory store, the supervisor's own, so the
        log line only). Blocking: the supervisor has no loop, and a reload is rare.
        ``logged``: its line written whatever the level in force now."""
        details = {"outcome": outcome, **details, "workers": self.count, "host": _HOST}
        event = AuditEvent("reload", ACTOR_SIGNAL, details=details)
        AuditLog(plan.store).record_now(event, logged=logged)

    def retire(self, gen: _Generation, *, drain: bool) -> None:
        """Stop a generation's workers (a ready one drains as for a reload), and close the
        supervisor's copy of each socket the other generation does not use."""
        gen.retiring = True
        for slot in gen.slots:  # the probes count the workers of the other generation only
            self.shared.started_pids[slot] = 0
        others = [s for g in self.gens if g is not gen for s in g.sockets]
        for sock in gen.sockets:
            if all(sock is not kept for kept in others):
                sock.close()
        for pid, slot in self.pids.items():
            if slot in gen.slots:
                ready = drain and pid in self.ready_pids
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGUSR2 if ready else signal.SIGTERM)

    def watcher_died(self, status: int) -> None:
        """The ``--reload`` watcher ended while the service runs: say so and start another
        (SPEC 13.2, as a worker is replaced), unless it keeps dying."""
        how = (
            f"signal {os.WTERMSIG(status)}"
            if os.WIFSIGNALED(status)
            else f"exit code {os.WEXITSTATUS(status)}"
        )
        now = time.monotonic()
        self.watcher_deaths.append(now)
        while now - self.watcher_deaths[0] > _CRASH_WINDOW_S:
            self.watcher_deaths.popleft()
        if len(self.watcher_deaths) >= _CRASH_LIMIT:
            log.server_log.error(
                "--reload: the process that watches the files died (%s), %d times within "
                "%.0f s; files are no longer watched (SIGHUP still reloads)",
                how,
                _CRASH_LIMIT,
                _CRASH_WINDOW_S,
            )
            return
        log.server_log.warning(
            "--reload: the process that watches the files died (%s); starting another", how
        )
        self.watched = []
        self.watch()

    def watch(self) -> None:
        """Under ``--reload``: (re)start the process that watches the files of the current
        plan, when they changed."""
        if self.reload_plan is None or not self.reload_plan.watch:
            return
        files = self.reload_plan.watched(self.plan)
        if files == self.watched and self.watcher is not None:
            return
        if self.watcher is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.watcher, signal.SIGTERM)
        self.watched = files
        log.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(self.ready_r)
                for gen in self.gens:
                    for sock in gen.sockets:
                        sock.close()
                for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                    signal.signal(signum, signal.SIG_DFL)
                # Ctrl-C is the supervisor's; SIGUSR1 the workers' (a usage reset signals
                # every child of the supervisor)
                for signum in (signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
                    signal.signal(signum, signal.SIG_IGN)
                watch_files(files, os.getppid(), say)
            except BaseException:
                log.server_log.exception("watching the files for --reload failed")
                code = 1
            finally:
                log.flush()
                os._exit(code)
        self.watcher = pid

    # -- lifecycle ----------------------------------------------------------------------------
    def on_signal(self, signum: int, _frame: Any) -> None:
        self.signals.append(signum)
        if self.loading:  # a reload's load (an import, a store) may block: it is abandoned
            self.loading = False
            raise _Abandoned()

    def wait_ready(self) -> bool:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        gen = self.current
        while not gen.serving and time.monotonic() < deadline and not self.signals:
            self.read_ready(0.2)
            self.reap()
        return gen.serving

    def run(self) -> int:
        previous = {s: signal.signal(s, self.on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self.on_reload)
        try:
            for slot in self.current.slots:
                self.spawn(self.current, slot)
            if not self.wait_ready():
                if not self.signals:
                    log.server_log.error("the workers did not become ready")
                    self.stop(force=True)
                    return 1
            else:
                announce(self.plan)
                urls = [u for port in self.plan.ports for u in port.urls()]
                say(f"ready: {len(urls)} URL(s), {self.count} worker(s), pid {os.getpid()}")
                self.watch()
            while not self.signals:
                time.sleep(0.1)
                self.check_parent()
                self.follow_level()
                self.reap()
                self.check_heartbeats()
                self.read_ready()
                self.settle()
            return self.stop(force=False)
        except _StartFailed as failed:
            log.server_log.critical(
                "worker %d did not start (its OnStart failed: see above); the service does "
                "not start",
                failed.slot + 1,
            )
            self.stop(force=True)
            return 1
        except _CrashLoop:
            log.server_log.critical(
                "workers died %d times within %.0f s: stopping the service instead of "
                "restarting them again (see the errors above)",
                _CRASH_LIMIT,
                _CRASH_WINDOW_S,
            )
            self.stop(force=True)
            return 1
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            for gen in self.gens:
                for sock in gen.sockets:
                    sock.close()
            if self.pid_file is not None:
                remove_pid_file(self.pid_file)

    def stop(self, *, force: bool) -> int:
        timeout = self.plan.config.graceful_timeout_ms / 1000
        if not force:
            say(
                f"stopping: draining requests in flight (at most {timeout:.0f} s; "
                "a second Ctrl-C forces)"
            )
        if self.watcher is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.watcher, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.watcher, 0)
            self.watcher = None
        for gen in self.gens:
            for sock in gen.sockets:
                sock.close()  # the supervisor's copy: workers keep theirs until they drain
        for pid in list(self.pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if force else signal.SIGTERM)
        handled = len(self.signals)
        deadline = time.monotonic() + timeout + 5
        if any(hooks.on_stop is not None for g in self.gens for hooks in g.plan.hooks.values()):
            deadline += ON_STOP_LIMIT_S  # the workers' OnStop runs after their drain
        while self.pids and time.monotonic() < deadline:
            if len(self.signals) > max(handled, 1):
                say("second signal: forcing the stop")
                for pid in list(self.pids):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                handled = len(self.signals)
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                self.pids.pop(pid, None)
            else:
                time.sleep(0.05)
        for pid in list(self.pids):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        if not force:
            say("stopped")
        return 0


class _CrashLoop(Exception):
    pass


class _Abandoned(BaseException):
    """A stop signal came while a reload loaded its plan: the load ends, the service stops.
    No ``Exception``: the application's ``except Exception`` at import does not take it."""


class _StartFailed(Exception):
    """A worker's ``OnStart`` failed before the service served: the start fails."""

    def __init__(self, slot: int) -> None:
        super().__init__(f"worker {slot + 1} did not start")
        self.slot = slot


class Reload(Protocol):
    """What a reload needs of ``serve``: the new plan, bound, and the files ``--reload``
    watches."""

    watch: bool  # --reload: watch the files

    def load(self, kept: Listening) -> tuple[ServicePlan, list[socket.socket]]:
        """The new plan and its sockets (``kept`` where a port is kept).

        Raises:
            ConfigError: the configuration or the repository fails; nothing has changed.
        """
        ...

    def watched(self, plan: ServicePlan) -> list[Path]:
        """The files whose change reloads under ``--reload``."""
        ...


def run_supervisor(
    plan: ServicePlan,
    sockets: list[socket.socket],
    workers: int,
    reload: Reload | None = None,
    pid_file: Path | None = None,
) -> int:
    """Run the service until a signal stops it; the exit code (0 after a graceful stop)."""
    return _Supervisor(plan, sockets, workers, reload, pid_file).run()


__all__ += ["Worker"]
