"""Protected resource metadata of an oAuth2 port (SPEC 16.3, RFC 9728) and the resource
indicators of its token route (RFC 8707).

Each location of the port is a protected resource: its identifier is the location's URL
under its issuer's origin (``https://{HostName}:{Port}{location path}``, or the configured
``issuer``'s origin with the location's path), its document is at
``/.well-known/oauth-protected-resource{location path}`` at the port's root and at
``{base}/fw/oauth2/resource``. Every URL, and the ``resource_metadata`` parameter the bearer
check's 401 answers carry (none when ``NativeRoutes`` disables ``oauth2/resource``), is decided at start (:class:`Resources`); only the scopes a
document lists follow ``onAuthparams`` as the authorization server metadata's do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from fwrest.auth.oauth2.errors import OAuthError
from fwrest.context.request import Response, current
from fwrest.errors import Challenge, HTTPError

if TYPE_CHECKING:
    from fwrest.auth.oauth2.params import AuthParams

__all__ = [
    "WELL_KNOWN_RESOURCE",
    "InvalidTarget",
    "Resources",
    "resource_route",
]

WELL_KNOWN_RESOURCE = "/.well-known/oauth-protected-resource"  # RFC 9728 3
MAX_AGE = "max-age=300"  # as the other discovery documents (SPEC 12.2)


class InvalidTarget(OAuthError):
    """RFC 8707 2: a ``resource`` that names no location of the port's server section."""

    def __init__(self, description: str) -> None:
        super().__init__("invalid_target", description)


def _scopes_of(allowed: AuthParams | None) -> list[str]:
    """``default`` and every scope a user or client entry of ``onAuthparams`` lists now (the
    authorization server metadata's ``scopes_supported``)."""
    scopes = ["default"]
    if allowed is None:
        return scopes
    for listed in (*allowed.user_scopes.values(), *allowed.client_scopes.values()):
        scopes += [scope for scope in listed if scope not in scopes]
    return scopes


def _identity(url: str) -> tuple[str, str] | None:
    """(origin folded, path without a trailing slash) of an https URL without query,
    fragment or user info; None for anything else (RFC 8707 2: an absolute URI without a
    fragment; fwrest's resources have no query)."""
    try:
        parts = urlsplit(url)
        port = parts.port  # a port that is not a number is a malformed URL
    except ValueError:
        return None
    if (
        parts.scheme.lower() != "https"
        or not parts.hostname
        or "@" in parts.netloc
        or parts.query
        or parts.fragment
        or url.endswith(("?", "#"))
    ):
        return None
    host = parts.hostname.lower()
    shown = f"[{host}]" if ":" in host else host
    origin = f"https://{shown}" + ("" if port in (None, 443) else f":{port}")
    return origin, parts.path.rstrip("/")


def _port_of(origin: str) -> int:
    """The port of an origin :func:`_identity` spelled (443 when it names none)."""
    port = urlsplit(origin).port
    return 443 if port is None else port


class Resources:
    """The protected resources of one oAuth2 port, by location prefix, decided at start from
    the port's issuers (``discovery.issuers``): each location's identifier (``resource``),
    the URL of its document, and the ``WWW-Authenticate`` parameter naming it.

    >>> r = Resources({"/rest": "https://127.0.0.1:8443/rest", "/": "https://127.0.0.1:8443"})
    >>> r.resource["/rest"], r.metadata_url["/"]
    ('https://127.0.0.1:8443/rest', 'https://127.0.0.1:8443/.well-known/oauth-protected-resource')
    >>> r.accepts("https://127.0.0.1:8443/rest/"), r.accepts("https://127.0.0.1:8443/other")
    (True, False)
    >>> r.accepts("https://10.0.0.2:8443/rest"), r.accepts("https://127.0.0.1:9443/rest")
    (True, False)
    """

    __slots__ = (
        "_bound",
        "_derived",
        "_identities",
        "bindings",
        "issuer",
        "metadata_url",
        "resource",
        "served",
    )

    def __init__(
        self,
        by_location: dict[str, str],
        *,
        configured: bool = False,
        bound: dict[str, Any] | None = None,
        served: bool = True,
    ) -> None:
        # False when NativeRoutes disables oauth2/resource: no URL serves the documents, so
        # no 401 names one (docs/decisions.md)
        self.served = served
        # SPEC 16.3: the binding fields of 16.2 the port's documents carry
        self._bound: dict[str, Any] = dict(bound or {})
        self.resource: dict[str, str] = {}
        self.metadata_url: dict[str, str] = {}
        self.issuer: dict[str, str] = dict(by_location)
        for prefix, issuer in by_location.items():
            parts = urlsplit(issuer)
            origin = f"{parts.scheme}://{parts.netloc}"
            path = "" if prefix in ("", "/") else prefix
            self.resource[prefix] = origin + path
            self.metadata_url[prefix] = origin + WELL_KNOWN_RESOURCE + path
        # what a token request's resource= may name (SPEC 16.3): the URL of a location of
        # the section as its document gives it. Under the configured issuer, exactly; under
        # derived ones, any host on the section's port (SPEC 12.2: the hosts of a service are
        # one issuer, a derived iss is compared without its host; HostName=0.0.0.0 names no
        # host a client uses), never another port: another section's (docs/decisions.md)
        known = [_identity(url) for url in self.resource.values()]
        self._identities = frozenset(i for i in known if i is not None)
        self._derived: frozenset[tuple[int, str]] = frozenset()
        if not configured:
            self._derived = frozenset((_port_of(origin), path) for origin, path in self._identities)
        # the fields of the token bindings (SPEC 16.2, RFC 9728 2), set by the assembly
        self.bindings: dict[str, Any] = {}

    def challenge(self, base: Challenge, prefix: str | None) -> Challenge:
        """``base`` with the ``resource_metadata`` auth-param (RFC 9728 5.1) of the location
        ``prefix`` (None: a path outside every location, which gets the port's first
        location's); ``base`` itself when the port serves no document (``served`` False).

        >>> r = Resources({"/rest": "https://h/rest"}, served=False)
        >>> print(r.challenge(Challenge("Bearer", realm="R"), "/rest"))
        Bearer realm="R"
        """
        if not self.served:
            return base
        url = self.metadata_url.get(prefix) if prefix is not None else None
        if url is None:
            url = next(iter(self.metadata_url.values()), "")
        return base.extended(resource_metadata=url)

    def challenges(self, base: Challenge) -> dict[str | None, Challenge]:
        """:meth:`challenge` of every location, and of a path outside them (key None),
        spelled at start.

        >>> r = Resources({"/rest": "https://h/rest"})
        >>> print(r.challenges(Challenge("Bearer", realm="R"))["/rest"])
        Bearer realm="R", resource_metadata="https://h/.well-known/oauth-protected-resource/rest"
        """
        out: dict[str | None, Challenge] = {
            prefix: self.challenge(base, prefix) for prefix in self.resource
        }
        out[None] = self.challenge(base, None)
        return out

    def accepts(self, value: str) -> bool:
        """Whether a token request's ``resource`` names a location of the section (RFC 8707)."""
        identity = _identity(value)
        if identity is None:
            return False
        if identity in self._identities:
            return True
        origin, path = identity
        return (_port_of(origin), path) in self._derived

    def check(self, value: str | None) -> None:
        """Raise :class:`InvalidTarget` for a ``resource`` the section does not serve."""
        if value is not None and not self.accepts(value):
            raise InvalidTarget("the resource is not served by this authorization server")

    def well_known_paths(self) -> dict[str, str]:
        """The document's path at the port's root -> its location prefix."""
        out: dict[str, str] = {}
        for prefix, url in self.metadata_url.items():
            out.setdefault(urlsplit(url).path, prefix)
        return out

    def document(self, prefix: str, allowed: AuthParams | None) -> bytes | None:
        """The document (RFC 9728 2) of the location ``prefix``; None for no such location."""
        resource = self.resource.get(prefix)
        if resource is None:
            return None
        fields: dict[str, Any] = {
            "resource": resource,
            "authorization_servers": [self.issuer[prefix]],
            "scopes_supported": _scopes_of(allowed),
            "bearer_methods_supported": ["header"],
            **self._bound,
            **self.bindings,
        }
        return orjson.dumps(fields)


async def resource_route() -> Response:
    """The protected resource metadata of the request's location (RFC 9728)."""
    ctx = current.get()
    service = ctx.port.token_service
    body = await service.resource_document(ctx.location_path) if service is not None else None
    if body is None:
        raise HTTPError(404)
    return Response(body, 200, {"cache-control": MAX_AGE}, "application/json")
