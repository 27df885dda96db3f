"""The client credentials grant (RFC 6749 4.4, SPEC 12.4): a client's own access token.

Allowed only where ``onAuthparams``'s ``types`` lists it, and only to a client that
authenticates (no first client stands in for it). The token has ``sub`` = the client id and
the claim ``fw_kind: "client"`` (its bearer is ``client:<id>`` to the application), scopes
within the client entry's, and no refresh token (RFC 6749 4.4.3).
"""

from __future__ import annotations

import uuid
from typing import ClassVar

from fwrest.auth.oauth2.errors import UnauthorizedClient
from fwrest.auth.oauth2.grants.base import Grant, TokenRequest, Validated
from fwrest.auth.oauth2.scopes import allowed_scopes, grant

__all__ = ["ClientCredentialsGrant"]


class ClientCredentialsGrant(Grant):
    """``grant_type=client_credentials``: an access token for the authenticated client."""

    grant_type: ClassVar[str] = "client_credentials"
    by_default: ClassVar[bool] = False
    client_required: ClassVar[bool] = True
    refreshable: ClassVar[bool] = False

    async def validate(self, request: TokenRequest) -> Validated:
        client_id = request.client_id
        if client_id in request.allowed.public:
            # a public client has no secret: it cannot stand for itself (SPEC 16.1)
            raise UnauthorizedClient("a public client cannot use the client_credentials grant")
        scope = grant(request.asked, allowed_scopes(request.allowed, client_id, None))
        return Validated(client_id, uuid.uuid4().hex, scope, scope)
