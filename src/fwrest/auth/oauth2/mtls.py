"""Certificate-bound access tokens (SPEC 16.2, RFC 8705) on a port that asks for client
certificates (``SslClientCert=1|2``).

The engine adds the SHA-256 thumbprint of the connection's certificate to the decoded
certificate once per connection (``context/certs.py``'s ``with_thumbprint``). A token
request whose connection presented one gets an access token with ``cnf: {"x5t#S256": ...}``
(:func:`confirmation`); ``"boundTokens": "mtls"`` refuses a token request without one
(:func:`required`); the bearer check refuses a bound token on a connection without that
same certificate (:func:`check_certificate`), and with ``"boundTokens": "mtls"`` an unbound
one too (:func:`certificate_bound`). The refresh token is not bound: a refresh binds its new
access token to the certificate of its own connection (docs/decisions.md).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from fwrest.auth.oauth2.errors import InvalidRequest
from fwrest.context.certs import THUMBPRINT
from fwrest.context.request import current

__all__ = [
    "THUMBPRINT",
    "MtlsRefused",
    "certificate_bound",
    "check_certificate",
    "check_current",
    "confirmation",
    "metadata_fields",
    "required",
]


class MtlsRefused(Exception):
    """A certificate-bound token presented without its certificate; the message says why
    (the guard answers 401 ``invalid_token``)."""


def presented(peer_cert: Mapping[str, object] | None) -> str | None:
    """The thumbprint of the certificate a connection presented; None without one."""
    if not peer_cert:
        return None
    value = peer_cert.get(THUMBPRINT)
    return value if isinstance(value, str) else None


def confirmation() -> dict[str, str] | None:
    """The ``cnf`` claim of an access token issued to the current request: the thumbprint
    of its connection's certificate; None when it presented none (an unbound token)."""
    ctx = current.get(None)
    value = presented(ctx.peer_cert) if ctx is not None else None
    return None if value is None else {THUMBPRINT: value}


def required() -> None:
    """``"boundTokens": "mtls"``: a token request must come with a client certificate.

    Raises:
        InvalidRequest: the request's connection presented none (RFC 8705 3: the token
            could not be bound).
    """
    ctx = current.get(None)
    if ctx is None or presented(ctx.peer_cert) is None:
        raise InvalidRequest(
            "this server issues only certificate-bound tokens: present a client certificate"
        )


def certificate_bound(claims: Mapping[str, Any]) -> bool:
    """Whether a token's claims bind it to a certificate (``cnf.x5t#S256``)."""
    cnf = claims.get("cnf")
    return isinstance(cnf, dict) and isinstance(cnf.get(THUMBPRINT), str)


def check_certificate(claims: dict[str, Any], peer_cert: Mapping[str, object] | None) -> None:
    """The bearer check of a token's certificate binding (RFC 8705 3): nothing to do for a
    token without ``cnf.x5t#S256``.

    Raises:
        MtlsRefused: the token is bound, and the connection presented no certificate or
            another one.
    """
    cnf = claims.get("cnf")
    if not isinstance(cnf, dict):
        return
    bound = cnf.get(THUMBPRINT)
    if bound is None:
        return  # another binding (DPoP's jkt), checked elsewhere
    given = presented(peer_cert)
    if given is None:
        raise MtlsRefused(
            "the access token is bound to a client certificate and none was presented"
        )
    if not isinstance(bound, str) or not hmac.compare_digest(bound.encode(), given.encode()):
        raise MtlsRefused("the access token is bound to another client certificate")


def check_current(claims: dict[str, Any]) -> None:
    """:func:`check_certificate` against the current request's connection (a route that
    takes a bearer token itself: introspection).

    Raises:
        MtlsRefused: as :func:`check_certificate`.
    """
    if "cnf" in claims:
        ctx = current.get(None)
        check_certificate(claims, ctx.peer_cert if ctx is not None else None)


def metadata_fields() -> dict[str, Any]:
    """What the authorization server metadata (RFC 8705 3.3) and the protected resource
    metadata (RFC 9728 2) say on a port that asks for client certificates."""
    return {"tls_client_certificate_bound_access_tokens": True}
