"""Revocation (RFC 7009) and introspection (RFC 7662) of an oAuth2 port's tokens (SPEC 12.3).

``{base}/fw/oauth2/revoke`` and ``{base}/fw/oauth2/introspect`` are served by the port's
:class:`~fwrest.auth.oauth2.tokens.TokenService`, whose parsing, client authentication,
store deadline and revocation cache they share with the token route:

* a token is told by its shape: an access token is a JWT (two dots), a refresh token is
  random text; ``token_type_hint`` is accepted and not needed;
* revoking either revokes its whole family (the refresh token and every access token issued
  from it: access tokens carry the family, claim ``fam``), through the mechanism a refresh
  replay uses: the store's revoked families, which every worker and host reads every 0.5 s,
  and this worker's cache at once;
* a token of another client is neither revoked nor described (RFC 7009 2.1, RFC 7662 2.2),
  but to a resource server (a bearer token with the scope ``introspect``, or a client whose
  entry lists it), which introspects every token of its port;
  an unknown, expired, revoked, malformed or foreign one (another port: another audience,
  another hash) is 200 with an empty body, or ``{"active": false}``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from fwrest import log
from fwrest.auth.oauth2.dpop import family_key, family_revoked
from fwrest.auth.oauth2.errors import (
    CLIENT_CHALLENGE,
    InvalidClient,
    InvalidRequest,
    OAuthError,
    render,
)
from fwrest.auth.oauth2.expiry import ExpiryError, access_ms
from fwrest.auth.oauth2.mtls import MtlsRefused, certificate_bound, check_current
from fwrest.auth.oauth2.params import CLIENT_PREFIX, AuthParams, client_credentials, request_params
from fwrest.auth.oauth2.tokens import (
    InvalidToken,
    StoreDeadline,
    TokenService,
    bearer_token,
    token_user,
)
from fwrest.errors import BEARER, OAUTH_NO_STORE, HTTPError
from fwrest.store.audit import ANONYMOUS, AuditEvent
from fwrest.store.families import family_until
from fwrest.wire import JSON, Reply

__all__ = ["INTROSPECT_SCOPE", "introspect_endpoint", "revoke_endpoint"]

INTROSPECT_SCOPE = "introspect"  # SPEC 12.3: an access token with it may introspect
REFRESH_JTI_CHARS = 32  # a refresh token's jti: 128 bits of its stored SHA-256 hash
_JSON_NO_STORE = (("content-type", JSON), *OAUTH_NO_STORE)
# RFC 7009 2.2's empty 200, its content type as a Response with an empty body had it
_REVOKED_HEADERS = (("content-type", "application/octet-stream"), *OAUTH_NO_STORE)
_INACTIVE = orjson.dumps({"active": False})
_DEFAULT_ACCESS_MS = 3_600_000  # as the token route's default


def _parse(
    method: str, query: str, body: bytes, headers: dict[str, str]
) -> tuple[dict[str, str], str | None]:
    """The request's parameters and ``Authorization`` header, its secrets registered for the
    log's scrub before anything can log (SPEC 7)."""
    params = request_params(query, body, headers.get("content-type"), method)
    seen = tuple(params[k] for k in ("token", "client_secret") if params.get(k))
    auth_header = headers.get("authorization")
    if auth_header:
        seen += (auth_header.strip().partition(" ")[2],)
    log.request_secrets.set(log.secret_forms(*seen))
    return params, auth_header


def _access_s(service: TokenService, allowed: AuthParams) -> float:
    expires = allowed.access_expires
    try:
        return access_ms(expires if expires is not None else _DEFAULT_ACCESS_MS) / 1000
    except ExpiryError as exc:
        log.auth_log.error("[%s] onAuthparams: %s; answered 500", service.port_name, exc)
        raise HTTPError(500) from None


def _token(params: dict[str, str]) -> str:
    token = params.get("token")
    if not token:
        raise InvalidRequest("token is missing")
    return token


def _is_jwt(token: str) -> bool:
    return token.count(".") == 2


async def _access_claims(service: TokenService, token: str) -> dict[str, Any] | None:
    """The claims of a valid access token of this port, None for anything else."""
    if not _is_jwt(token):
        return None
    try:
        return await service.verify_fresh(token)
    except InvalidToken:
        return None


# -- revocation (RFC 7009) -------------------------------------------------------------------
async def revoke_endpoint(
    service: TokenService,
    method: str,
    query: str,
    body: bytes,
    headers: dict[str, str],
    client_ip: str = "",
) -> Reply:
    """Answer one request of ``/fw/oauth2/revoke`` from ``client_ip``."""
    try:
        params, auth_header = _parse(method, query, body, headers)
        # the client as the token route authenticates it (none sent: the first client)
        creds = client_credentials(params, auth_header)
        allowed = await service.auth_params(params)
        client_id = await service.authenticate_client(allowed, creds)
        token = _token(params)
        await _revoke(service, token, client_id, _access_s(service, allowed), client_ip)
    except OAuthError as exc:
        return render(exc)
    # RFC 7009 2.2: 200 whether or not there was anything to revoke
    return Reply(200, list(_REVOKED_HEADERS), b"")


async def _revoke(
    service: TokenService, token: str, client_id: str, access_s: float, client_ip: str
) -> None:
    deadline = StoreDeadline()
    store = service.store
    claims = await _access_claims(service, token)
    if claims is not None:
        family, owner, subject = claims.get("fam"), claims.get("client_id"), claims.get("sub")
        kind = "access"
        if not isinstance(family, str) or not isinstance(subject, str):
            return  # a token without a family (none fwrest issues) cannot be revoked
        latest = float(claims["exp"])
    elif _is_jwt(token):
        return  # not a valid access token of this port: nothing to revoke
    else:
        found = await service.refresh_record(deadline, token)
        if found is None:
            return
        record = found[0]
        family, owner, subject, latest = (
            record.family,
            record.client_id,
            record.subject,
            record.expires_at,
        )
        kind = "refresh"
    if owner != client_id:
        # RFC 7009 2.1: the client must own the token; another client's is not revoked
        log.auth_log.info(
            "[%s] revocation of a token of client %r asked by client %r: not revoked",
            service.port_name,
            log.escape(str(owner)),
            log.escape(client_id),
        )
        return
    families = await service.store_call(deadline, store.user_families, subject)
    until = family_until(max(families.get(family, 0.0), latest), access_s)
    await service.revoke_family(deadline, family, until)
    log.auth_log.warning(
        "[%s] token family of user %r revoked by client %r (by its %s token)",
        service.port_name,
        log.escape(subject),
        log.escape(client_id),
        kind,
    )
    if service.audit is not None:
        # the client revoked (RFC 7009: it authenticates, not a user): "client:<id>"
        actor = f"client:{client_id}" if client_id else ANONYMOUS
        details = {"user": subject, "client_id": client_id, "family": family}
        details |= {"token_type": f"{kind}_token", "via": "oauth2/revoke"}
        service.audit.record(AuditEvent("revocation", actor, client_ip, service.port_name, details))


# -- introspection (RFC 7662) ----------------------------------------------------------------
async def introspect_endpoint(
    service: TokenService,
    method: str,
    query: str,
    body: bytes,
    headers: dict[str, str],
    location: str = "",
) -> Reply:
    """Answer one request of ``/fw/oauth2/introspect`` of the location ``location``."""
    try:
        params, auth_header = _parse(method, query, body, headers)
        client_id = await _introspector(service, params, auth_header)
        token = _token(params)
        described = await _describe(service, token, client_id, location)
    except OAuthError as exc:
        return render(exc)
    out = _INACTIVE if described is None else orjson.dumps(described)
    return Reply(200, list(_JSON_NO_STORE), out)


async def _introspector(
    service: TokenService, params: dict[str, str], auth_header: str | None
) -> str | None:
    """Who asks: the client it authenticated as (it may see its own tokens only), or None for
    a resource server, which may see every token of the port: a valid access token with the
    scope ``introspect``, or a client whose ``onAuthparams`` entry lists that scope.

    Raises:
        InvalidClient: 401 without valid client credentials or a valid
            access token with the scope ``introspect``.
    """
    bearer = bearer_token(auth_header)
    if bearer is not None:
        # a caller that is neither a client nor a bearer of the scope: 401 invalid_client
        # (SPEC 12.3, "otherwise"), the Bearer challenge saying what was wrong with its token
        try:
            caller = await service.verify_fresh(bearer)
            check_current(caller)  # a certificate-bound token needs its certificate (16.2)
        except (InvalidToken, MtlsRefused) as exc:
            raise _not_an_introspector("invalid_token", str(exc)) from None
        if service.mtls_required and not certificate_bound(caller):
            # "boundTokens": "mtls" makes the binding mandatory, here as at the bearer check
            why = "a certificate-bound access token is required here"
            raise _not_an_introspector("invalid_token", why)
        cnf = caller.get("cnf")
        if isinstance(cnf, dict) and "jkt" in cnf:
            # a DPoP-bound token is good only with a proof of its key (SPEC 16.2), which this
            # route does not take: its holder introspects as a client
            why = "the access token is DPoP-bound: it cannot be used as a bearer token"
            raise _not_an_introspector("invalid_token", why)
        scope = caller.get("scope")
        if not isinstance(scope, str) or INTROSPECT_SCOPE not in scope.split(" "):
            why = f"introspection needs an access token with the scope {INTROSPECT_SCOPE!r}"
            raise _not_an_introspector("insufficient_scope", why)
        return None
    creds = client_credentials(params, auth_header)
    if creds is None:
        raise InvalidClient(
            "introspection needs client authentication or an access token with the scope "
            f"{INTROSPECT_SCOPE!r}"
        )
    allowed = await service.auth_params(params)
    if creds[0] in allowed.public:
        # a public client only names itself (SPEC 16.1): it authenticates nothing, as
        # Keycloak refuses introspection to public clients
        raise InvalidClient("a public client cannot use introspection")
    client_id = await service.authenticate_client(allowed, creds)
    if INTROSPECT_SCOPE in allowed.client_scopes.get(client_id, ()):
        return None  # a resource server's own client (docs/decisions.md)
    return client_id


def _not_an_introspector(error: str, why: str) -> InvalidClient:
    if error == "insufficient_scope":
        bearer = BEARER.refused(error, why, scope=INTROSPECT_SCOPE)
    else:
        bearer = BEARER.refused(error, why)
    # both challenges in one field (RFC 9110 11.6.1): Basic's first, as the token route's
    return InvalidClient(why, challenge=f"{CLIENT_CHALLENGE}, {bearer}")


async def _describe(
    service: TokenService, token: str, client_id: str | None, location: str
) -> dict[str, Any] | None:
    """RFC 7662 2.2's answer for an active token the caller may see, else None. A refresh
    token's issuer is the asking location's: the store keeps none (SPEC 12.2)."""
    claims = await _access_claims(service, token)
    if claims is not None:
        if client_id is not None and claims.get("client_id") != client_id:
            return None
        described = {
            "active": True,
            "scope": claims.get("scope", "default"),
            "client_id": claims.get("client_id"),
            "username": claims.get("sub"),
            "token_type": "access_token",
            "exp": claims.get("exp"),
            "iat": claims.get("iat"),
            "sub": claims.get("sub"),
            "iss": claims.get("iss"),
            "jti": claims.get("jti"),
        }
        if "cnf" in claims:  # SPEC 16.2: the key or certificate it is bound to
            described["cnf"] = claims["cnf"]
        if token_user(claims).startswith(CLIENT_PREFIX):
            # a client's own token has no user (RFC 7662 2.2: username is the resource
            # owner's); its sub is the client id (SPEC 12.4)
            del described["username"]
        return described
    if _is_jwt(token):
        return None
    deadline = StoreDeadline()
    found = await service.refresh_record(deadline, token)
    if found is None:
        return None
    record, spent = found
    if spent or record.expires_at <= time.time():
        return None
    if client_id is not None and record.client_id != client_id:
        return None
    # the store's revocations, not the cache's (as a refresh reads them: SPEC 7)
    revoked = await service.store_call(deadline, service.store.revoked_families)
    if family_revoked(record.family, revoked):
        return None
    answer: dict[str, Any] = {
        "active": True,
        "scope": record.scope,
        "client_id": record.client_id,
        "username": record.subject,
        "token_type": "refresh_token",
        "exp": int(record.expires_at),
        "sub": record.subject,
        "iss": service.issuers.get(location) or next(iter(service.issuers.values())),
        # the token's identifier: the start of its stored hash, stable and not the token
        # (after the family tag a cluster's hash starts with: grants/base.py refresh_hash)
        "jti": record.token_hash.rpartition(".")[2][:REFRESH_JTI_CHARS],
    }
    if record.issued_at:  # a record an earlier fwrest stored kept no issue time
        answer["iat"] = int(record.issued_at)
    jkt = family_key(record.family)
    if jkt:  # a public client's family bound to its DPoP key (SPEC 16.2)
        answer["cnf"] = {"jkt": jkt}
    return answer
