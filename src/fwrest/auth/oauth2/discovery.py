"""Discovery of an oAuth2 port (SPEC 12.2): issuers, the JWK Set route, the authorization
server metadata (RFC 8414) under each location and at the port's well-known path.

The issuers and the documents' endpoints are decided at start (:func:`issuers`,
:class:`Metadata`); the grant types and scopes a document lists are what ``onAuthparams``
allows when it is asked, and the JWK Set is the port's current one (:class:`PortKeys`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from fwrest.auth.oauth2.grants import GRANT_TYPES
from fwrest.context.request import Response, current
from fwrest.errors import HTTPError
from fwrest.routing.names import (
    AUTHORIZE_ROUTE,
    AUTHORIZE_ROUTE_NAME,
    INTROSPECT_ROUTE,
    JWKS_ROUTE,
    METADATA_ROUTE,
    REVOKE_ROUTE,
    TOKEN_ROUTE,
    TOKEN_ROUTE_NAME,
)
from fwrest.wire import Reply, Request

if TYPE_CHECKING:
    from fwrest.auth.oauth2.params import AuthParams
    from fwrest.auth.settings import AuthSettings
    from fwrest.context.request import RequestContext

__all__ = [
    "JWKS_ROUTE",
    "METADATA_ROUTE",
    "WELL_KNOWN",
    "Metadata",
    "WellKnown",
    "grants_at_start",
    "issuers",
    "jwks_max_age",
    "jwks_route",
    "metadata_paths",
    "metadata_route",
    "offered_grants",
]

WELL_KNOWN = "/.well-known/oauth-authorization-server"  # RFC 8414 3
KNOWN_GRANTS = ("password", "refresh_token")  # granted when onAuthparams lists no types
JWKS_MAX_AGE_S = 300
JWKS_MAX_AGE = f"max-age={JWKS_MAX_AGE_S}"  # SPEC 12.2


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


def _grants_of(allowed: AuthParams | None) -> list[str]:
    """The grant types ``onAuthparams`` allows now (its ``types``, in fwrest's order), else
    the two granted when it lists none."""
    if allowed is None or allowed.types is None:
        return list(KNOWN_GRANTS)
    return [g for g in GRANT_TYPES if g in allowed.types]


def _scopes_of(allowed: AuthParams | None) -> list[str]:
    """``default`` and every scope a user or client entry of ``onAuthparams`` lists now."""
    scopes = ["default"]
    if allowed is None:
        return scopes
    for listed in (*allowed.user_scopes.values(), *allowed.client_scopes.values()):
        scopes += [scope for scope in listed if scope not in scopes]
    return scopes


class Metadata:
    """The metadata document (RFC 8414 2) of each location of an oAuth2 port: its endpoints
    fixed at start, its grant types and scopes what ``onAuthparams`` allows when asked (a
    file edited or a function's answer changed since the start shows at once)."""

    __slots__ = ("_authorize", "_heads", "_last", "_token", "bindings")

    def __init__(
        self,
        by_location: dict[str, str],
        *,
        asymmetric: bool,
        bound: dict[str, Any] | None = None,
        disabled: Iterable[str] = (),
    ) -> None:
        disabled = frozenset(disabled)
        # a grant whose route NativeRoutes disables is not listed (RFC 8414 2: a client
        # reading the document would try it; with the code grant listed, authorization_endpoint
        # is required): every grant needs the token route, the code grant the authorize route
        self._token = TOKEN_ROUTE_NAME not in disabled
        self._authorize = self._token and AUTHORIZE_ROUTE_NAME not in disabled
        # the fields of the token bindings (SPEC 16.2), set by the assembly
        self.bindings: dict[str, Any] = {}
        self._heads: dict[str, dict[str, Any]] = {}
        for prefix, issuer in by_location.items():
            # a configured issuer is named as written, a trailing "/" too (SPEC 12.2); the
            # endpoints are under it without that slash doubled
            base = issuer.rstrip("/")
            head: dict[str, Any] = {"issuer": issuer}
            # an endpoint NativeRoutes disables is not named (RFC 8414 2: each is the URL
            # of that endpoint; a client would fetch a 404)
            if self._token:
                head["token_endpoint"] = base + TOKEN_ROUTE
            if asymmetric and "oauth2/jwks" not in disabled:
                head["jwks_uri"] = base + JWKS_ROUTE
            if "oauth2/revoke" not in disabled:
                head["revocation_endpoint"] = base + REVOKE_ROUTE
            if "oauth2/introspect" not in disabled:
                head["introspection_endpoint"] = base + INTROSPECT_ROUTE
            if bound:  # SPEC 16.2: the bindings the port makes (auth/oauth2/mtls.py)
                head.update(bound)
            self._heads[prefix] = head
        # the documents of the last settings seen: a file's stay the same object until it
        # changes, so most requests are one lookup
        self._last: tuple[AuthParams | None, dict[str, bytes]] = (None, {})

    def document(self, prefix: str, allowed: AuthParams | None) -> bytes | None:
        """The document of the location ``prefix``; None for a prefix the port lacks."""
        head = self._heads.get(prefix)
        if head is None:
            return None
        seen, documents = self._last
        if seen is not allowed or allowed is None:
            documents = {}
            self._last = (allowed, documents)
        body = documents.get(prefix)
        if body is None:
            body = documents[prefix] = orjson.dumps(
                {
                    **head,
                    "grant_types_supported": self.grants(allowed),
                    "scopes_supported": _scopes_of(allowed),
                    "token_endpoint_auth_methods_supported": _auth_methods(allowed),
                    "response_types_supported": [],
                    **(_code_fields(head["issuer"], allowed) if self._authorize else {}),
                    **self.bindings,
                }
            )
        return body

    def grants(self, allowed: AuthParams | None) -> list[str]:
        """The grant types ``onAuthparams`` allows now whose routes the port serves."""
        return offered_grants(allowed, token=self._token, authorize=self._authorize)


def offered_grants(allowed: AuthParams | None, *, token: bool, authorize: bool) -> list[str]:
    """The grant types ``allowed`` lists (fwrest's order; without ``types``, ``password`` and
    ``refresh_token``) that work with the token route served (``token``) and the authorize
    route (``authorize``): every grant needs the first, the code grant the second too."""
    if not token:
        return []
    grants = _grants_of(allowed)
    return grants if authorize else [g for g in grants if g != "authorization_code"]


def grants_at_start(settings: AuthSettings, disabled: frozenset[str]) -> list[str]:
    """:func:`offered_grants` of a port, ``onAuthparams`` read once as ``fwrest check`` reads it
    (a file, or a function that is not a coroutine called without a request), for
    ``fwrest openapi``; what a source that cannot be read so gives: the grants without ``types``.
    """
    from fwrest.auth.oauth2.params import ParamsSource
    from fwrest.repository import is_async

    source = ParamsSource(settings.params_func, settings.params_file)
    allowed: AuthParams | None = None
    try:
        if source.file is not None:
            allowed = source.read_file()
        elif source.func is not None and not is_async(source.func):
            allowed = source.call_sync({})
    except Exception:  # the start and fwrest check say what is wrong
        allowed = None
    token = TOKEN_ROUTE_NAME not in disabled
    return offered_grants(
        allowed, token=token, authorize=token and AUTHORIZE_ROUTE_NAME not in disabled
    )


def _auth_methods(allowed: AuthParams | None) -> list[str]:
    """How clients authenticate at the token route: ``none`` too when a public client exists
    (SPEC 16.1), whatever grants it has (a public client's password grant is client_id alone)."""
    public = allowed is not None and bool(allowed.public)
    return ["client_secret_basic", "client_secret_post", *(["none"] if public else [])]


def _code_fields(issuer: str, allowed: AuthParams | None) -> dict[str, Any]:
    """The fields of the authorization code grant (SPEC 16.1), when ``types`` lists it."""
    if allowed is None or allowed.types is None or "authorization_code" not in allowed.types:
        return {}
    return {
        "authorization_endpoint": issuer.rstrip("/") + AUTHORIZE_ROUTE,
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
    }


def _json(body: bytes, cache: str) -> Reply:
    return Reply(200, [("content-type", "application/json"), ("cache-control", cache)], body)


def metadata_paths(by_location: dict[str, str]) -> dict[str, str]:
    """``/.well-known/oauth-authorization-server{issuer's path}`` -> its location's prefix."""
    from urllib.parse import urlsplit

    paths: dict[str, str] = {}
    for prefix, issuer in by_location.items():
        paths.setdefault(WELL_KNOWN + urlsplit(issuer).path.rstrip("/"), prefix)
    return paths


_ALLOW = ("allow", "GET, HEAD, OPTIONS")  # as the routes of the same documents


class DocumentCors(Protocol):
    """What :class:`WellKnown` uses of a location's CORS (``features/cors.py``'s)."""

    def preflight(self, req: Request) -> Reply | None: ...

    def headers(self, req: Request, headers: list[tuple[str, str]]) -> None: ...


class WellKnown:
    """An early stage of an oAuth2 port (every method): a discovery document at a well-known
    path of the port's root, before the port's guard (never behind its scheme): the RFC 8414
    metadata (:func:`metadata_paths`) or the RFC 9728 protected resource documents
    (``resource.Resources.well_known_paths``). Another method than GET and HEAD is answered
    as the document's route under the location answers it: 200 with ``Allow`` to
    ``OPTIONS``, else 405. One dict lookup for any other path. A document of a location with
    a CORS section (``cors``: prefix -> its policy) is answered to the origins it allows as
    the location's own route is (SPEC 16.1: a single-page app discovers the endpoints), its
    preflight granted for GET and HEAD."""

    __slots__ = ("_cors", "_document", "_paths")

    def __init__(
        self,
        paths: dict[str, str],
        document: Callable[[str], Awaitable[bytes | None]],
        cors: Mapping[str, DocumentCors] | None = None,
    ) -> None:
        self._document = document
        self._paths = paths  # well-known path -> location prefix
        self._cors = cors or {}

    def paths(self) -> list[str]:
        return list(self._paths)

    async def __call__(self, req: Request, ctx: RequestContext) -> Reply | None:
        prefix = self._paths.get(ctx.path)
        if prefix is None:
            return None
        method = req.method
        cors = self._cors.get(prefix)
        if method != "GET" and method != "HEAD":
            if method == "OPTIONS":
                if cors is not None:
                    granted = cors.preflight(req)
                    if granted is not None:
                        return granted
                return Reply(200, [_ALLOW], b"")
            raise HTTPError(405, headers=(_ALLOW,))
        body = await self._document(prefix)
        if body is None:
            return None
        reply = _json(body, JWKS_MAX_AGE)
        if cors is not None:
            cors.headers(req, reply.headers)
        return reply


async def jwks_route() -> Response:
    """The port's public keys (RFC 7517 JWK Set); 404 on an HS256 port (SPEC 12.2)."""
    service = current.get().port.token_service
    found = await service.current_jwks() if service is not None else None
    if found is None:
        raise HTTPError(404)
    jwks, until = found
    return Response(jwks, 200, {"cache-control": jwks_max_age(until)}, "application/json")


def jwks_max_age(until: float) -> str:
    """``max-age=300`` (SPEC 12.2), less when a key of the set is dropped sooner (``until``,
    epoch seconds): a cache must not keep publishing a key fwrest no longer accepts.

    >>> jwks_max_age(float("inf")), jwks_max_age(time.time() + 42.5), jwks_max_age(0.0)
    ('max-age=300', 'max-age=42', 'max-age=0')
    """
    if until - time.time() >= JWKS_MAX_AGE_S:
        return JWKS_MAX_AGE
    return f"max-age={max(int(until - time.time()), 0)}"


async def metadata_route() -> Response:
    """The authorization server metadata of the request's location (RFC 8414)."""
    ctx = current.get()
    service = ctx.port.token_service
    body = await service.metadata_document(ctx.location_path) if service is not None else None
    if body is None:
        raise HTTPError(404)
    return Response(body, 200, {"cache-control": JWKS_MAX_AGE}, "application/json")
