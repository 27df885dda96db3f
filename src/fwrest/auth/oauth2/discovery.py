"""Discovery of an oAuth2 port (SPEC 12.2): issuers, the JWK Set route, the authorization
server metadata (RFC 8414) under each location and at the port's well-known path.

Everything here is decided at start (:func:`issuers`, :func:`metadata_documents`); the routes
answer with bytes made then, or with the port's current JWK Set (:class:`PortKeys`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from fwrest.context.request import Response, current
from fwrest.errors import HTTPError
from fwrest.routing.names import (
    INTROSPECT_ROUTE,
    JWKS_ROUTE,
    METADATA_ROUTE,
    REVOKE_ROUTE,
    TOKEN_ROUTE,
)
from fwrest.wire import Reply, Request

if TYPE_CHECKING:
    from fwrest.context.request import RequestContext

__all__ = [
    "JWKS_ROUTE",
    "METADATA_ROUTE",
    "WELL_KNOWN",
    "WellKnown",
    "issuers",
    "jwks_route",
    "metadata_documents",
    "metadata_route",
]

WELL_KNOWN = "/.well-known/oauth-authorization-server"  # RFC 8414 3
KNOWN_GRANTS = ("password", "refresh_token")  # granted when onAuthparams lists no types
JWKS_MAX_AGE = "max-age=300"  # SPEC 12.2


def issuers(host: str, port: int, prefixes: Iterable[str], configured: str) -> dict[str, str]:
    """Location prefix -> issuer: ``https://{HostName}:{Port}{location path}``, or the
    ``issuer`` of the Authorization object for every location when set (SPEC 12.2).

    >>> issuers("127.0.0.1", 8443, ["/rest", "/"], "")
    {'/rest': 'https://127.0.0.1:8443/rest', '/': 'https://127.0.0.1:8443'}
    """
    shown = f"[{host}]" if ":" in host else host
    out = {}
    for prefix in prefixes:
        out[prefix] = configured or f"https://{shown}:{port}{'' if prefix == '/' else prefix}"
    return out


def _scopes_of(file: Path | None) -> list[str]:
    """``default`` and every scope a user or client entry of an ``onAuthparams`` file lists
    (a function's entries are not known at start: ``default`` only)."""
    scopes = ["default"]
    if file is None:
        return scopes
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return scopes
    entries: list[Any] = [data] if isinstance(data, dict) else []
    for array in ("users", "client"):
        listed = data.get(array) if isinstance(data, dict) else None
        if isinstance(listed, list):
            entries += listed
    for entry in entries:
        values = entry.get("scopes") if isinstance(entry, dict) else None
        for scope in values if isinstance(values, list) else ():
            if isinstance(scope, str) and scope not in scopes:
                scopes.append(scope)
    return scopes


def metadata_documents(
    by_location: dict[str, str],
    *,
    asymmetric: bool,
    grant_types: tuple[str, ...] | None,
    params_file: Path | None,
) -> dict[str, bytes]:
    """Location prefix -> its metadata document (RFC 8414 2), as bytes."""
    scopes = _scopes_of(params_file)
    out = {}
    for prefix, issuer in by_location.items():
        doc: dict[str, Any] = {
            "issuer": issuer,
            "token_endpoint": issuer + TOKEN_ROUTE,
        }
        if asymmetric:
            doc["jwks_uri"] = issuer + JWKS_ROUTE
        doc |= {
            "revocation_endpoint": issuer + REVOKE_ROUTE,
            "introspection_endpoint": issuer + INTROSPECT_ROUTE,
            "grant_types_supported": list(grant_types or KNOWN_GRANTS),
            "scopes_supported": scopes,
            "token_endpoint_auth_methods_supported": [
                "client_secret_basic",
                "client_secret_post",
            ],
            "response_types_supported": [],
        }
        out[prefix] = orjson.dumps(doc)
    return out


def _json(body: bytes, cache: str) -> Reply:
    return Reply(200, [("content-type", "application/json"), ("cache-control", cache)], body)


class WellKnown:
    """An early stage of an oAuth2 port (GET and HEAD): the metadata at
    ``/.well-known/oauth-authorization-server{issuer's path}``, at the port's root, before
    the port's guard (never behind its scheme). One dict lookup for any other path."""

    __slots__ = ("_paths",)

    def __init__(self, by_location: dict[str, str], documents: dict[str, bytes]) -> None:
        from urllib.parse import urlsplit

        self._paths: dict[str, bytes] = {}
        for prefix, issuer in by_location.items():
            path = urlsplit(issuer).path.rstrip("/")
            self._paths.setdefault(WELL_KNOWN + path, documents[prefix])

    def paths(self) -> list[str]:
        return list(self._paths)

    async def __call__(self, req: Request, ctx: RequestContext) -> Reply | None:
        body = self._paths.get(ctx.path)
        if body is None:
            return None
        return _json(body, JWKS_MAX_AGE)


async def jwks_route() -> Response:
    """The port's public keys (RFC 7517 JWK Set); 404 on an HS256 port (SPEC 12.2)."""
    service = current.get().port.token_service
    jwks = service.jwks() if service is not None else None
    if jwks is None:
        raise HTTPError(404)
    return Response(jwks, 200, {"cache-control": JWKS_MAX_AGE}, "application/json")


async def metadata_route() -> Response:
    """The authorization server metadata of the request's location (RFC 8414)."""
    ctx = current.get()
    service = ctx.port.token_service
    body = service.metadata.get(ctx.location_path) if service is not None else None
    if body is None:
        raise HTTPError(404)
    return Response(body, 200, {"cache-control": JWKS_MAX_AGE}, "application/json")
