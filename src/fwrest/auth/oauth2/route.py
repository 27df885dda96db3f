"""The routes an oAuth2 port's token service answers, native routes of every location:
``{base_url}/fw/oauth2/token`` (SPEC 4.2), ``/fw/oauth2/revoke`` and
``/fw/oauth2/introspect`` (SPEC 12.3), ``/fw/oauth2/jwks`` and ``/fw/oauth2/metadata``
(SPEC 12.2, in ``discovery.py``), ``/fw/oauth2/resource`` (SPEC 16.3, in ``resource.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fwrest.auth.oauth2.discovery import jwks_route, metadata_route
from fwrest.auth.oauth2.resource import resource_route
from fwrest.auth.oauth2.tokens import TokenService
from fwrest.context.request import current
from fwrest.errors import HTTPError
from fwrest.routing.names import (
    AUTHORIZE_ROUTE_NAME,
    INTROSPECT_ROUTE_NAME,
    RESOURCE_ROUTE_NAME,
    REVOKE_ROUTE_NAME,
    TOKEN_ROUTE_NAME,
)
from fwrest.wire import Reply

__all__ = ["OAUTH2_ROUTES", "authorize_route", "introspect_route", "revoke_route", "token_route"]


async def token_route() -> Reply:
    """Issue tokens (password grant) or rotate them (refresh_token grant)."""
    ctx = current.get()
    service = ctx.port.token_service
    if service is None:  # pragma: no cover - registered only on oAuth2 ports
        raise HTTPError(404)
    if ctx.method == "HEAD":  # pragma: no cover - the router refuses it (native/catalog.py)
        # HEAD would run the grant (spend a refresh token) and drop the tokens it issued
        raise HTTPError(405, headers=(("allow", "GET, OPTIONS, POST"),))
    return await service.token_endpoint(
        ctx.method,
        ctx.query_string,
        ctx.body,
        dict(ctx.headers),
        ctx.client,
        ctx.location_path,
        ctx.path,
    )


def _service() -> TokenService:
    service = current.get().port.token_service
    if not isinstance(service, TokenService):  # pragma: no cover - only on oAuth2 ports
        raise HTTPError(404)
    return service


async def authorize_route() -> Reply:
    """The authorization code grant's login page and form (SPEC 16.1)."""
    ctx = current.get()
    authorizer = _service().authorizer
    if authorizer is None:  # pragma: no cover - set by the assembly on every oAuth2 port
        raise HTTPError(404)
    return await authorizer.answer(
        ctx.method,
        ctx.query_string,
        ctx.body,
        ctx.headers.get("content-type"),
        ctx.client,
        ctx.location_path,
    )


async def revoke_route() -> Reply:
    """Revoke a token and its family (RFC 7009)."""
    from fwrest.auth.oauth2.revocation import revoke_endpoint

    ctx = current.get()
    return await revoke_endpoint(
        _service(), ctx.method, ctx.query_string, ctx.body, dict(ctx.headers), ctx.client
    )


async def introspect_route() -> Reply:
    """Describe a token (RFC 7662)."""
    from fwrest.auth.oauth2.revocation import introspect_endpoint

    ctx = current.get()
    return await introspect_endpoint(
        _service(), ctx.method, ctx.query_string, ctx.body, dict(ctx.headers), ctx.location_path
    )


# by route name (native/catalog.py lists their paths and methods)
OAUTH2_ROUTES: dict[str, Callable[..., Any]] = {
    TOKEN_ROUTE_NAME: token_route,
    REVOKE_ROUTE_NAME: revoke_route,
    INTROSPECT_ROUTE_NAME: introspect_route,
    "oauth2/jwks": jwks_route,
    AUTHORIZE_ROUTE_NAME: authorize_route,
    "oauth2/metadata": metadata_route,
    RESOURCE_ROUTE_NAME: resource_route,
}
