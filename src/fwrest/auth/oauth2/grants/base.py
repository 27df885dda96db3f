"""What every grant of the token route is: a :class:`Grant` checks a token request
(``validate``) and answers it (``issue``); the token service does the rest once, for all.

Theory of operation (one request of ``/fw/oauth2/token``, SPEC 4.2, 12.4)::

    TokenService.token_endpoint                     tokens.py: parse, scrub secrets, render errors
      grant = grants[grant_type]                    the registry built at start (grants/__init__)
      grant.screen(service, method, params)         the request alone, before onAuthparams
      onAuthparams, client authentication           shared: TokenService
      types, client required, lifetimes             shared, from the grant's attributes
      validated = await grant.validate(request)     the grant's own check (password, refresh...)
      return await grant.issue(request, validated)  shared by default: TokenService.issue

Shared pieces a grant calls through ``request.service`` (one place, not one per grant): the
store calls under the request's store deadline (``store_call``, ``spend``), the brute-force
throttle (``throttle``), and the issuing of the tokens (``issue``: the signed access token,
the stored refresh record, the answer). A grant raises the classes of ``errors.py`` and
never renders an answer itself.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING, ClassVar

from fwrest.wire import Reply

if TYPE_CHECKING:
    from fwrest.auth.oauth2.params import AuthParams
    from fwrest.auth.oauth2.tokens import StoreDeadline, TokenService

__all__ = [
    "Grant",
    "TokenRequest",
    "Validated",
    "family_tag",
    "new_refresh_token",
    "refresh_hash",
    "section_identity",
]


def section_identity(name: str) -> str:
    """A server section's name as its tokens know it: folded as the configuration folds
    section names (SPEC 9; ``config/reading.py``), so that hosts spelling one section in
    another case are one service. ``str.lower``, not ``casefold``: a fold wider than the
    configuration's would make one port of two sections the configuration tells apart (the
    brute-force counters of ``auth/throttle.py`` fold the same way)."""
    return name.strip().lower()


# a family's hash tag (SPEC 17.1): hex characters before the first "." of a refresh token
# minted on a store that keeps a family on one slot (a cluster); token_urlsafe has no "."
FAMILY_TAG_CHARS = 12
_HEX = frozenset("0123456789abcdef")


def family_tag(family: str) -> str:
    """The hash tag of a token family's records on a Redis Cluster: every refresh token of
    the family carries it, so that a refresh spends one and stores the next on one slot
    (SPEC 17.1). Derived from the family id, which its access tokens name already (``fam``).

    >>> family_tag("2f1c"), len(family_tag("another family"))
    ('81bb73ed134b', 12)
    """
    return hashlib.sha256(family.encode()).hexdigest()[:FAMILY_TAG_CHARS]


def new_refresh_token(family: str, tagged: bool) -> str:
    """A new refresh token of ``family``: 256 random bits, after the family's tag where the
    store keeps a family on one slot (``tagged``, :attr:`TokenStore.family_slots`)."""
    token = secrets.token_urlsafe(32)
    return f"{family_tag(family)}.{token}" if tagged else token


def refresh_hash(token: str, section: str, tagged: bool = False) -> str:
    """The stored form of a refresh token of the server section ``section``: a token is valid
    only on the section that issued it (SPEC 7.1), so another section's lookup misses it
    (``invalid_grant``) and never spends it. Records are stored under the name as the host
    spells it (fwrest 0.1.0 reads them so), with the folded name's hash
    (:func:`section_identity`) as their alias where the two differ.

    ``tagged`` (a store keeping a family on one slot): the hash of a token carrying a family
    tag is ``tag.hash``, which the store's key layout splits (``store/redis.py`` KeyLayout).
    """
    digest = hashlib.sha256(f"{section}\n{token}".encode()).hexdigest()
    if tagged:
        tag, dot, _ = token.partition(".")
        if dot and len(tag) == FAMILY_TAG_CHARS and _HEX.issuperset(tag):
            return f"{tag}.{digest}"
    return digest


class TokenRequest:
    """A token request as a grant sees it: its client authenticated, its lifetimes read.

    ``asked`` is the request's ``scope`` as :func:`~fwrest.auth.oauth2.scopes.requested`
    reads it; ``client_id`` the client it authenticated as (the first client when it sent no
    credentials); ``authenticated`` whether it sent client credentials; ``ttl_ms`` and
    ``refresh_at`` the lifetimes ``onAuthparams`` gives now; ``deadline`` the store time its
    calls share (SPEC 7)."""

    __slots__ = (
        "allowed",
        "asked",
        "authenticated",
        "client_id",
        "client_ip",
        "deadline",
        "method",
        "params",
        "refresh_at",
        "service",
        "ttl_ms",
    )

    def __init__(
        self,
        service: TokenService,
        method: str,
        params: dict[str, str],
        client_ip: str,
        asked: tuple[str, ...],
        allowed: AuthParams,
        client_id: str,
        ttl_ms: int,
        refresh_at: float,
        deadline: StoreDeadline,
        authenticated: bool,
    ) -> None:
        self.service = service
        self.authenticated = authenticated
        self.method = method
        self.params = params
        self.client_ip = client_ip
        self.asked = asked
        self.allowed = allowed
        self.client_id = client_id
        self.ttl_ms = ttl_ms
        self.refresh_at = refresh_at
        self.deadline = deadline


class Validated:
    """What a grant's ``validate`` found: the tokens' ``subject``, their ``family``, the
    access token's ``scope`` and the family's (``family_scope``, kept by its refresh
    tokens); ``spent``: the refresh token a refresh spent (its hash and the spend's claim),
    to undo should no new pair reach the client."""

    __slots__ = ("family", "family_scope", "scope", "spent", "subject")

    def __init__(
        self,
        subject: str,
        family: str,
        scope: str,
        family_scope: str,
        spent: tuple[str, str] | None = None,
    ) -> None:
        self.subject = subject
        self.family = family
        self.scope = scope
        self.family_scope = family_scope
        self.spent = spent


class Grant:
    """One grant type of the token route; one instance per token service (per port and
    worker), built at start.

    Attributes:
        grant_type: the ``grant_type`` value it answers.
        by_default: allowed when ``onAuthparams`` lists no ``types`` (SPEC 4.2, 12.4).
        client_required: refused (401 ``invalid_client``) without client credentials, where
            the others are issued for the first client (RFC 6749 4.4.2).
        refreshable: issues a refresh token (the client credentials grant does not: RFC 6749
            4.4.3); its access token is a client's own (``fw_kind: "client"``) when not.
    """

    grant_type: ClassVar[str] = ""
    by_default: ClassVar[bool] = True
    client_required: ClassVar[bool] = False
    refreshable: ClassVar[bool] = True

    def screen(self, service: TokenService, method: str, params: dict[str, str]) -> None:
        """Refuse what the request alone shows, before ``onAuthparams`` is asked (it may be
        the application's function: it must not see what no grant accepts).

        Raises:
            OAuthError: the grant's refusal.
        """

    async def validate(self, request: TokenRequest) -> Validated:
        """Check the request's grant (RFC 6749 4.x.2): who the tokens are for, their scopes.

        Raises:
            OAuthError: the grant's refusal (``invalid_grant``, ``invalid_scope``...).
            HTTPError: 429 (the brute-force throttle), 503 (the store).
        """
        raise NotImplementedError

    async def issue(self, request: TokenRequest, validated: Validated) -> Reply:
        """The answer (RFC 6749 5.1): an access token, and a refresh token of the family
        when the grant is ``refreshable``."""
        return await request.service.issue(
            request.deadline,
            validated.subject,
            request.client_id,
            validated.family,
            request.ttl_ms,
            request.refresh_at if self.refreshable else None,
            validated.scope,
            validated.family_scope,
            client_token=not self.refreshable,
        )
