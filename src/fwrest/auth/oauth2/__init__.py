"""OAuth2 Password Grant (RFC 6749 4.3): token route, JWT access tokens, refresh rotation,
bearer check, ``onAuthNoCheckUri`` exemptions."""

from fwrest.auth.oauth2.guard import TOKEN_ROUTE, BearerGuard, NoCheckPaths
from fwrest.auth.oauth2.keys import load_signing_key
from fwrest.auth.oauth2.params import ParamsSource
from fwrest.auth.oauth2.tokens import InvalidToken, TokenService

__all__ = [
    "TOKEN_ROUTE",
    "BearerGuard",
    "InvalidToken",
    "NoCheckPaths",
    "ParamsSource",
    "TokenService",
    "load_signing_key",
]
