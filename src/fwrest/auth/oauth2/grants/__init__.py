"""The grants of the token route (RFC 6749 4, SPEC 4.2, 12.4), one module each behind
:class:`~fwrest.auth.oauth2.grants.base.Grant`; the token service (``tokens.py``) owns what
they share (client authentication, store deadline, throttle, the issuing of tokens) and
dispatches to them by ``grant_type``. A grant knows no HTTP and renders no answer.

To add a grant: a module here with a ``Grant`` subclass, listed in :data:`GRANTS`
(docs/architecture.md, "Adding a grant").
"""

from __future__ import annotations

from fwrest.auth.oauth2.grants.authorization_code import AuthorizationCodeGrant
from fwrest.auth.oauth2.grants.base import (
    Grant,
    TokenRequest,
    Validated,
    new_refresh_token,
    refresh_hash,
    section_identity,
)
from fwrest.auth.oauth2.grants.client_credentials import ClientCredentialsGrant
from fwrest.auth.oauth2.grants.password import PasswordGrant
from fwrest.auth.oauth2.grants.refresh import RefreshGrant

__all__ = [
    "GRANTS",
    "GRANT_TYPES",
    "Grant",
    "TokenRequest",
    "Validated",
    "new_refresh_token",
    "refresh_hash",
    "registry",
    "section_identity",
]

# the grants fwrest knows, in the order the metadata lists them (SPEC 12.2)
GRANTS: tuple[type[Grant], ...] = (
    PasswordGrant,
    RefreshGrant,
    ClientCredentialsGrant,
    AuthorizationCodeGrant,
)
GRANT_TYPES = tuple(g.grant_type for g in GRANTS)


def registry() -> dict[str, Grant]:
    """``grant_type`` -> a new instance of its grant: a token service's, built at start."""
    return {g.grant_type: g() for g in GRANTS}
