"""``{base_url}/fw/oauth2/token``: a native route of every location of an oAuth2 port."""

from __future__ import annotations

from fwrest.context.request import Response, current
from fwrest.errors import HTTPError

__all__ = ["token_route"]


async def token_route() -> Response:
    """Issue tokens (password grant) or rotate them (refresh_token grant)."""
    ctx = current.get()
    service = ctx.port.token_service
    if service is None:  # pragma: no cover - registered only on oAuth2 ports
        raise HTTPError(404)
    if ctx.method == "HEAD":
        # HEAD would run the grant (spend a refresh token) and drop the tokens it issued
        raise HTTPError(405, headers=(("allow", "GET, POST"),))
    status, headers, body = await service.token_endpoint(
        ctx.method, ctx.query_string, ctx.body, dict(ctx.headers), ctx.client, ctx.location_path
    )
    return Response(body, status, dict(headers), media_type="application/json")
