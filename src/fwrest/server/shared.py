"""What the workers of one host share in memory: made once by the supervisor before it forks,
inherited by every worker, handed to each :class:`~fwrest.server.worker.Worker` in its
constructor (nothing assigns another module's globals).

Owns: the shared-memory cells (``multiprocessing`` raw arrays, no locks: a worker killed while
writing must not block the others). Must not know: what a worker does with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing.sharedctypes import RawArray, RawValue
from typing import Any

from fwrest.auth.throttle import LockBoard
from fwrest.server.settings import SettingsBoard

__all__ = ["HostShared"]


@dataclass(frozen=True, slots=True)
class HostShared:
    """The supervisor's cells, one slot per worker where per worker.

    ``fwrest serve`` makes two slots per worker of ``--workers``: a reload's new generation
    takes the half the running one does not use (SPEC 13.1); a slot whose pid is 0 holds no
    worker.

    Attributes:
        heartbeat: monotonic time of each worker's last beat (a blocked loop stops beating).
        counters: requests in flight and answered, two cells per worker.
        worker_pids: the pid in each slot (the monitor names workers by slot).
        started_pids: the pid of the slot's worker once it finished its start (its
            ``OnStart`` hooks ran, its sockets are served: the moment it reports ready to the
            supervisor); 0 while it starts, and once its generation retires. The probes
            count the workers that finished starting from it (SPEC 13.3).
        service_started: 1 once every worker of a generation had finished starting (the
            ``started`` probe's 200 from then on, replacements or reloads aside).
        lock_board: Basic lock-outs, seen by every worker at once.
        level: the ``rest_log_level`` in force, written by the worker that applies a change,
            so that the supervisor's own lines follow it.
        settings_board: run-time settings, when the state store is per process (memory).
    """

    workers: int
    heartbeat: Any
    counters: Any
    worker_pids: Any
    started_pids: Any
    service_started: Any
    lock_board: LockBoard
    level: Any
    settings_board: SettingsBoard

    @classmethod
    def create(cls, workers: int, level: int) -> HostShared:
        return cls(
            workers=workers,
            heartbeat=RawArray("d", workers),
            counters=RawArray("q", 2 * workers),
            worker_pids=RawArray("q", workers),
            started_pids=RawArray("q", workers),
            service_started=RawValue("i", 0),
            lock_board=LockBoard(workers),
            level=RawValue("i", level),
            settings_board=SettingsBoard(),
        )
