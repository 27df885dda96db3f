"""``fwrest serve``: bind every port once, fork the workers, keep them alive, stop gracefully.

The supervisor is single-threaded until it forks (no thread crosses a fork). Workers inherit
the listening sockets; a worker that dies is replaced (a crash-loop breaker stops the service
when workers keep dying); a worker whose event loop stops beating for ``WorkerTimeout`` is
killed and replaced; workers stop when the supervisor is gone. SIGTERM/SIGINT drain for at
most ``GracefulTimeout``; a second signal forces.
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
from typing import Any

from fwrest import log
from fwrest.server.build import ServicePlan
from fwrest.server.hooks import ON_STOP_LIMIT_S, StartFailed
from fwrest.server.monitor_port import monitor_url
from fwrest.server.shared import HostShared
from fwrest.server.worker import Worker, new_loop

__all__ = ["run_supervisor"]

_CRASH_WINDOW_S = 30.0
_CRASH_LIMIT = 5
_READY_TIMEOUT_S = 60.0
_START_FAILED = 3  # a worker's exit code when an OnStart raised (SPEC 11.1)


def _say(text: str) -> None:
    """Lifecycle lines for the operator, on standard output, whatever the log level."""
    # under start(workers=N) standard output is a pipe to a program that may have ended
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(f"fwrest: {text}\n")
        sys.stdout.flush()


class _Supervisor:
    def __init__(
        self,
        plan: ServicePlan,
        sockets: list[socket.socket],
        workers: int,
    ) -> None:
        self.plan = plan
        self.sockets = sockets
        self.count = workers
        # rest_log_level in force; the workers write a change into the shared cell
        self.level = plan.config.tunables.rest_log_level
        self.shared = HostShared.create(workers, self.level)
        self.heartbeat = self.shared.heartbeat
        self.worker_pids = self.shared.worker_pids
        self.started_at = time.time()
        self.pids: dict[int, int] = {}  # pid -> slot
        self.started: dict[int, float] = {}  # slot -> monotonic start
        self.crashes: deque[float] = deque()
        self.signals: list[int] = []
        self.ready_r, self.ready_w = os.pipe()
        self.serving = False  # every worker was ready once: the service started
        # start(workers=N): the program that started this supervisor; its end stops the service
        parent = os.environ.pop("FWREST_PARENT_PID", "")
        self.parent_pid = int(parent) if parent.isdigit() else None

    # -- workers ------------------------------------------------------------------------------
    def spawn(self, slot: int) -> None:
        self.heartbeat[slot] = time.monotonic()
        log.flush()  # else the worker inherits buffered lines and writes them again
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                os.close(self.ready_r)
                code = self._worker_main(slot)
            except StartFailed:
                code = _START_FAILED  # its OnStart's traceback is logged
            except BaseException:
                log.server_log.exception("worker %d failed", slot + 1)
            finally:
                log.flush()  # os._exit skips logging's own shutdown
                os._exit(code)
        self.pids[pid] = slot
        self.worker_pids[slot] = pid
        self.started[slot] = time.monotonic()

    def _worker_main(self, slot: int) -> int:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor; it decides
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # until the loop handles it (usage reset)
        log.set_worker_label(f"w{slot + 1}")
        worker = Worker(
            self.plan,
            self.sockets,
            index=slot,
            parent_pid=os.getppid(),
            started=self.started_at,
            shared=self.shared,
        )
        loop = new_loop()

        def ready() -> None:
            loop.add_signal_handler(signal.SIGTERM, worker.request_stop)
            loop.add_signal_handler(signal.SIGUSR1, worker.on_reset_signal)
            os.write(self.ready_w, bytes([slot]))
            log.server_log.info("worker %d ready (pid %d)", slot + 1, os.getpid())

        try:
            return loop.run_until_complete(worker.run(ready))
        finally:
            loop.close()

    def reap(self) -> None:
        while self.pids:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = self.pids.pop(pid, None)
            if slot is None:
                continue
            if self.signals:
                continue  # stopping: no replacements
            start_failed = os.WIFEXITED(status) and os.WEXITSTATUS(status) == _START_FAILED
            if start_failed and not self.serving:
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
            self.spawn(slot)

    def check_heartbeats(self) -> None:
        limit = self.plan.config.worker_timeout_ms / 1000
        now = time.monotonic()
        for pid, slot in list(self.pids.items()):
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

    # -- lifecycle ----------------------------------------------------------------------------
    def on_signal(self, signum: int, _frame: Any) -> None:
        self.signals.append(signum)

    def wait_ready(self) -> bool:
        ready: set[int] = set()
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while len(ready) < self.count and time.monotonic() < deadline and not self.signals:
            readable, _, _ = select.select([self.ready_r], [], [], 0.2)
            if readable:
                ready.update(os.read(self.ready_r, 64))
            self.reap()
        return len(ready) >= self.count

    def run(self) -> int:
        previous = {s: signal.signal(s, self.on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for slot in range(self.count):
                self.spawn(slot)
            if not self.wait_ready():
                if not self.signals:
                    log.server_log.error("the workers did not become ready")
                    self.stop(force=True)
                    return 1
            else:
                self.serving = True
                urls = [u for port in self.plan.ports for u in port.urls()]
                for port in self.plan.ports:
                    for url in port.urls():
                        _say(f"serving {url} [{port.config.name}]")
                mon = self.plan.config.monitor
                if mon is not None:
                    _say(f"serving {monitor_url(mon, self.plan.monitor_port)} [APP_MONITOR]")
                _say(f"ready: {len(urls)} URL(s), {self.count} worker(s), pid {os.getpid()}")
            while not self.signals:
                time.sleep(0.1)
                self.check_parent()
                self.follow_level()
                self.reap()
                self.check_heartbeats()
                # drain the ready pipe (replacement workers report there too)
                if select.select([self.ready_r], [], [], 0)[0]:
                    os.read(self.ready_r, 64)
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
            for sock in self.sockets:
                sock.close()

    def stop(self, *, force: bool) -> int:
        timeout = self.plan.config.graceful_timeout_ms / 1000
        if not force:
            _say(
                f"stopping: draining requests in flight (at most {timeout:.0f} s; "
                "a second Ctrl-C forces)"
            )
        for sock in self.sockets:
            sock.close()  # the supervisor's copy: workers keep theirs until they drain
        for pid in list(self.pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if force else signal.SIGTERM)
        handled = len(self.signals)
        deadline = time.monotonic() + timeout + 5
        if any(hooks.on_stop is not None for hooks in self.plan.hooks.values()):
            deadline += ON_STOP_LIMIT_S  # the workers' OnStop runs after their drain
        while self.pids and time.monotonic() < deadline:
            if len(self.signals) > max(handled, 1):
                _say("second signal: forcing the stop")
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
            _say("stopped")
        return 0


class _CrashLoop(Exception):
    pass


class _StartFailed(Exception):
    """A worker's ``OnStart`` failed before the service served: the start fails."""

    def __init__(self, slot: int) -> None:
        super().__init__(f"worker {slot + 1} did not start")
        self.slot = slot


def run_supervisor(
    plan: ServicePlan,
    sockets: list[socket.socket],
    workers: int,
) -> int:
    """Run the service until a signal stops it; the exit code (0 after a graceful stop)."""
    return _Supervisor(plan, sockets, workers).run()


__all__ += ["Worker"]
