"""The refresh token grant (RFC 6749 6, SPEC 4.2, 7): rotation with family revocation.

A refresh spends its token in one compare-and-set (the store's ``spend_refresh``, by this
request's claim and the token's own client: SPEC 7.1) and issues a new pair of the same
family; an expired token, or another client's, is left unspent in that same step. A public
client's token bound to a DPoP key is refused before that step without a proof of its key
(SPEC 16.2: neither spent nor, spent, taken for a replay); an unbound one refreshed with a
proof binds the new pair (``refreshed_family``). A spent
token presented again revokes its whole family. A spend whose new pair reaches no client (a
refused scope, the store failing, the client gone) is undone, so that the client's retry is
not taken for a replay.
"""

from __future__ import annotations

import hmac
import uuid
from typing import ClassVar

from fwrest import log
from fwrest.auth.oauth2.dpop import (
    InvalidDpopProof,
    bound_key,
    client_bound,
    family_key,
    family_revoked,
    refreshed_family,
)
from fwrest.auth.oauth2.errors import InvalidClient, InvalidGrant, InvalidRequest, OAuthError
from fwrest.auth.oauth2.grants.base import Grant, TokenRequest, Validated
from fwrest.auth.oauth2.passwords import same_secret
from fwrest.auth.oauth2.scopes import DEFAULT, allowed_scopes, grant
from fwrest.store import RefreshRecord
from fwrest.store.audit import AuditEvent
from fwrest.wire import Reply

__all__ = ["RefreshGrant", "revoked_until"]


class RefreshGrant(Grant):
    """``grant_type=refresh_token``: a new pair for an unspent refresh token."""

    grant_type: ClassVar[str] = "refresh_token"

    async def validate(self, request: TokenRequest) -> Validated:
        claim = uuid.uuid4().hex
        token_hash, record = await _rotate(request, claim)
        service = request.service
        refused_key = _key_refusal(record)
        if refused_key is not None:
            # checked before the spend too (_rotate): here for a request that skipped it;
            # refused unspent (its holder may still refresh with the right proof)
            await service.store_call(
                request.deadline, service.store.restore_refresh, token_hash, claim
            )
            raise refused_key
        # RFC 9449 5: a public client's unbound family refreshed with a proof is bound now
        family = refreshed_family(request, record.family)
        # the family keeps its scopes, less those its user or client may no longer have; a
        # ``scope`` on the refresh narrows this access token only (RFC 6749 6)
        kept = allowed_scopes(request.allowed, request.client_id, record.subject)
        family_scope = " ".join(n for n in record.scope.split() if n in kept) or DEFAULT
        try:
            if request.params.get("scope") is None:
                scope = family_scope
            else:
                refused: OAuthError | None = None
                try:
                    # ``default`` is always allowed (SPEC 12.4), in the family or not
                    scope = grant(request.asked, frozenset(family_scope.split()) | {DEFAULT})
                except OAuthError as exc:
                    refused = exc
                if refused is not None:
                    # refused: the token stays valid for a corrected request, before it
                    # hears of the refusal (a retry must not be taken for a replay); awaited
                    # outside the except clause (tests/tools/mypyc_lint.py, except-awaits)
                    await service.store_call(
                        request.deadline, service.store.restore_refresh, token_hash, claim
                    )
                    raise refused
        except OAuthError:
            raise  # restored above
        except BaseException:
            service.restore_later(token_hash, claim)
            raise
        return Validated(record.subject, family, scope, family_scope, (token_hash, claim))

    async def issue(self, request: TokenRequest, validated: Validated) -> Reply:
        try:
            return await super().issue(request, validated)
        except OAuthError:
            raise
        except BaseException:
            # spent, but no new pair reaches the client (the store failed, or the request was
            # cancelled): the client may retry with the same token, which must not be a replay
            if validated.spent is not None:
                request.service.restore_later(*validated.spent)
            raise


async def _rotate(request: TokenRequest, claim: str) -> tuple[str, RefreshRecord]:
    """Spend the request's refresh token: (its hash, its record).

    ``request.client_id`` is the client the request authenticated as (the first client when
    it sent no credentials): a refresh keeps the token's own client (SPEC 7.1), so a token of
    another client is ``invalid_grant`` and the store leaves it unspent (the check is part of
    the spend's compare-and-set).

    The request's lifetimes are those its tokens would get: a replay's revocation must
    outlast every token of the family (see :func:`revoked_until`).
    """
    service, deadline = request.service, request.deadline
    token = request.params.get("refresh_token")
    if not token:
        raise InvalidRequest("refresh_token is missing")
    # Revocations are read BEFORE the spend: the replays that lose the race to this spend
    # revoke the family after it, and must not cancel the one new pair (SPEC 7: 500
    # simultaneous refreshes give one new pair, then refused with the rest of its family).
    revoked = await service.store_call(deadline, service.store.revoked_families)
    if not request.authenticated or request.client_id in request.allowed.public:
        # read before any spend: a family whose confidential client must authenticate, or a
        # public client's bound to a DPoP key without a proof of that key (SPEC 16.2), is
        # refused untouched, neither spent (concurrent refusals would take one another for
        # replays) nor (a spent token) revoked by whoever holds it
        found = await service.refresh_record(deadline, token)
        if found is not None and _unauthenticated(request, found[0]):
            raise InvalidClient(_MUST_AUTHENTICATE)
        refused_key = None if found is None else _key_refusal(found[0])
        if refused_key is not None:
            raise refused_key
    # the record is under one of the token's stored forms (the section name as this host
    # spells it, or folded), or found through the folded name's alias (another spelling's):
    # each spend is one compare-and-set, and one that finds the record ends the search
    # (spent, another client's or ours)
    status, record, token_hash = "missing", None, ""
    for token_hash in service.refresh_hashes(token):
        status, record = await service.spend(deadline, token_hash, claim, request.client_id)
        if status != "missing":
            break
    if status == "missing":
        target = await service.aliased(deadline, token)
        if target is not None:
            token_hash = target
            status, record = await service.spend(deadline, token_hash, claim, request.client_id)
    if status == "missing" or record is None:
        raise InvalidGrant("the refresh token is invalid")
    if status == "client":
        raise InvalidGrant("the refresh token was issued to another client")
    if status == "expired":
        # judged in the spend's compare-and-set, which leaves an expired token unspent: it
        # was never used, so the client's retry is not a replay (SPEC 4.2)
        raise InvalidGrant("the refresh token has expired; repeat the password grant")
    if status == "spent":
        until = revoked_until(record, request.ttl_ms, request.refresh_at)
        await service.revoke_family(deadline, record.family, until)
        log.auth_log.warning(
            "[%s] a spent refresh token was presented again (user %r): its whole token "
            "family is revoked",
            service.port_name,
            log.escape(record.subject),
        )
        if service.audit is not None:
            details = {"client_id": record.client_id, "family": record.family}
            service.audit.record(
                AuditEvent(
                    "refresh.replay", record.subject, request.client_ip, service.port_name, details
                )
            )
        raise InvalidGrant("the refresh token was already used; its token family is revoked")
    if family_revoked(record.family, revoked):
        # left unspent: the client's retry is refused so again, not taken for a replay (an
        # audit event of a theft that never was)
        await service.store_call(deadline, service.store.restore_refresh, token_hash, claim)
        raise InvalidGrant("the refresh token was revoked")
    if not any(same_secret(record.subject, name) for name, _ in request.allowed.users):
        raise InvalidGrant("the user of this refresh token is no longer allowed")
    return token_hash, record


_MUST_AUTHENTICATE = "the client of this refresh token must authenticate"


def _key_refusal(record: RefreshRecord) -> InvalidDpopProof | None:
    """The refusal of a refresh of ``record`` whose family is bound to a DPoP key (a public
    client's: SPEC 16.2) without a valid proof of that key; None when it may go on."""
    bound = family_key(record.family)
    if not bound or hmac.compare_digest(bound.encode(), bound_key.get().encode()):
        return None
    return InvalidDpopProof(
        "the refresh token is bound to a DPoP key: a proof with that key is required"
        if not bound_key.get()
        else "the DPoP proof is signed with another key than the refresh token's"
    )


def _unauthenticated(request: TokenRequest, record: RefreshRecord) -> bool:
    """A refresh without client credentials of a family whose grant authenticated its
    confidential client (the code grant): RFC 6749 6 makes such a client authenticate, so
    no first client stands in for it (SPEC 4.2's rule is the password grant's legacy
    clients'; SPEC 16.1)."""
    return (
        client_bound(record.family)
        and not request.authenticated
        and record.client_id not in request.allowed.public
    )


def revoked_until(replayed: RefreshRecord, ttl_ms: int, refresh_at: float) -> float:
    """Until when a replay of ``replayed`` keeps its family revoked (SPEC 4.2, 7): until every
    token of the family has expired, so that no unspent refresh token or access token of it
    works again once the store forgets the revocation.

    Every rotation gives the new refresh token a fresh expiry (``refresh_expires`` read at
    that request), so a family's refresh tokens are not bounded by the first one's. Each
    expiry was computed at or before now, and ``refresh_expires`` gives later deadlines for
    later issue times (``Date()+N``, a duration) or the same one (a fixed date): none exceeds
    ``refresh_at``, this request's own deadline, nor the replayed token's own. An access
    token is issued by a password grant (now or earlier) or by a refresh with a refresh token
    that had not expired, so it expires at most an access lifetime after the latest refresh
    token of the family does. Hence: the later of the two refresh deadlines, plus the access
    lifetime. (Tokens issued under longer lifetimes than the current ``onAuthparams`` gives
    are not covered: shortening the lifetimes does not shorten tokens already issued.)
    """
    return max(replayed.expires_at, refresh_at) + ttl_ms / 1000
