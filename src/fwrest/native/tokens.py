"""``POST {base}/fw/oauth2/revoke-user`` (SPEC 12.3): revoke every token family of a user,
as ``fwrest tokens revoke CONFIG --user NAME`` does. A JSON POST (``{"username": "..."}``)
behind the port's scheme, with what every state-changing native route needs (``Host``,
``Origin``: :mod:`fwrest.native.guard`), allowed only to users ``onAdmin`` allows: without an
``onAdmin``, to no one (docs/decisions.md). Another key than ``username``, or a name with a
control character, is 400; a name no user has is 200 with ``revoked_families: 0`` (the route
does not tell which users exist)."""

from __future__ import annotations

import orjson

from fwrest import log
from fwrest.context.request import Response, current
from fwrest.errors import HTTPError, store_unavailable
from fwrest.native.audit import record
from fwrest.native.guard import JSON_TYPE, is_admin, media_type, refuse_foreign
from fwrest.store import StoreError
from fwrest.store.calls import call_store
from fwrest.store.families import revoke_user as revoke_families
from fwrest.store.families import user_name_problem

__all__ = ["revoke_user"]

_WHAT = "a revocation of a user's tokens"
_SHAPE = 'the body must be {"username": "<a user name>"}, and nothing else'


async def revoke_user() -> Response:
    """Revoke every token family of a user (JSON ``{"username": "..."}``; onAdmin only)."""
    ctx = current.get()
    refuse_foreign(ctx, _WHAT)
    # no user (the route opened by NativeRoutes.public): no one onAdmin could allow
    if not ctx.auth_user or ctx.port.on_admin is None or not await is_admin(ctx):
        raise HTTPError(
            403,
            detailed=f"{_WHAT} is allowed only to users onAdmin allows"
            + ("" if ctx.port.on_admin is not None else " (this port names no onAdmin)"),
        )
    if media_type(ctx) != JSON_TYPE:
        raise HTTPError(415, detailed='send JSON: {"username": "..."}')
    try:
        data = orjson.loads(ctx.body)
    except orjson.JSONDecodeError:
        raise HTTPError(400, detailed="the body is not JSON") from None
    name = data.get("username") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        raise HTTPError(400, detailed=_SHAPE)
    unknown = [key for key in data if key != "username"]
    if unknown:
        shown = repr(unknown[0]) if len(unknown[0]) <= 40 else f"{unknown[0][:40]!r}..."
        raise HTTPError(400, detailed=f"unknown key {shown}: {_SHAPE}")
    problem = user_name_problem(name)
    if problem is not None:
        raise HTTPError(400, detailed=problem)
    store = ctx.port.service.store if ctx.port.service is not None else None
    if store is None:
        raise HTTPError(503, detailed="this route needs a running worker")
    try:
        count = await call_store(revoke_families, store, name)
    except StoreError:
        raise store_unavailable() from None
    log.auth_log.warning(
        "[%s] every token family of user %r revoked by %r (%d families)",
        ctx.port.name,
        log.escape(name),
        log.escape(ctx.auth_user or "-"),
        count,
    )
    record(ctx, "revocation", {"user": name, "families": count, "via": "oauth2/revoke-user"})
    return Response({"username": name, "revoked_families": count})
