"""The token service of one oAuth2 port (SPEC 4.2, 7, 12): the token route's dispatch to its
grants (``grants/``), what the grants share (client authentication, the store calls under
one deadline, the throttle, the issuing of tokens), JWT access tokens and their check, and
the per-worker revocation cache."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import orjson

from fwrest import log
from fwrest.auth.basic import mask_secret, parse_basic
from fwrest.auth.blocking import Pool, off_loop, settled
from fwrest.auth.oauth2 import mtls
from fwrest.auth.oauth2.discovery import offered_grants
from fwrest.auth.oauth2.dpop import bound_key, family_revoked, family_root
from fwrest.auth.oauth2.errors import (
    InvalidClient,
    InvalidRequest,
    OAuthError,
    UnauthorizedClient,
    UnsupportedGrantType,
    render,
)
from fwrest.auth.oauth2.expiry import ExpiryError, access_ms, refresh_deadline
from fwrest.auth.oauth2.grants import (
    GRANT_TYPES,
    TokenRequest,
    new_refresh_token,
    refresh_hash,
    registry,
    section_identity,
)
from fwrest.auth.oauth2.grants.refresh import revoked_until
from fwrest.auth.oauth2.keys import keep_signing_key, store_signing_key
from fwrest.auth.oauth2.params import (
    CLIENT_PREFIX,
    AuthParams,
    ClientCredentials,
    ParamsError,
    ParamsSource,
    client_credentials,
    from_legacy,
    legacy_view,
    request_params,
)
from fwrest.auth.oauth2.passwords import check_user, costly
from fwrest.auth.oauth2.scopes import requested
from fwrest.auth.throttle import TOKEN_WORDING, Throttle
from fwrest.errors import (
    OAUTH_NO_STORE,
    ConfigError,
    HTTPError,
    is_cancellation,
    store_unavailable,
)
from fwrest.routing.names import TOKEN_ROUTE
from fwrest.store import RefreshRecord, StateStore, StoreError, UnconfirmedSpend
from fwrest.store.audit import AuditLog
from fwrest.store.calls import Started, StoreBusy, StoreClient
from fwrest.wire import JSON, Reply

if TYPE_CHECKING:
    from fwrest.auth.oauth2.authorize import Authorizer
    from fwrest.auth.oauth2.discovery import Metadata
    from fwrest.auth.oauth2.dpop import DpopCheck
    from fwrest.auth.oauth2.portkeys import PortKeys
    from fwrest.auth.oauth2.resource import Resources

__all__ = ["GRANTS", "InvalidToken", "StoreDeadline", "TokenService", "UnknownKey"]

T = TypeVar("T")

ALG = "HS256"
# the request's secrets masked in a traceback of onAuthparams, whatever their length
_MASKED_FIELDS = ("password", "client_secret", "refresh_token", "code", "code_verifier")
# the issuer of the token request being answered: its location's (SPEC 12.2)
_issuer: ContextVar[str] = ContextVar("fwrest_token_issuer", default="")
# SPEC 7: while the store does not answer, the token route answers 503 within 1.5 s. The store
# calls of one token request (up to four) share this much time waiting on the store (the time
# between them, a password check queued behind a burst of others, is not the store's: issue
# 34); a call made when it is spent still gets STORE_CALL_MIN_S, so that a healthy but busy
# store is not taken for a dead one. A store frozen from the start: 503 after 1.0 s.
STORE_DEADLINE_S = 1.0
STORE_CALL_MIN_S = 0.2
# how long a call may wait for a free store thread of the worker (they are all taken only by
# calls to a store that hangs, or by a burst far beyond STORE_THREADS): then 503, the log
# saying so (StoreBusy) rather than blaming the store
STORE_QUEUE_S = 1.0
REVOKED_REFRESH_DEADLINE_S = 1.4  # the revocation cache's refresh (retried every 0.5 s)
# a signing key the start could not read from the store (Redis down): read again this often
KEY_RETRY_S = 1.0
# how often a worker whose signing key lives in the Redis store checks the store still holds
# it (a store restarted empty: see _keep_key)
KEY_CHECK_S = 5.0
# undoing a spend that reached no client (see spend): tried every RESTORE_RETRY_S (every
# RESTORE_SLOW_S once RESTORE_FAST_FOR_S have passed) until the store takes it, for at most
# RESTORE_FOR_S (a store down longer: the client's retry is taken for a replay)
RESTORE_RETRY_S = 0.25
RESTORE_FAST_FOR_S = 15.0
RESTORE_SLOW_S = 2.0
RESTORE_FOR_S = 3600.0
_ISSUED_HEADERS = (("content-type", JSON), *OAUTH_NO_STORE)
# the token request's parameters that are secrets, scrubbed from any record logged meanwhile
_SECRET_PARAMS = ("password", "client_secret", "refresh_token", "code", "code_verifier")
# verified access tokens remembered per port and worker (about 1.2 KiB each: the claims and
# a 32-byte hash of the token, never the token), the oldest dropped above it (issue 38): on
# an asymmetric port (ES256, EdDSA, RS256), whose signature check costs far more than the
# request, many; on an HS256 port, whose HMAC is cheap, as many as before the asymmetric
# ports had theirs (1.2 MiB, not 12, per port and worker)
_VERIFIED_MAX = 10_000
_VERIFIED_MAX_HMAC = 1_024
_PAST_REFRESH_REMEMBERED = 64  # refresh_expires values warned about as past, per worker
GRANTS = GRANT_TYPES  # the grant types fwrest knows (grants/__init__.py)
CLIENT_KIND = "client"  # the claim fw_kind of a client credentials token
METADATA_PARAMS_S = 5.0  # how long the metadata keeps what a function onAuthparams answered


class InvalidToken(Exception):
    """A bearer token that must be refused; the message says why (no secret in it)."""


class UnknownKey(InvalidToken):
    """A token naming a ``kid`` this worker's view of the key set lacks: perhaps a key another
    host made a moment ago (see :meth:`TokenService.verify_fresh`)."""


class StoreDeadline:
    """The time on the store that the calls of one token request share (see
    STORE_DEADLINE_S): from when a store thread starts each call to its answer."""

    __slots__ = ("spent",)

    def __init__(self) -> None:
        self.spent = 0.0

    def timeout(self) -> float:
        """Seconds the next call may take once a store thread runs it."""
        return max(STORE_DEADLINE_S - self.spent, STORE_CALL_MIN_S)

    def count(self, started: Started) -> None:
        """Add a call's time on the store (none when no thread started it)."""
        self.spent += started.took()


class TokenService:
    """Issues and checks tokens for one port; one instance per worker.

    ``throttle`` is the port's brute-force throttle (``auth/throttle.py``, the one Basic
    ports use, strict: it counts in the store under the request's deadline); without one,
    the service makes its own of ``max_failures``.
    """

    def __init__(
        self,
        *,
        port_name: str,
        key: bytes | None,
        store: StateStore,
        source: ParamsSource,
        max_failures: int,
        allow_get: bool,
        pool: Pool | None = None,
        throttle: Throttle | None = None,
        client: StoreClient | None = None,
        keys: PortKeys | None = None,
        issuers: dict[str, str] | None = None,
        issuer_configured: bool = False,
        audit: AuditLog | None = None,
    ) -> None:
        self.port_name = port_name
        # the port's identity for its tokens: the section name folded (SPEC 9), so that hosts
        # spelling the section in another case share tokens; aud is written as spelled
        # (docs/decisions.md, "Token audience") and compared folded
        self.section = section_identity(port_name)
        # where a refresh token's record may be: under the name as this host spells it (what
        # fwrest 0.1.0 reads and writes: SPEC 17.2's N-1 rule), else under the folded name
        # (a host spelling it in lower case), else through the folded name's alias, which a
        # record stored under another spelling carries (docs/decisions.md, "Store schema
        # versions"); looked up in that order
        self._refresh_sections: tuple[str, ...] = (
            (port_name,) if port_name == self.section else (port_name, self.section)
        )
        # a store keeping a token family on one slot (a cluster: SPEC 17.1): the family's
        # tag in each refresh token and before its hash (grants/base.py refresh_hash)
        self._tagged = store.family_slots
        # SPEC 13.5: refresh-token replays and revocations are recorded
        self.audit = audit
        # None: the key is in the store, which did not answer at start; the background loop
        # reads it (created there if absent), what needs it answers 503 meanwhile (SPEC 7)
        self._key = key
        self._key_tried = float("-inf")
        # the key lives in the (Redis) store, set by the assembly: checked every KEY_CHECK_S
        self.key_in_store = False
        self._key_checked = time.monotonic()
        self._key_fault = ""  # the last corrupt-key error logged (logged once)
        # SPEC 12.1: an asymmetric port signs and verifies with its key set, HS256 with _key
        self.keys = keys
        # SPEC 12.2: location prefix -> issuer; the bearer check accepts any of them
        self.issuers = issuers or {"": "fwrest"}
        self._accepted_issuers = frozenset(self.issuers.values())
        if issuer_configured:
            # 0.1.0 dropped a configured issuer's trailing "/" from the iss it wrote: its
            # tokens stay the service's across a rolling upgrade (SPEC 17.2)
            self._accepted_issuers |= {issuer.rstrip("/") for issuer in self.issuers.values()}
        # Without a configured "issuer" every host of the service derives its own
        # https://{HostName}:{Port}{path}: a derived iss is compared by its scheme and its
        # location path only, never its host and port (SPEC 12.2: the hosts of one service
        # are one issuer; the aud check binds a token to its server section).
        self._issuer_paths: frozenset[str] | None = (
            None
            if issuer_configured
            else frozenset(urlsplit(issuer).path for issuer in self.issuers.values())
        )
        # the metadata documents (auth/oauth2/discovery.py's Metadata), set by the assembly
        self.metadata: Metadata | None = None
        # the protected resources of its locations (auth/oauth2/resource.py), set by the
        # assembly: their documents, and what a token request's resource= may name (SPEC 16.3)
        self.resources: Resources | None = None
        # the authorize route's login page (auth/oauth2/authorize.py), set by the assembly
        self.authorizer: Authorizer | None = None
        # the port's DPoP checks (auth/oauth2/dpop.py, SPEC 16.2), set by the assembly
        self.dpop: DpopCheck | None = None
        # what a function onAuthparams answered the metadata route last, and when
        self._asked: tuple[float, AuthParams | None] = (float("-inf"), None)
        self.store = store
        self.source = source
        source.label = port_name
        if source.file is not None:
            # the content the start checked, to fall back on should the file break before
            # this worker's first token request (see ParamsSource.read_file)
            with contextlib.suppress(ParamsError):
                source.read_file()
        self.max_failures = max_failures
        if throttle is None:
            throttle = Throttle(store, max_failures, port_name, strict=True, wording=TOKEN_WORDING)
        self.throttle = throttle
        self.allow_get = allow_get
        # refresh_expires values seen already past at a grant (warned once each, per worker)
        self._past_refresh: set[str] = set()
        self.revoked: dict[str, float] = {}
        # SHA-256 of a token -> (exp, claims, kid, the key set's generation when verified):
        # the signature of a token seen before is not checked again (see verify)
        self._verified: dict[bytes, tuple[float, dict[str, Any], object, object]] = {}
        self._refresher: asyncio.Task[None] | None = None
        self._stopped = False  # stop() was called: the background loop ends
        self._restoring: set[asyncio.Task[None]] = set()
        # token hash -> the claim of a spend this worker must undo (restore_later): a request
        # presenting that token undoes it first (spend), so the client's retry is no replay
        self._undo: dict[str, str] = {}
        # the store's own threads (a hung store must not starve onAuthparams and password
        # checks of asyncio's executor, SPEC 7), inline for an in-process store (memory)
        self._own_client = client is None
        self._calls = client if client is not None else StoreClient(store)
        self._calls_inline = self._calls.inline
        self.pool = pool  # where a def onAuthparams runs (the port's pool)
        # grant_type -> its grant (grants/): built once, the request path one dict lookup
        self.grants = registry()
        # SPEC 16.2 (auth/oauth2/mtls.py), set by the assembly: the port asks for client
        # certificates (a token request that presents one gets a certificate-bound token),
        # and "boundTokens": "mtls" (a token request must present one)
        self.mtls = False
        self.mtls_required = False

    def signing_secret(self) -> bytes:
        """The service's signing key (HS256), shared by every worker and host: what the
        authorize route derives its form key from (``authorize.py``).

        Raises:
            HTTPError: 503, the key is not read yet (the store did not answer since start).
        """
        key = self._key
        if key is None:
            raise store_unavailable()
        return key

    async def _read_key(self) -> None:
        """Read the signing key from the store (at most once per :data:`KEY_RETRY_S`), when
        the start could not: created there if it holds none, as at a first start."""
        now = time.monotonic()
        if now - self._key_tried < KEY_RETRY_S:
            return
        self._key_tried = now
        try:
            key = await self._calls.call(
                store_signing_key, self.store, deadline=REVOKED_REFRESH_DEADLINE_S
            )
        except (StoreError, TimeoutError) as exc:
            log.auth_log.debug("[%s] signing key not read: %s", self.port_name, exc)
            return
        except ConfigError as exc:  # corrupt in the store: said once, 503 until mended
            if str(exc) != self._key_fault:
                self._key_fault = str(exc)
                log.auth_log.error("[%s] %s", self.port_name, exc)
            return
        self._key = key
        log.auth_log.info(
            "[%s] the signing key was read from the state store: tokens are issued",
            self.port_name,
        )

    async def _keep_key(self) -> None:
        """Every :data:`KEY_CHECK_S`: the store still holds this worker's signing key (SPEC
        7: one key for every host). A store restarted without its data gets it back (set-if-
        absent), before a worker or host started since makes a new one; should one have
        already (another key in the store), this worker takes the store's, as every host
        started since has, and says so."""
        now = time.monotonic()
        if now - self._key_checked < KEY_CHECK_S or self._key is None:
            return
        self._key_checked = now
        try:
            held = await self._calls.call(
                keep_signing_key, self.store, self._key, deadline=REVOKED_REFRESH_DEADLINE_S
            )
        except (StoreError, TimeoutError, ConfigError) as exc:
            log.auth_log.debug("[%s] signing key not checked: %s", self.port_name, exc)
            return
        if held != self._key:
            self._key = held
            self._verified.clear()
            log.auth_log.warning(
                "[%s] the state store holds another signing key than this worker's (a store "
                "that lost its data, and a worker or host that made a new key since): %s",
                self.port_name,
                "it signs and verifies with the store's from now on; tokens issued before are "
                "refused"
                if self.keys is None
                # the port signs with its key set: the HS256 key keys its login forms only
                else "its login page's forms use the store's from now on (the port's tokens "
                "are signed with its key set: unaffected)",
            )

    # -- revocation cache (SPEC 7: at most 1 s stale, never waited on) --------------------------
    def start(self) -> None:
        if self._refresher is None:
            self._stopped = False
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_revoked())
        if self.keys is not None:
            self.keys.start()

    async def _refresh_revoked(self) -> None:
        # the flag as well as the cancel: asyncio.wait_for (3.11) returns the call's answer
        # and drops a cancel that arrives as the call ends, so stop() may not end the loop
        while not self._stopped:
            if self._key is None:
                await self._read_key()
            elif self.key_in_store:
                await self._keep_key()
            try:
                self.revoked = await self._calls.call(
                    self.store.revoked_families, deadline=REVOKED_REFRESH_DEADLINE_S
                )
            except (StoreError, TimeoutError) as exc:
                log.auth_log.debug(
                    "revocation cache not refreshed: %s",
                    str(exc) or f"no answer within {REVOKED_REFRESH_DEADLINE_S:g} s",
                )
            await asyncio.sleep(0.5)

    def stop(self) -> None:
        self._stopped = True
        if self._refresher is not None:
            self._refresher.cancel()
            self._refresher = None
        if self.keys is not None:
            self.keys.stop()
        for task in list(self._restoring):
            task.cancel()
        if self._own_client:
            self._calls.close()

    # -- bearer check --------------------------------------------------------------------------
    def verify(self, token: str) -> dict[str, Any]:
        """The claims of a valid access token.

        Raises:
            InvalidToken: bad signature, another algorithm, wrong ``typ``, unknown ``crit``,
                expired, or revoked.
        """
        # A token verified before (the same string: its hash) is not verified again: checking
        # an ES256 or RS256 signature costs far more than the rest of the request (issue 38).
        # What can change since is checked on every request: its expiry, its family's
        # revocation, and (asymmetric ports) whether the key set still holds its key, looked
        # up again only when the set changed (a new generation) since it was remembered.
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        cached = self._verified.get(digest)
        if cached is not None:
            expires, remembered, kid, generation = cached
            keys = self.keys
            if time.time() >= expires:
                del self._verified[digest]
                raise InvalidToken("the access token has expired")
            if keys is not None and generation is not keys.generation:
                if keys.key_of(kid) is None:
                    del self._verified[digest]  # its key left the set: verified afresh below
                    cached = None
                else:
                    self._verified[digest] = (expires, remembered, kid, keys.generation)
            if cached is not None:
                family = remembered.get("fam")
                if family is not None and family_revoked(family, self.revoked):
                    raise InvalidToken("the access token was revoked")
                return remembered
        import jwt  # here, not at the top: a start of fwrest without oAuth2 never loads it

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("the access token is malformed") from None
        alg, key = self._verifying_key(header)
        if header.get("alg") != alg:
            raise InvalidToken("the access token is not signed with the server's algorithm")
        if str(header.get("typ", "")).lower() != "at+jwt":
            raise InvalidToken("the token is not an access token (typ at+jwt)")
        if "crit" in header:
            raise InvalidToken("the access token names critical extensions fwrest does not know")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[alg],
                # aud is checked below, folded (PyJWT compares it exactly); iss by any
                # location of the section (SPEC 12.2)
                issuer=self._accepted_issuers if self._issuer_paths is None else None,
                options={
                    "require": ["aud", "exp", "iat", "iss", "jti", "sub"],
                    "verify_aud": False,
                    "verify_iat": False,
                },
                leeway=0,
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the access token has expired") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken("the access token was issued by another issuer") from None
        except jwt.PyJWTError:
            raise InvalidToken("the access token signature or claims are invalid") from None
        if not claims["aud"]:  # "" or []: missing, as PyJWT's audience check has it
            raise InvalidToken("the access token signature or claims are invalid")
        if not self._own_audience(claims["aud"]):
            # valid only on the section that issued it (SPEC 7.1), its name in any case (SPEC 9)
            raise InvalidToken("the access token was issued for another server")
        if self._issuer_paths is not None and not self._derived_issuer(claims.get("iss")):
            raise InvalidToken("the access token was issued by another issuer")
        family = claims.get("fam")
        if family is not None and not isinstance(family, str):
            # only a token signed with the service's key gets here (fwrest writes a string):
            # a 401, not a 500 from an unhashable lookup
            raise InvalidToken("the access token signature or claims are invalid")
        if family is not None and family_revoked(family, self.revoked):
            raise InvalidToken("the access token was revoked")
        try:
            expires = float(claims["exp"])
        except (OverflowError, TypeError, ValueError):
            raise InvalidToken("the access token signature or claims are invalid") from None
        if len(self._verified) >= (_VERIFIED_MAX if self.keys is not None else _VERIFIED_MAX_HMAC):
            # forget the oldest: a steady size (clearing all would swing the memory by the
            # whole cache, which a soak cannot tell from a leak)
            del self._verified[next(iter(self._verified))]
        generation = self.keys.generation if self.keys is not None else None
        self._verified[digest] = (expires, claims, header.get("kid"), generation)
        return claims

    def _own_audience(self, audience: object) -> bool:
        """Whether a token's ``aud`` (a string, or a list of strings, as PyJWT accepts it)
        names this server section, in any case: hosts may spell the section differently, and
        tokens issued before the name was folded carry it as their host spelled it."""
        if isinstance(audience, str):
            return section_identity(audience) == self.section
        if not isinstance(audience, list):
            return False
        named = False
        for item in audience:
            if not isinstance(item, str):
                return False  # PyJWT refuses a list holding anything but strings
            if section_identity(item) == self.section:
                named = True
        return named

    def _derived_issuer(self, issuer: object) -> bool:
        """Whether ``issuer`` is one of this section's derived issuers as another host of
        the service wrote it: ``https://`` any host and port, then the path of one of the
        section's locations, no query, fragment or user info (SPEC 12.2)."""
        if issuer in self._accepted_issuers:
            return True
        if not isinstance(issuer, str) or self._issuer_paths is None:
            return False
        try:
            parts = urlsplit(issuer)
        except ValueError:
            return False
        return (
            parts.scheme == "https"
            and bool(parts.hostname)
            and "@" not in parts.netloc
            and not parts.query
            and not parts.fragment
            and not issuer.endswith(("?", "#"))
            and parts.path in self._issuer_paths
        )

    async def verify_fresh(self, token: str) -> dict[str, Any]:
        """:meth:`verify`, but a token naming a key this worker does not know yet is checked
        again after one look at the key set (a rotation on another host or worker is seen
        before its next poll: SPEC 12.1, no valid token refused across a rotation)."""
        unknown: UnknownKey | None = None
        try:
            return self.verify(token)
        except UnknownKey as exc:
            unknown = exc
        # awaited outside the except clause (tests/tools/mypyc_lint.py, except-awaits)
        if self.keys is None:
            raise unknown
        changed = await self.keys.catch_up()
        if changed is None:
            # the set cannot be read (the store does not answer): the key may be one made
            # since this worker's last look, so 503, not a verdict on the token (SPEC 7)
            raise store_unavailable()
        if not changed:
            raise unknown
        return self.verify(token)

    def _verifying_key(self, header: dict[str, Any]) -> tuple[str, Any]:
        """The algorithm and key a token must verify with: the server's own, never one the
        token names or carries (SPEC 7); on an asymmetric port, the key of the set that its
        ``kid`` names."""
        if self.keys is None:
            return ALG, self.signing_secret()  # 503 while the key is not read (SPEC 7)
        if self.keys.pending:
            raise store_unavailable()  # no key set read yet (the store is down): 503
        key = self.keys.key_of(header.get("kid"))
        if key is None:
            raise UnknownKey("the access token names no key of the server's key set")
        return self.keys.alg, key

    def jwks(self) -> bytes | None:
        """The JWK Set of the port's keys; None on an HS256 port (SPEC 12.2)."""
        return None if self.keys is None else self.keys.jwks

    async def current_jwks(self) -> tuple[bytes, float] | None:
        """:meth:`jwks` after one look at the key set, and until when it holds (a former key
        is dropped then): a verifier fetching the set because a token names a key it lacks
        gets that key, even when another worker or host signed with it before this worker's
        next poll."""
        if self.keys is None:
            return None
        await self.keys.catch_up()
        return self.keys.published()

    def _sign(self, claims: dict[str, Any], ttl_ms: int) -> str:
        import jwt

        claims["iss"] = _issuer.get() or next(iter(self.issuers.values()))
        if self.keys is not None:
            return self.keys.sign(claims, ttl_ms / 1000)
        return jwt.encode(claims, self.signing_secret(), algorithm=ALG, headers={"typ": "at+jwt"})

    async def metadata_document(self, prefix: str) -> bytes | None:
        """The metadata document (RFC 8414) of the location ``prefix`` with the grant types
        and scopes ``onAuthparams`` allows now: a file as it is now (one ``stat``), a function's
        answer of the last 5 s (the route is open to anyone: it must not call the
        application's function at whatever rate a client likes); None for no such location."""
        if self.metadata is None:
            return None
        return self.metadata.document(prefix, await self._allowed_now())

    async def resource_document(self, prefix: str) -> bytes | None:
        """The protected resource metadata (RFC 9728) of the location ``prefix``, its scopes
        those of :meth:`metadata_document`; None for no such location (SPEC 16.3)."""
        if self.resources is None:
            return None
        return self.resources.document(prefix, await self._allowed_now())

    async def grant_types(self) -> list[str]:
        """The grant types :meth:`metadata_document` lists (for the OpenAPI document's flows)."""
        allowed = await self._allowed_now()
        if self.metadata is None:
            return offered_grants(allowed, token=True, authorize=True)
        return self.metadata.grants(allowed)

    async def _allowed_now(self) -> AuthParams | None:
        """What ``onAuthparams`` allows, for the discovery documents (:meth:`metadata_document`)."""
        allowed: AuthParams | None
        if self.source.file is not None:
            try:
                allowed = await settled(asyncio.to_thread(self.source.read_file))
            except ParamsError:
                allowed = None  # the start read it; logged when the token route reads it
        else:
            asked, allowed = self._asked
            if time.monotonic() - asked > METADATA_PARAMS_S:
                try:
                    allowed = await self.auth_params({})
                except HTTPError:
                    allowed = None  # logged by auth_params: the document lists the defaults
                self._asked = (time.monotonic(), allowed)
        return allowed

    # -- token route ---------------------------------------------------------------------------
    def _unavailable(self, exc: Exception) -> HTTPError:
        if isinstance(exc, StoreBusy):
            # the store may be healthy: this worker's store threads were all taken
            log.auth_log.error(
                "[%s] token request not served: %s; answered 503", self.port_name, exc
            )
            return store_unavailable()
        log.auth_log.error(
            "[%s] state store unavailable: %s; answered 503",
            self.port_name,
            # a deadline passed: name the request's (the call's own is only what was left of it)
            f"no answer within the request's {STORE_DEADLINE_S:g} s of store time"
            if isinstance(exc, TimeoutError)
            else str(exc),
        )
        return store_unavailable()

    async def revoke_family(self, deadline: StoreDeadline, family: str, until: float) -> None:
        """Revoke ``family`` until ``until``, in the store and in this worker's view; a family
        a refresh bound to a DPoP key under its root too, which its tokens from before the
        binding carry (``dpop.refreshed_family``)."""
        for name in dict.fromkeys((family, family_root(family))):
            await self.store_call(deadline, self.store.revoke_family, name, until)
            self.revoked[name] = max(until, self.revoked.get(name, 0.0))

    async def store_call(self, deadline: StoreDeadline, fn: Callable[..., T], *args: Any) -> T:
        if self._calls_inline:
            return fn(*args)
        job, started = self._calls.submit_timed(fn, *args)
        try:
            return await self._calls.wait(job, started, deadline.timeout(), STORE_QUEUE_S)
        except StoreError as exc:
            raise self._unavailable(exc) from None
        finally:
            deadline.count(started)

    def refresh_hashes(self, token: str) -> tuple[str, ...]:
        """The stored forms a refresh token of this section may have, this host's own first
        (:attr:`_refresh_sections`)."""
        return tuple(
            refresh_hash(token, section, self._tagged) for section in self._refresh_sections
        )

    async def aliased(self, deadline: StoreDeadline, token: str) -> str | None:
        """The hash of a refresh token's record stored under another spelling of this section
        (found through the folded name's alias); None when there is none."""
        alias = refresh_hash(token, self.section, self._tagged)
        return await self.store_call(deadline, self.store.refresh_alias, alias)

    async def refresh_record(
        self, deadline: StoreDeadline, token: str
    ) -> tuple[RefreshRecord, bool] | None:
        """The store's record of a refresh token of this section, and whether it was spent."""
        for token_hash in self.refresh_hashes(token):
            found = await self.store_call(deadline, self.store.refresh_record, token_hash)
            if found is not None:
                return found
        target = await self.aliased(deadline, token)
        if target is None:
            return None
        return await self.store_call(deadline, self.store.refresh_record, target)

    async def spend(
        self, deadline: StoreDeadline, token_hash: str, claim: str, client_id: str
    ) -> tuple[str, RefreshRecord | None]:
        """Spend a refresh token for this request (``claim``), as :meth:`store_call` would.

        A spend still running at the deadline may yet happen, after the client got its 503:
        the client's retry would then look like a replay and revoke the family. So a late
        spend that succeeded is undone (:meth:`restore_later`), as is a spend whose request
        fails before its new pair is written, and one that no replica confirmed
        (``UnconfirmedSpend``: a failover could give the token unspent to the replica).

        An undo of this token still pending in this worker (the store refused it so far) is
        done first, under the request's deadline: the client retrying after its 503 is not
        taken for a replay (a retry through another worker or host before the undo lands is).
        """
        pending = self._undo.get(token_hash)
        if pending is not None:
            await self.store_call(deadline, self.store.restore_refresh, token_hash, pending)
            self._undone(token_hash, pending)
        if self._calls_inline:
            return self.store.spend_refresh(token_hash, claim, client_id)
        loop = asyncio.get_running_loop()
        job, started = self._calls.submit_timed(
            self.store.spend_refresh, token_hash, claim, client_id
        )
        try:
            return await self._calls.wait(job, started, deadline.timeout(), STORE_QUEUE_S)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if not job.cancel():  # already running: its outcome arrives later, or never
                job.add_done_callback(functools.partial(self._late_spend, loop, token_hash, claim))
            if isinstance(exc, asyncio.CancelledError):
                raise  # the request was cancelled (its client is gone): no answer to give
            raise self._unavailable(exc) from None
        except UnconfirmedSpend as exc:
            self.restore_later(token_hash, claim)
            raise self._unavailable(exc) from None
        except StoreError as exc:
            raise self._unavailable(exc) from None
        finally:
            deadline.count(started)

    def _undone(self, token_hash: str, claim: str) -> None:
        """The spend of ``claim`` was undone: no longer pending."""
        if self._undo.get(token_hash) == claim:
            del self._undo[token_hash]

    def _late_spend(
        self,
        loop: asyncio.AbstractEventLoop,
        token_hash: str,
        claim: str,
        job: Future[tuple[str, RefreshRecord | None]],
    ) -> None:
        """(in a store thread) The outcome of a spend whose request already answered 503."""
        if job.cancelled() or job.exception() is not None or job.result()[0] != "ok":
            return
        with contextlib.suppress(RuntimeError):  # the worker is stopping; its loop is closed
            loop.call_soon_threadsafe(self.restore_later, token_hash, claim)

    def restore_later(self, token_hash: str, claim: str) -> None:
        """Make a spent refresh token valid again, in the background (:meth:`_restore`), and
        before this worker spends it again (:meth:`spend`)."""
        self._undo[token_hash] = claim
        task = asyncio.get_running_loop().create_task(self._restore(token_hash, claim))
        self._restoring.add(task)
        task.add_done_callback(self._restoring.discard)

    async def _restore(self, token_hash: str, claim: str) -> None:
        """Make a refresh token valid again whose spend reached no client (SPEC 7 promises
        503 within 1.5 s, not that the spend did not happen); the store may still be down:
        tried again until it takes it (see RESTORE_FOR_S), or until a request presenting
        the token undid it first."""
        started = time.monotonic()
        while True:
            if self._undo.get(token_hash) != claim:
                return  # a request presenting the token undid the spend first
            try:
                await self._calls.call(self.store.restore_refresh, token_hash, claim)
            except StoreError as exc:
                log.auth_log.debug("refresh token not restored yet: %s", exc)
                failed = True
            else:
                failed = False
            if not failed:
                self._undone(token_hash, claim)
                log.auth_log.info(
                    "[%s] a refresh token spent by a request that answered 503 is valid again",
                    self.port_name,
                )
                return
            took = time.monotonic() - started
            if took > RESTORE_FOR_S:
                break
            # waited outside the except clause (mypyc_lint, except-awaits)
            await asyncio.sleep(RESTORE_RETRY_S if took < RESTORE_FAST_FOR_S else RESTORE_SLOW_S)
        self._undone(token_hash, claim)
        log.auth_log.warning(
            "[%s] a refresh token spent by a request that answered 503 could not be restored "
            "within %d s; the client's retry will be taken for a replay",
            self.port_name,
            RESTORE_FOR_S,
        )

    async def auth_params(self, request: dict[str, str]) -> AuthParams:
        """What ``onAuthparams`` allows now (a function called, a file read if changed).

        Raises:
            HTTPError: 500 (the function raised or answered something unusable), 503 (the
                port's pool is full).
        """
        try:
            if self.source.file is not None:
                return await settled(asyncio.to_thread(self.source.read_file))
            if self.source.is_async:
                assert self.source.func is not None
                if self.source.legacy:
                    filled = legacy_view(request)
                    result = await self.source.func(filled)
                    return from_legacy(request, filled, result)
                awaited: Awaitable[Any] = self.source.func()
                from fwrest.auth.oauth2.params import normalise

                return normalise(await awaited)
            return await settled(off_loop(self.pool, self.source.call_sync, request))
        except HTTPError:
            raise  # the pool's 503 Server Busy
        except ParamsError as exc:
            log.auth_log.error("[%s] onAuthparams: %s; answered 500", self.port_name, exc)
            raise HTTPError(500) from None
        except BaseException as exc:  # the application's function may raise anything
            if is_cancellation(exc):
                raise
            self._log_params_raised(exc, request)
            raise HTTPError(500) from None

    def _log_params_raised(self, exc: BaseException, request: dict[str, str]) -> None:
        """An exception of ``onAuthparams``: one error line, followed by the traceback with
        ``rest_error_full=1``, as for an endpoint's exception (the function is handed no
        secret; the request's are masked in it whatever their length, the log's own scrubbing
        taking those of 3 characters or more)."""
        from fwrest.server.state import tunables  # here: fwrest.server imports fwrest.auth

        if tunables.current.rest_error_full == 1:
            # formatted here rather than by the record's exc_info: the secrets masked first
            tail = "\n" + "".join(traceback.format_exception(exc)).rstrip()
            for name in _MASKED_FIELDS:
                value = request.get(name)
                if value:
                    tail = mask_secret(value, tail)
        else:
            tail = " (rest_error_full=1 logs the whole traceback)"
        log.auth_log.error(
            "[%s] onAuthparams raised %s; answered 500%s",
            self.port_name,
            type(exc).__name__,
            tail,
        )

    async def token_endpoint(
        self,
        method: str,
        query: str,
        body: bytes,
        headers: dict[str, str],
        client_ip: str,
        location: str = "",
        path: str = "",
    ) -> Reply:
        """Answer one request of ``/fw/oauth2/token`` of the location ``location`` (its
        prefix; ``path`` the request's, for a DPoP proof's ``htu``).

        Raises:
            HTTPError: 500 (``onAuthparams``), 429 (the throttle), 503 (the store, the pool):
                the port renders them as it renders every other route's.
        """
        if self._key is None or (self.keys is not None and self.keys.pending):
            raise store_unavailable()  # the signing key is not read yet (the store is down)
        _issuer.set(self.issuers.get(location, ""))
        bound_key.set("")
        try:
            params = request_params(query, body, headers.get("content-type"), method)
            secrets_seen = tuple(params[k] for k in _SECRET_PARAMS if params.get(k))
            auth_header = headers.get("authorization")
            if auth_header:
                secrets_seen += (auth_header.strip().partition(" ")[2],)
            proof = headers.get("dpop")
            if proof:
                secrets_seen += (proof,)
            log.request_secrets.set(log.secret_forms(*secrets_seen))
            if self.dpop is not None:
                # SPEC 16.2: a valid proof binds what is issued to its key (400
                # invalid_dpop_proof for one that is not)
                target = path or (location.rstrip("/") + TOKEN_ROUTE)
                bound_key.set(await self.dpop.token_request(headers, method, target, client_ip))
            return await self._grant(method, params, auth_header, client_ip)
        except OAuthError as exc:
            return render(exc)

    async def _grant(
        self, method: str, params: dict[str, str], auth_header: str | None, client_ip: str
    ) -> Reply:
        """Dispatch a token request to its grant, doing what every grant shares in the order
        RFC 6749 5.2 and SPEC 4.2 imply (grants/base.py draws it)."""
        grant_type = params.get("grant_type")
        if not grant_type:
            raise InvalidRequest("grant_type is missing")
        grant = self.grants.get(grant_type)
        if grant is None:
            raise UnsupportedGrantType(f"the grant type {grant_type!r} is not supported")
        if self.mtls_required:
            mtls.required()  # SPEC 16.2: 400 invalid_request without a client certificate
        # a malformed scope is refused before anything is called; whether the scopes are
        # allowed is known only once the user and client are (never told before that)
        asked = requested(params.get("scope"))
        if self.resources is not None:
            self.resources.check(params.get("resource"))  # RFC 8707: invalid_target
        if method == "GET" and not self.allow_get:
            # a refresh token in the URL is as exposed as a password (RFC 6749 3.2: POST)
            raise InvalidRequest(
                f"the {grant_type} grant must use POST here (allowGetToken is false)"
            )
        creds = client_credentials(params, auth_header)
        grant.screen(self, method, params)
        allowed = await self.auth_params(params)
        client_id = await self.authenticate_client(allowed, creds)
        # the grants ``types`` lists (SPEC 4.2); without it, those allowed by default
        # (client_credentials only where ``types`` lists it: SPEC 12.4)
        listed = allowed.types
        if not (grant.by_default if listed is None else grant_type in listed):
            raise UnauthorizedClient(
                f"the grant type {grant_type!r} is not allowed for this client"
            )
        if grant.client_required and creds is None:
            # RFC 6749 4.4.2: the client authenticates (no first client stands in for it)
            raise InvalidClient(f"the {grant_type} grant needs client authentication")
        try:
            ttl_ms = access_ms(
                allowed.access_expires if allowed.access_expires is not None else 3_600_000
            )
            refresh_at = refresh_deadline(
                allowed.refresh_expires if allowed.refresh_expires is not None else "Date()+1"
            )
        except ExpiryError as exc:
            log.auth_log.error("[%s] onAuthparams: %s; answered 500", self.port_name, exc)
            raise HTTPError(500) from None
        if refresh_at <= time.time() and grant.refreshable:
            self._warn_past_refresh(allowed.refresh_expires)
        request = TokenRequest(
            self,
            method,
            params,
            client_ip,
            asked,
            allowed,
            client_id,
            ttl_ms,
            refresh_at,
            StoreDeadline(),
            creds is not None,
        )
        validated = await grant.validate(request)
        return await grant.issue(request, validated)

    def _warn_past_refresh(self, value: object) -> None:
        """A ``refresh_expires`` already past when a grant reads it (a fixed date that has
        come, ``Date()-1``, a params file changed while serving): the refresh token is issued
        as configured, expired at birth, so clients repeat the password grant. Warned once
        per distinct value and worker, without the user or the token (the start warns about
        the value it saw, docs/decisions.md "Refresh and clients")."""
        shown = repr(value)
        if shown in self._past_refresh:
            return
        if len(self._past_refresh) >= _PAST_REFRESH_REMEMBERED:
            self._past_refresh.clear()
        self._past_refresh.add(shown)
        if len(shown) > 60:
            shown = f"{shown[:57]}..."
        log.auth_log.warning(
            "[%s] onAuthparams refresh_expires %s is already past: the refresh tokens issued "
            "are expired when issued, and clients must repeat the password grant (logged once "
            "per value)",
            self.port_name,
            log.escape(shown),
        )

    # -- what the grants share ------------------------------------------------------------------
    async def authenticate_client(
        self, allowed: AuthParams, creds: ClientCredentials | None
    ) -> str:
        """The client the request authenticates as (none sent: the first client).

        A client secret is plain text or a hash (``fwrest clients`` writes argon2id), checked
        as passwords are (:func:`check_user`): the same cost for a known and an unknown
        client, whatever the kind of its secret; a hash off the event loop.

        Raises:
            InvalidClient: credentials that match no client.
        """
        if creds is None:
            return allowed.clients[0][0] if allowed.clients else ""
        cid, secret = creds.client_id, creds.secret
        if not secret and cid in allowed.public:
            return cid  # a public client names itself: it has no secret (SPEC 16.1)
        clients = allowed.clients
        tried = [(cid, secret)]
        if creds.as_sent is not None and creds.as_sent[0] in allowed.client_ids:
            tried.append(creds.as_sent)  # a known client's only: one hash per unknown one
        for cid, secret in tried:
            if costly(clients):
                ok = await settled(asyncio.to_thread(check_user, clients, cid, secret))
            else:
                ok = check_user(clients, cid, secret)
            if ok:
                return cid
        raise InvalidClient("client authentication failed")

    async def issue(
        self,
        deadline: StoreDeadline,
        subject: str,
        client_id: str,
        family: str,
        ttl_ms: int,
        refresh_at: float | None,
        scope: str,
        family_scope: str,
        *,
        client_token: bool = False,
    ) -> Reply:
        """The answer of a grant: an access token of ``scope``, and unless ``refresh_at`` is
        None (the client credentials grant, RFC 6749 4.4.3) a refresh token of the family,
        which keeps ``family_scope``. A ``client_token`` (the client credentials grant) has
        ``sub`` = the client id (SPEC 12.4) and the claim ``fw_kind: "client"``, so that no
        one takes it for a user's token (:func:`token_user`)."""
        now = time.time()
        refresh = None
        if refresh_at is not None:
            refresh = new_refresh_token(family, self._tagged)
            # stored under the name as this host spells it, which fwrest 0.1.0 finds; hosts
            # spelling it otherwise find it through the folded name's alias (SPEC 17.2)
            record = RefreshRecord(
                refresh_hash(refresh, self.port_name, self._tagged),
                family,
                client_id,
                subject,
                refresh_at,
                family_scope,
                now,
                ""
                if self.port_name == self.section
                else refresh_hash(refresh, self.section, self._tagged),
            )
            await self.store_call(deadline, self.store.add_refresh, record)
        claims = {
            "aud": self.port_name,
            "sub": subject,
            "client_id": client_id,
            "iat": int(now),
            "exp": int(now + ttl_ms / 1000),
            "jti": uuid.uuid4().hex,
            "fam": family,
            "scope": scope,
        }
        if client_token:
            claims["fw_kind"] = CLIENT_KIND
        cnf: dict[str, str] = {}
        jkt = bound_key.get()
        if jkt:
            cnf["jkt"] = jkt  # RFC 9449 6.1: bound to the proof's key
        if self.mtls:
            bound = mtls.confirmation()  # SPEC 16.2: bound to the connection's certificate
            if bound is not None:
                cnf.update(bound)
        if cnf:
            claims["cnf"] = cnf
        access = self._sign(claims, ttl_ms)
        issued = (access,) if refresh is None else (access, refresh)
        log.request_secrets.set((*log.request_secrets.get(), *log.secret_forms(*issued)))
        log.auth_log.info(
            "[%s] tokens issued to %r (client %r, scope %r)",
            self.port_name,
            log.escape(subject),
            client_id,
            scope,
        )
        answer: dict[str, str | int] = {
            "access_token": access,
            "refresh_token": refresh or "",
            "scope": scope,
            "token_type": "DPoP" if jkt else "Bearer",
            "expires_in": max(ttl_ms // 1000, 1),
        }
        if refresh is None:
            del answer["refresh_token"]  # RFC 6749 4.4.3
        body = orjson.dumps(answer)
        return Reply(200, list(_ISSUED_HEADERS), body)


def token_user(claims: dict[str, Any]) -> str:
    """Who an access token's bearer is to the application (``rest.getAuthUser()``, ``onAdmin``,
    the audit trail's actor): its user (``sub``), or ``client:<id>`` for a client's own token,
    a name no user may have (docs/decisions.md). A token without ``fw_kind`` whose ``sub`` is
    its ``client_id`` (a client credentials token of an earlier release) is a client's too."""
    sub = str(claims.get("sub", ""))
    if claims.get("fw_kind") == CLIENT_KIND or (sub and sub == claims.get("client_id")):
        return CLIENT_PREFIX + sub
    return sub


def bearer_token(header: str | None) -> str | None:
    """``Bearer abc`` -> ``abc`` (scheme case-insensitive); None for anything else."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


__all__ += ["bearer_token", "parse_basic", "revoked_until", "token_user"]
