"""Names of routes that more than one part of fwrest must recognise, spelled once."""

from __future__ import annotations

__all__ = ["OPEN_OAUTH2_ROUTES", "TOKEN_BODY_LIMIT", "TOKEN_ROUTE", "TOKEN_ROUTE_NAME"]

TOKEN_ROUTE_NAME = "oauth2/token"  # noqa: S105 - its name in NativeRoutes (the path after /fw/)
TOKEN_ROUTE = f"/fw/{TOKEN_ROUTE_NAME}"  # relative to its location
TOKEN_BODY_LIMIT = 16384  # SPEC 7: the token route's body limit, whatever MaxBodySize says
# SPEC 4.2, 12.2: the routes of an oAuth2 location that are never behind the port's scheme
OPEN_OAUTH2_ROUTES = frozenset({TOKEN_ROUTE, "/fw/oauth2/jwks", "/fw/oauth2/metadata"})
