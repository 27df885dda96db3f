"""Names of routes that more than one part of fwrest must recognise, spelled once."""

from __future__ import annotations

__all__ = ["TOKEN_BODY_LIMIT", "TOKEN_ROUTE", "TOKEN_ROUTE_NAME"]

TOKEN_ROUTE_NAME = "oauth2/token"  # noqa: S105 - its name in NativeRoutes (the path after /fw/)
TOKEN_ROUTE = f"/fw/{TOKEN_ROUTE_NAME}"  # relative to its location
TOKEN_BODY_LIMIT = 16384  # SPEC 7: the token route's body limit, whatever MaxBodySize says
