"""``GET {base}/fw/rest/audit`` (SPEC 13.5): the audit trail, newest first, and the events the
native routes record (:func:`record`).

Query: ``since`` (ISO 8601; without an offset, UTC), ``event`` (one of
:data:`~fwrest.store.audit.EVENTS`), ``limit`` (1-10000, default 100); anything else, or a
value given twice, is 400 with a message saying what is expected.

Who may read it: users ``onAdmin`` allows; when the port names no ``onAdmin``, every
authenticated user, and on a port without a scheme no one (403). A request without a user (the
route opened by ``NativeRoutes.public``) is refused too: there is no one ``onAdmin`` could
allow.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

import orjson

from fwrest.context.request import RequestContext, Response, current
from fwrest.errors import NO_STORE, HTTPError, store_unavailable
from fwrest.native.guard import is_admin
from fwrest.store import StoreError
from fwrest.store.audit import ANONYMOUS, EVENTS, AuditEvent

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "audit_trail", "parse_since", "record"]

DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000  # the store keeps no more
_PARAMS = ("since", "event", "limit")
_NO_STORE = dict(NO_STORE)


def record(
    ctx: RequestContext,
    event: str,
    details: dict[str, Any],
    ts: float | None = None,
    *,
    logged: bool = False,
) -> None:
    """Record an event a request made: its user (or ``anonymous``), address and port; at
    ``ts`` (an epoch second in whole microseconds) when given, else now; ``logged``: its line
    written whatever the level in force now (:meth:`AuditLog.record`)."""
    service = ctx.port.service
    if service is not None:
        actor = ctx.auth_user or ANONYMOUS
        made = AuditEvent(event, actor, ctx.client, ctx.port.name, details)
        if ts is not None:
            made = dataclasses.replace(made, ts=ts)
        service.audit.record(made, logged=logged)


def parse_since(text: str) -> float:
    """An ISO 8601 date or date-time as an epoch second; without an offset, UTC. A ``+`` of an
    offset that a query string turned into a blank is read as ``+``.

    >>> parse_since("2026-11-26T05:00:00Z"), parse_since("2026-11-26T06:00:00 01:00")
    (1795669200.0, 1795669200.0)

    Raises:
        ValueError: not such a date.
    """
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        if " " not in text:
            raise
        when = datetime.fromisoformat(text.replace(" ", "+"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _query(ctx: RequestContext) -> tuple[float, str | None, int]:
    """(since, event, limit) of the query; 400 for anything else."""
    try:
        pairs = parse_qsl(ctx.query_string, keep_blank_values=True, max_num_fields=8)
    except ValueError:
        raise HTTPError(400, detailed="the query string is malformed") from None
    seen: dict[str, str] = {}
    for name, value in pairs:
        if name not in _PARAMS:
            raise HTTPError(
                400,
                detailed=f"{name[:40]!r} is not a parameter of the audit trail; it takes "
                "since (ISO 8601), event and limit",
            )
        if name in seen:
            raise HTTPError(400, detailed=f"{name} is given twice")
        seen[name] = value
    since = 0.0
    if "since" in seen:
        try:
            since = parse_since(seen["since"])
        except ValueError:
            raise HTTPError(
                400,
                detailed=f"since must be an ISO 8601 date or date-time such as "
                f"2026-11-26T05:00:00Z (without an offset: UTC), got {seen['since'][:40]!r}",
            ) from None
    event = seen.get("event")
    if event is not None and event not in EVENTS:
        raise HTTPError(
            400,
            detailed=f"event must be one of {', '.join(EVENTS)}, got {event[:40]!r}",
        )
    limit = DEFAULT_LIMIT
    if "limit" in seen:
        text = seen["limit"]
        if not (text.isascii() and text.isdigit() and 1 <= int(text[:6]) <= MAX_LIMIT):
            raise HTTPError(
                400,
                detailed=f"limit must be a whole number in 1-{MAX_LIMIT} (default "
                f"{DEFAULT_LIMIT}), got {text[:40]!r}",
            )
        limit = int(text)
    return since, event, limit


async def _refuse_unless_allowed(ctx: RequestContext) -> None:
    """SPEC 13.5: users ``onAdmin`` allows; without one, every authenticated user, and on a
    port without a scheme no one."""
    if not ctx.port.auth.scheme:
        raise HTTPError(
            403,
            detailed="the audit trail is not served on a port without an authorization scheme",
        )
    if not ctx.auth_user:
        raise HTTPError(403, detailed="the audit trail needs an authenticated user")
    if ctx.port.on_admin is not None and not await is_admin(ctx):
        raise HTTPError(403, detailed="the audit trail is shown only to users onAdmin allows")


async def audit_trail() -> Response:
    """The audit events, newest first (``since``, ``event``, ``limit``)."""
    ctx = current.get()
    await _refuse_unless_allowed(ctx)
    since, event, limit = _query(ctx)
    service = ctx.port.service
    if service is None:  # a bare pipeline (no worker): nothing kept
        raise HTTPError(503, detailed="the audit trail needs a running worker")
    try:
        events = await service.audit.events(since, event, limit)
    except (StoreError, TimeoutError):
        raise store_unavailable() from None
    return Response(orjson.dumps(events), media_type="application/json", headers=_NO_STORE)
