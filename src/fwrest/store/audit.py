"""The audit trail (SPEC 13.5): what changed the service's behaviour or state, who did it,
from where.

An event is ``{"ts", "event", "actor", "client", "port", "details"}`` (:class:`AuditEvent`).
:class:`AuditLog` writes it to the logger ``fwrest.audit`` (every ``rest_log_level`` above 0)
and keeps it in the state store (``AuditStore``: the newest 10,000, shared by the workers
and hosts of the store). Recording never fails nor slows what caused it: on a worker's loop
the store write is a task of its own through the worker's
:class:`~fwrest.store.calls.StoreClient` under the background deadline; a write that fails is
logged once (until one succeeds again), never raised. A command or the supervisor records
with :meth:`AuditLog.record_now`, a blocking write of its own; a command's lines go where the
service writes its own (:func:`command_audit`).

The names of the events are :data:`EVENTS`; an event names no secret (its callers put in it
user names, client ids, addresses, key ids, setting values: never a password, token, client
secret, key or ``Authorization`` value; ``tests/faults/test_canary.py`` checks).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from fwrest import log
from fwrest.errors import ConfigError
from fwrest.store.base import AuditStore, StateStore, StoreError
from fwrest.store.calls import BACKGROUND_DEADLINE_S, StoreClient

__all__ = [
    "ACTOR_CLI",
    "ACTOR_FILE",
    "ACTOR_SIGNAL",
    "ANONYMOUS",
    "EVENTS",
    "MEMORY_AUDIT",
    "NOT_KEPT",
    "AuditEvent",
    "AuditLog",
    "command_audit",
    "command_event",
    "iso_time",
    "os_user",
]

# the events, each documented on docs/operations.md ("Audit trail")
EVENTS = (
    "settings.change",  # a run-time setting changed: the page, the JSON API, the file re-read
    "reload",  # a reload of the whole service (SPEC 13.1), done or failed
    "lockout",  # a user name or an address locked out by the brute-force throttle
    "lockout.clear",  # fwrest lockouts clear lifted one
    "refresh.replay",  # a spent refresh token presented again: its family revoked
    "revocation",  # a token family revoked (RFC 7009), or every family of a user
    "keys.rotate",  # fwrest keys rotate made new current signing keys
    "login",  # a user logged in on the login page of the authorize route (SPEC 16.1)
    "login.failure",  # a wrong user or password on that page
    "code.replay",  # an authorization code redeemed again: what it issued revoked
)
# the actors that are no user (docs/decisions.md, "Audit trail")
ACTOR_CLI = "cli"  # a command of fwrest run by an operator
ACTOR_FILE = "file"  # the configuration file's [GENERAL], re-read
ACTOR_SIGNAL = "signal"  # SIGHUP: fwrest reload, kill -HUP, serve --reload's watcher
ANONYMOUS = "anonymous"  # a request without an authenticated user
# what a command prints when the store did not keep its event (the change itself is done)
NOT_KEPT = "fwrest: warning: the audit trail did not keep this event (the state store failed)"
MEMORY_AUDIT = (
    "fwrest: note: the state store is memory: the service keeps its audit trail in its own "
    "process, out of this command's reach; this change is not in it"
)


def iso_time(ts: float) -> str:
    """An epoch second as the events write it: ISO 8601 in UTC, to the microsecond.

    >>> iso_time(1790000000.25)
    '2026-09-21T14:13:20.250000Z'
    """
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def os_user() -> str:
    """The system user running a command (a command's events say who ran it)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "?"


def command_event(event: str, command: str, port: str | None = None, **details: Any) -> AuditEvent:
    """An event of a command of fwrest (actor ``cli``): its details name the command and the
    system user who ran it."""
    details |= {"via": command, "os_user": os_user()}
    return AuditEvent(event, ACTOR_CLI, port=port, details=details)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One event; ``client`` the client's address (None when no request made it), ``port`` the
    server section (None for what concerns the whole service)."""

    event: str
    actor: str
    client: str | None = None
    port: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=lambda: time.time_ns() // 1000 / 1e6)
    # whole microseconds, as ``ts`` is written: a ``since`` of an event's own ``ts`` is the
    # same float (``datetime.timestamp()`` divides the same integer), so the event is listed

    def as_dict(self) -> dict[str, Any]:
        return {
            "ts": iso_time(self.ts),
            "event": self.event,
            "actor": self.actor,
            "client": self.client,
            "port": self.port,
            "details": self.details,
        }


class AuditLog:
    """Records audit events: one per worker (and one in a command or the supervisor).

    Args:
        store: where events are kept (None: the log only, as ``fwrest check``).
        client: how a worker calls the store (its own threads, deadlines); None in a command
            or the supervisor, which call :meth:`record_now`.
        logger: where the lines go (a command's own: :func:`command_audit`); by default
            ``fwrest.audit`` of the process.
    """

    def __init__(
        self,
        store: AuditStore | None,
        client: StoreClient | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.store = store
        self._client = client
        self._logger = logger
        self._pending: set[asyncio.Task[None]] = set()
        self._failing = 0  # writes failed since the last that succeeded (logged once)

    def record(self, event: AuditEvent, *, logged: bool = False) -> None:
        """Log ``event`` now and keep it in the store off the caller's way (on the running
        loop: a task of its own; without a loop, at once). ``logged``: write its line whatever
        the level in force now (the event of a change that turned the log off or on: the
        level before or after it was above 0)."""
        entry = self._log(event, logged)
        if self.store is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._keep(event, entry)
            return
        task = loop.create_task(self._keep_later(event, entry))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def record_now(self, event: AuditEvent, *, logged: bool = False) -> bool:
        """Log ``event`` and keep it in the store before returning (a command, the
        supervisor); whether the store kept it. ``logged`` as for :meth:`record`."""
        entry = self._log(event, logged)
        return self.store is not None and self._keep(event, entry)

    async def events(self, since: float, event: str | None, limit: int) -> list[dict[str, Any]]:
        """The events kept, newest first (the route ``rest/audit``).

        Raises:
            StoreError: the store does not answer within the background deadline.
        """
        store = self.store
        if store is None:
            return []
        if self._client is not None:
            rows = await self._client.call(
                store.audit_events, since, event, limit, deadline=BACKGROUND_DEADLINE_S
            )
        else:
            rows = store.audit_events(since, event, limit)
        out = []
        for row in rows:
            with contextlib.suppress(orjson.JSONDecodeError):
                out.append(orjson.loads(row))
        return out

    async def drain(self) -> None:
        """Let the writes in progress finish (a worker's close), within their deadline."""
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=BACKGROUND_DEADLINE_S + 0.1)

    def _log(self, event: AuditEvent, logged: bool) -> bytes:
        shown = event.as_dict()
        entry = orjson.dumps(shown)
        logger = self._logger or log.audit_log
        if logged or logger.isEnabledFor(logging.INFO):
            args = (
                event.event,
                log.escape(event.actor),
                event.client or "-",
                event.port or "-",
                log.escape(orjson.dumps(event.details).decode()),
            )
            extra = {"fwrest_audit": shown}
            msg = "%s actor=%r client=%s port=%s %s"
            # (handled as logger.info would, without its check of the level)
            logger.handle(
                logger.makeRecord(logger.name, logging.INFO, "", 0, msg, args, None, extra=extra)
            )
        return entry

    async def _keep_later(self, event: AuditEvent, entry: bytes) -> None:
        store = self.store
        assert store is not None
        try:
            if self._client is not None:
                await self._client.call(
                    store.add_audit, event.ts, event.event, entry, deadline=BACKGROUND_DEADLINE_S
                )
            else:
                await asyncio.to_thread(store.add_audit, event.ts, event.event, entry)
        except (StoreError, TimeoutError) as exc:
            self._failed(event, exc)
            return
        self._kept()

    def _keep(self, event: AuditEvent, entry: bytes) -> bool:
        store = self.store
        assert store is not None
        try:
            store.add_audit(event.ts, event.event, entry)
        except StoreError as exc:
            self._failed(event, exc)
            return False
        self._kept()
        return True

    def _failed(self, event: AuditEvent, exc: Exception) -> None:
        self._failing += 1
        if self._failing == 1:
            log.server_log.warning(
                "audit event %s not kept in the state store: %s (it is in this log; this "
                "warning is not repeated until the store keeps one again)",
                event.event,
                str(exc) or f"no answer within {BACKGROUND_DEADLINE_S:g} s",
            )

    def _kept(self) -> None:
        if self._failing:
            log.server_log.warning(
                "audit events are kept in the state store again (%d not kept meanwhile, in "
                "this log only)",
                self._failing,
            )
            self._failing = 0


@contextlib.contextmanager
def command_audit(
    store: StateStore | None, rest_log_level: int, log_file: Path | None, log_format: str
) -> Iterator[AuditLog]:
    """The audit trail of a command that changes the service's state (``keys rotate``,
    ``tokens revoke``, ``lockouts clear``): its events kept in ``store`` and written where the
    service writes its audit lines (``LogFile``, appended, else standard error: a logger of
    the command's own, :func:`fwrest.log.command_audit_log`) at the ``rest_log_level`` in
    force for the service: its run-time value in the store (SPEC 5.1), else the file's
    ``rest_log_level``. Entered before the command changes anything, so that a ``LogFile``
    it cannot open refuses the command before it acts.

    Raises:
        ConfigError: ``LogFile`` exists and cannot be opened.
    """
    level = rest_log_level
    if store is not None:
        # (the command's own store work says so if the store fails)
        with contextlib.suppress(StoreError):
            level = store.get_settings().get("rest_log_level", level)
    try:
        logger = log.command_audit_log(level, log_file, log_format)
    except OSError as exc:
        raise ConfigError(
            f"the log file {log_file} cannot be written: {exc.strerror or exc}.",
            section="HTTPSERVER",
            key="LogFile",
            fix="give a file in a folder the service may write to (relative to the config file).",
        ) from None
    try:
        yield AuditLog(store, logger=logger)
    finally:
        log.close_logger(logger)
