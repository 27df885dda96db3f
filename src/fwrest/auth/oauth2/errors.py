"""The error answers of the token service's routes (RFC 6749 5.2): a class per ``error`` code,
each with its status and headers, rendered where every error answer is
(:func:`fwrest.wire.error_reply`, through :func:`render`).

::

    OAuthError                      the base: error, description, status, headers
    ├── InvalidRequest              400 (413 for a body over the token route's limit)
    ├── InvalidClient(challenge)    401 + WWW-Authenticate (Basic unless told)
    ├── InvalidGrant                400
    ├── UnauthorizedClient          400
    ├── UnsupportedGrantType        400
    ├── InvalidScope                400
    └── LockedOut(refusal)          429 + Retry-After: the brute-force throttle (invalid_grant)

Every answer carries ``Cache-Control: no-store`` and ``Pragma: no-cache`` (RFC 6749 5.1,
:data:`fwrest.errors.OAUTH_NO_STORE`). A description never holds a secret: it is sent to the
client and may be logged.
"""

from __future__ import annotations

import orjson

from fwrest.errors import OAUTH_NO_STORE, REALM, Challenge, TooManyRequests
from fwrest.wire import Reply, error_reply

__all__ = [
    "CLIENT_CHALLENGE",
    "InvalidClient",
    "InvalidGrant",
    "InvalidRequest",
    "InvalidScope",
    "LockedOut",
    "OAuthError",
    "UnauthorizedClient",
    "UnsupportedGrantType",
    "render",
]

CLIENT_CHALLENGE = Challenge("Basic", realm=REALM)  # RFC 6749 2.3.1: client_secret_basic


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
        self.headers = (*headers, *OAUTH_NO_STORE)
        self.close = False
        super().__init__(f"{error}: {description}")

    def body(self) -> bytes:
        """The RFC 6749 5.2 body."""
        return orjson.dumps({"error": self.error, "error_description": self.description})


class InvalidRequest(OAuthError):
    """A parameter missing, repeated or malformed; a body that is not a form (or too large:
    ``status=413``)."""

    def __init__(self, description: str, status: int = 400) -> None:
        super().__init__("invalid_request", description, status)


class InvalidClient(OAuthError):
    """401: the client's authentication failed or is missing; ``challenge`` is the
    ``WWW-Authenticate`` value (RFC 6749 5.2: the scheme the client used, Basic by default)."""

    def __init__(self, description: str, challenge: Challenge | str = CLIENT_CHALLENGE) -> None:
        super().__init__(
            "invalid_client", description, 401, (("www-authenticate", str(challenge)),)
        )


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


class LockedOut(OAuthError):
    """429 with ``Retry-After``: the password grant of a user or an address locked out by the
    brute-force throttle (SPEC 4.2), or refused while its count is full of checks in progress
    (``refusal``, the throttle's). ``invalid_grant``, the right password's answer as a wrong
    one's; the body keeps the fields this 429 had before (SPEC 3's ``code``,
    ``detailedMessage``, ``message``) before RFC 6749 5.2's (docs/decisions.md, "Brute
    force")."""

    def __init__(self, refusal: TooManyRequests) -> None:
        super().__init__(
            "invalid_grant", refusal.detailed, 429, (("retry-after", refusal.retry_after),)
        )
        self.message = refusal.message

    def body(self) -> bytes:
        return orjson.dumps(
            {
                "code": self.status,
                "detailedMessage": self.description,
                "message": self.message,
                "error": self.error,
                "error_description": self.description,
            }
        )


def render(exc: OAuthError) -> Reply:
    """The answer of ``exc``: its status, its headers and the RFC 6749 5.2 body.

    >>> render(InvalidGrant("the refresh token has expired")).body
    b'{"error":"invalid_grant","error_description":"the refresh token has expired"}'
    """
    return error_reply(exc)
