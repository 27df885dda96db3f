"""The authorization code grant with PKCE (RFC 6749 4.1, RFC 7636, SPEC 16.1): a code the
login page of the authorize route (``auth/oauth2/authorize.py``) issued, redeemed once with
its ``code_verifier``.

The code's record is in the state store under the code's hash (:func:`code_hash`), so any
worker or host redeems it. Taking it is one atomic step that records the token family this
request will issue (the store's ``take_code``): a code presented again finds that family and
revokes it, with every token issued from it (RFC 6749 4.1.2). The take comes first, so a
request with a wrong verifier, redirect or client spends the code too (as Keycloak does:
docs/decisions.md, "The authorization code grant").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from typing import Any, ClassVar

import orjson

from fwrest import log
from fwrest.auth.oauth2.dpop import new_family
from fwrest.auth.oauth2.errors import InvalidGrant, InvalidRequest
from fwrest.auth.oauth2.grants.base import Grant, TokenRequest, Validated
from fwrest.auth.oauth2.passwords import same_secret
from fwrest.store.audit import ANONYMOUS, AuditEvent

__all__ = [
    "CODE_KEEP_S",
    "CODE_TTL_S",
    "AuthorizationCodeGrant",
    "code_hash",
    "code_record",
    "pkce_s256",
    "well_formed",
]

CODE_TTL_S = 60.0  # SPEC 16.1: a code is valid 60 s
# how long the store keeps a code's record: a code presented again within it revokes the
# tokens of its first redemption (an hour: the default access token lifetime)
CODE_KEEP_S = 3600.0
# RFC 7636 4.1: 43-128 characters of [A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~"; a S256
# challenge is 43 characters of that set (base64url of 32 bytes)
_UNRESERVED = re.compile(r"[A-Za-z0-9\-._~]{43,128}\Z")


def well_formed(value: str) -> bool:
    """Whether ``value`` is a code verifier or challenge as RFC 7636 4.1 and 4.2 write them."""
    return _UNRESERVED.match(value) is not None


def code_hash(code: str, section: str) -> str:
    """The stored form of an authorization code of the server section ``section``."""
    return hashlib.sha256(f"{section}\ncode\n{code}".encode()).hexdigest()


def pkce_s256(verifier: str) -> str:
    """``BASE64URL(SHA256(ASCII(code_verifier)))`` (RFC 7636 4.2).

    >>> pkce_s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
    'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM'
    """
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def code_record(
    client_id: str,
    redirect_uri: str,
    redirect_given: bool,
    challenge: str,
    subject: str,
    scope: str,
    expires_at: float,
) -> bytes:
    """What the store keeps of a code (never the code itself)."""
    return orjson.dumps(
        {
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "redirect_given": redirect_given,
            "challenge": challenge,
            "sub": subject,
            "scope": scope,
            "exp": expires_at,
        }
    )


class AuthorizationCodeGrant(Grant):
    """``grant_type=authorization_code``: a pair for the user who logged in on the login page,
    once per code, to the client, redirect and PKCE verifier the code is bound to."""

    grant_type: ClassVar[str] = "authorization_code"
    by_default: ClassVar[bool] = False  # only where onAuthparams's types lists it
    # a public client names itself (client_id alone), a confidential one authenticates: no
    # first client stands in for either
    client_required: ClassVar[bool] = True

    async def validate(self, request: TokenRequest) -> Validated:
        params, service, deadline = request.params, request.service, request.deadline
        code = params.get("code")
        if not code:
            raise InvalidRequest("code is missing")
        verifier = params.get("code_verifier")
        if verifier is None:
            raise InvalidRequest("code_verifier is missing (PKCE, RFC 7636)")
        # bound to a public client's DPoP key (SPEC 16.2), and to a confidential client's
        # authentication: its refreshes authenticate too (RFC 6749 6)
        family = new_family(request, client_bound=True)
        status, data, first = await service.store_call(
            deadline, service.store.take_code, code_hash(code, service.section), family
        )
        if status == "used":
            await _revoke_first(request, first, data)
            raise InvalidGrant(
                "the authorization code was already used; any tokens issued for it are revoked"
            )
        if status != "ok" or data is None:
            raise InvalidGrant("the authorization code is invalid or has expired")
        try:
            record: dict[str, Any] = orjson.loads(data)
            subject = str(record["sub"])
            scope = str(record["scope"])
            expires_at = float(record["exp"])
            redirect = str(record["redirect_uri"])
            challenge = str(record["challenge"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise InvalidGrant("the authorization code is invalid or has expired") from None
        if expires_at <= time.time():
            raise InvalidGrant("the authorization code has expired")
        if record.get("client_id") != request.client_id:
            raise InvalidGrant("the authorization code was issued to another client")
        given = params.get("redirect_uri")
        if given is None and record.get("redirect_given"):
            raise InvalidGrant("redirect_uri is required: the authorization request sent one")
        if given is not None and given != redirect:
            raise InvalidGrant("redirect_uri is not the one of the authorization request")
        if not well_formed(verifier) or not hmac.compare_digest(
            pkce_s256(verifier).encode(), challenge.encode()
        ):
            raise InvalidGrant("the code_verifier does not match the code_challenge")
        if not any(same_secret(subject, name) for name, _ in request.allowed.users):
            raise InvalidGrant("the user of this authorization code is no longer allowed")
        return Validated(subject, family, scope, scope)


async def _revoke_first(request: TokenRequest, family: str, data: bytes | None) -> None:
    """A code redeemed twice: revoke the family its first redemption issued (RFC 6749 4.1.2),
    until every token of it has expired (as a refresh token's replay does)."""
    service = request.service
    until = max(time.time(), request.refresh_at) + request.ttl_ms / 1000 + CODE_KEEP_S
    await service.revoke_family(request.deadline, family, until)
    try:
        subject = str(orjson.loads(data or b"{}").get("sub", ""))
    except (orjson.JSONDecodeError, AttributeError):
        subject = ""
    log.auth_log.warning(
        "[%s] an authorization code was presented again (client %r): the tokens issued for it "
        "are revoked",
        service.port_name,
        log.escape(request.client_id),
    )
    if service.audit is not None:
        service.audit.record(
            AuditEvent(
                "code.replay",
                subject or ANONYMOUS,
                request.client_ip,
                service.port_name,
                {"client_id": request.client_id, "family": family},
            )
        )
