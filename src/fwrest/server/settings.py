"""Run-time settings (SPEC 5.1): the value typed in at run time (in the state store, shared by
every worker and host), the value in the config file's ``[GENERAL]`` (re-read every
``rest_reload_time`` seconds), and the default. The effective snapshot is swapped whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from collections.abc import Callable
from multiprocessing.sharedctypes import RawArray
from typing import Any, TypeVar

from fwrest import log
from fwrest.config import Tunables, read_general
from fwrest.config.tunables import SETTINGS, SettingsError
from fwrest.errors import ConfigError
from fwrest.server.state import tunables
from fwrest.store import SettingsStore, StateStore, StoreError
from fwrest.store.audit import ACTOR_FILE, AuditEvent, AuditLog
from fwrest.store.calls import REQUEST_DEADLINE_S, StoreClient, call_store

__all__ = ["SETTINGS", "SettingsBoard", "SettingsError", "SettingsManager"]

T = TypeVar("T")

_SYNC_S = 0.5


class SettingsBoard:
    """Run-time values in memory shared by the workers of one supervisor (inherited at fork).

    The ``memory`` state store lives in each worker's own process: with ``--workers N`` a
    change stored there would reach one worker only. Such workers keep their run-time settings
    here instead. One cell per setting, -1 for none (every setting is >= 0); no lock, so that
    a worker killed while writing cannot block the others: a reader may see a change of
    several keys half done until its next sync, half a second later.
    """

    def __init__(self) -> None:
        self._names = list(SETTINGS)
        self._cells: Any = RawArray("q", len(self._names))
        for i in range(len(self._names)):
            self._cells[i] = -1

    def get_settings(self) -> dict[str, int]:
        values = {name: int(self._cells[i]) for i, name in enumerate(self._names)}
        return {name: value for name, value in values.items() if value >= 0}

    def set_settings(self, values: dict[str, int | None]) -> tuple[dict[str, int], float]:
        before = self.get_settings()
        for name, value in values.items():
            self._cells[self._names.index(name)] = -1 if value is None else value
        return before, time.time_ns() // 1000 / 1e6  # the host's workers: one clock


class SettingsManager:
    """One per worker: keeps :data:`fwrest.server.state.tunables` up to date.

    Args:
        config_file: the configuration file, whose ``[GENERAL]`` is read again every
            ``rest_reload_time``.
        file_values: its ``[GENERAL]`` values at start.
        store: the state store, where run-time changes are kept for every worker and host.
        board: the supervisor's settings board, used instead of a per-process (memory) store.
        level_cell: the supervisor's ``rest_log_level`` cell, written when the level changes.
        audit: the audit trail (SPEC 13.5), where a re-read of the file that changed values
            is recorded (a run-time change is recorded by the route that made it).
        records_file: whether this worker records the file's changes (each worker reads the
            file; one of a host records them).
    """

    def __init__(
        self,
        config_file: Any,
        file_values: dict[str, int],
        store: StateStore | None,
        *,
        board: SettingsBoard | None = None,
        level_cell: Any = None,
        client: StoreClient | None = None,
        audit: AuditLog | None = None,
        records_file: bool = True,
    ) -> None:
        self.config_file = config_file
        self.file = dict(file_values)
        self.runtime: dict[str, int] = {}
        self.store: SettingsStore | None = store
        if store is not None and store.in_process and board is not None:
            self.store = board  # a memory store is per worker: share through the board
        self._level_cell = level_cell
        self._client = client
        self._audit = audit if records_file else None
        self._last_reload = time.monotonic()
        self._changes = 0  # local changes made; a store read begun before one is stale
        self._task: asyncio.Task[None] | None = None

    async def _call(
        self, fn: Callable[..., T], *args: Any, deadline_s: float = REQUEST_DEADLINE_S
    ) -> T:
        """A store call under the request deadline (SPEC 7: 503 within 1.5 s)."""
        if self._client is not None:
            return await self._client.call(fn, *args, deadline=deadline_s)
        return await call_store(fn, *args, deadline=deadline_s)

    def effective(self) -> Tunables:
        return self._effective_of(self.runtime)

    def _effective_of(self, runtime: dict[str, int]) -> Tunables:
        values = {**self.file, **runtime}
        return Tunables(**{k: v for k, v in values.items() if k in SETTINGS})

    def describe(self) -> dict[str, dict[str, Any]]:
        """The JSON API's shape: runtime, file, default, effective, allowed per setting."""
        eff = dataclasses.asdict(self.effective())
        return {
            name: {
                "runtime": self.runtime.get(name),
                "file": self.file.get(name),
                "default": key.default,
                "effective": eff[name],
                "allowed": key.allowed,
            }
            for name, key in SETTINGS.items()
        }

    def apply(self, reason: str) -> None:
        new = self.effective()
        old = tunables.current
        if new == old:
            return
        tunables.swap(new)
        if new.rest_log_level != old.rest_log_level:
            log.set_level(new.rest_log_level)
            if self._level_cell is not None:  # the supervisor's own lines follow it
                self._level_cell.value = new.rest_log_level
        changes = ", ".join(
            f"{f.name} {getattr(old, f.name)} -> {getattr(new, f.name)}"
            for f in dataclasses.fields(new)
            if getattr(old, f.name) != getattr(new, f.name)
        )
        # a worker that starts (a reload's, a replacement) takes what the service already
        # runs with: no change of the service's to warn about
        level = logging.INFO if reason == "start" else logging.WARNING
        log.server_log.log(level, "settings changed (%s): %s", reason, changes)

    async def change(
        self, changes: dict[str, int | None], deadline_s: float = REQUEST_DEADLINE_S
    ) -> tuple[dict[str, tuple[int, int]], float]:
        """Store a change for every worker and host, and apply it here at once; each changed
        key's value in force before and after, and the time the store made the change (the
        time of its audit events: they list in the order the store applied the changes). A
        key is changed when its run-time value or its value in force is not what the store
        held before (a key set to the value it had is left out: no event, SPEC 13.5)."""
        if self.store is None:
            raise StoreError("no state store")
        # SPEC 7: a settings change answers 503 within 1.5 s when the store hangs. What the
        # store held before is the value in force for the service (SPEC 13.5): this worker's
        # copy may be up to a sync behind a change made through another worker or host.
        previous, stamp = await self._call(self.store.set_settings, changes, deadline_s=deadline_s)
        before = self._effective_of({k: v for k, v in previous.items() if k in SETTINGS})
        self._changes += 1
        for name, value in changes.items():
            if value is None:
                self.runtime.pop(name, None)
            else:
                self.runtime[name] = value
        self.apply("run time")
        compared = _compare(before, self.effective(), changes)
        changed = {
            name: pair
            for name, pair in compared.items()
            if pair[0] != pair[1] or previous.get(name) != changes[name]
        }
        return changed, stamp

    def start(self) -> None:
        self.apply("start")
        self._last_reload = time.monotonic()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._sync())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _sync(self) -> None:
        first = True
        while True:
            if not first:  # the first sync runs at once: a new worker adopts run-time values
                await asyncio.sleep(_SYNC_S)
            # ... and the file's [GENERAL] as it is now: a worker started to replace one that
            # died must not serve with the values read when the service started
            reread_now, first = first, False
            if self.store is not None:
                try:
                    changes = self._changes
                    fresh = await self._call(self.store.get_settings)
                    if changes == self._changes:  # else a change here was newer than the read
                        self.runtime = {k: v for k, v in fresh.items() if k in SETTINGS}
                except (StoreError, TimeoutError) as exc:
                    log.server_log.debug("run-time settings not refreshed: %s", exc)
            # The interval in force now counts (one shortened at run time applies at once).
            due = self._last_reload + tunables.current.rest_reload_time
            if self.config_file is not None and (reread_now or time.monotonic() >= due):
                self._last_reload = time.monotonic()
                try:
                    fresh_file = await asyncio.to_thread(read_general, self.config_file)
                    self._file_changed(fresh_file)
                except ConfigError as exc:
                    log.server_log.error("[GENERAL] not reloaded, the file has an error: %s", exc)
                except OSError as exc:
                    log.server_log.error("[GENERAL] not reloaded: %s", exc)
            self.apply("start" if reread_now else "sync")

    def _file_changed(self, fresh: dict[str, int]) -> None:
        """Take the file's values read again; record each one that changed (SPEC 13.5)."""
        before, old_file = self.effective(), self.file
        self.file = fresh
        if self._audit is None:
            return
        changed = {k for k in SETTINGS if old_file.get(k) != fresh.get(k)}
        after = self.effective()
        # the level in force before (now) or after (once applied) is above 0: in the log
        logged = max(before.rest_log_level, after.rest_log_level) > 0
        for name, (old, new) in _compare(before, after, changed).items():
            details = {"key": name, "old": old, "new": new, "file": fresh.get(name)}
            details |= {"via": "file", "host": socket.gethostname()}
            event = AuditEvent("settings.change", ACTOR_FILE, details=details)
            self._audit.record(event, logged=logged)


def _compare(before: Tunables, after: Tunables, keys: Any) -> dict[str, tuple[int, int]]:
    """Each of ``keys`` (run-time settings) with its value in force before and after."""
    return {k: (getattr(before, k), getattr(after, k)) for k in keys if k in SETTINGS}
