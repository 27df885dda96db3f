"""The error answers of the token service's routes (RFC 6749 5.2): a class per ``error`` code,
each with its status and headers, rendered in one place (:func:`render`).

::

    OAuthError                      the base: error, description, status, headers
    ├── InvalidRequest              400 (413 for a body over the token route's limit)
    ├── InvalidClient(challenge)    401 + WWW-Authenticate (Basic unless told)
    ├── InvalidGrant                400
    ├── UnauthorizedClient          400
    ├── UnsupportedGrantType        400
    └── InvalidScope                400

Every answer carries ``Cache-Control: no-store`` and ``Pragma: no-cache`` (RFC 6749 5.1).
A description never holds a secret: it is sent to the client and may be logged.
"""

from __future__ import annotations

import orjson

__all__ = [
    "BASIC_CHALLENGE",
    "Answer",
    "InvalidClient",
    "InvalidGrant",
    "InvalidRequest",
    "InvalidScope",
    "OAuthError",
    "UnauthorizedClient",
    "UnsupportedGrantType",
    "render",
]

# (status, headers, body): what the token service's routes answer
Answer = tuple[int, list[tuple[str, str]], bytes]

BASIC_CHALLENGE = 'Basic realm="Access to REST"'  # RFC 6749 2.3.1: client_secret_basic
_NO_STORE = (("cache-control", "no-store"), ("pragma", "no-cache"))


class OAuthError(Exception):
    """An RFC 6749 5.2 error answer: ``error`` (the code), ``description`` (for a human),
    ``status`` and the ``headers`` beside the JSON body's content type."""

    def __init__(
        self,
        error: str,
        description: str,
        status: int = 400,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.error = error
        self.description = description
        self.status = status
        self.headers = (*headers, *_NO_STORE)
        super().__init__(f"{error}: {description}")


class InvalidRequest(OAuthError):
    """A parameter missing, repeated or malformed; a body that is not a form (or too large:
    ``status=413``)."""

    def __init__(self, description: str, status: int = 400) -> None:
        super().__init__("invalid_request", description, status)


class InvalidClient(OAuthError):
    """401: the client's authentication failed or is missing; ``challenge`` is the
    ``WWW-Authenticate`` value (RFC 6749 5.2: the scheme the client used, Basic by default)."""

    def __init__(self, description: str, challenge: str = BASIC_CHALLENGE) -> None:
        super().__init__("invalid_client", description, 401, (("www-authenticate", challenge),))


class InvalidGrant(OAuthError):
    """The grant (user and password, refresh token) is invalid, expired, revoked, or was
    issued to another client."""

    def __init__(self, description: str) -> None:
        super().__init__("invalid_grant", description)


class UnauthorizedClient(OAuthError):
    """A grant type fwrest knows that ``onAuthparams``'s ``types`` does not allow."""

    def __init__(self, description: str) -> None:
        super().__init__("unauthorized_client", description)


class UnsupportedGrantType(OAuthError):
    """A grant type fwrest does not know."""

    def __init__(self, description: str) -> None:
        super().__init__("unsupported_grant_type", description)


class InvalidScope(OAuthError):
    """A ``scope`` that is malformed, or asks for more than the user and client may have."""

    def __init__(self, description: str) -> None:
        super().__init__("invalid_scope", description)


def render(exc: OAuthError) -> Answer:
    """The answer of ``exc``: its status, its headers and the RFC 6749 5.2 body.

    >>> render(InvalidGrant("the refresh token has expired"))[2]
    b'{"error":"invalid_grant","error_description":"the refresh token has expired"}'
    """
    body = orjson.dumps({"error": exc.error, "error_description": exc.description})
    return exc.status, [("content-type", "application/json"), *exc.headers], body
