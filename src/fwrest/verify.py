"""Verifying fwrest's access tokens in other services (SPEC 16.4, extra ``fwrest[verify]``).

::

    from fwrest.verify import Verifier

    verifier = Verifier("https://auth.example.com/rest", audience="API")
    claims = verifier.verify(token, scopes=["orders:read"])

:class:`Verifier` finds the issuer's ``jwks_uri`` through its RFC 8414 metadata, keeps the key
set as its ``Cache-Control`` says (a token naming an unknown ``kid`` fetches the set again,
unless a fetch was made in the last minute), and checks a token's signature (the algorithm is
the key's, never the token's), ``typ`` (``at+jwt``), ``iss``, ``aud``, ``exp`` and ``nbf`` (with
``leeway`` seconds), its scopes and any ``cnf`` binding (RFC 8705 certificate, RFC 9449 DPoP
key); with ``introspect=(client_id, secret)`` it also asks the issuer's introspection route
(RFC 7662), remembering an answer for at most 30 s, so that a revoked token is refused.
:class:`AsyncVerifier` has the same methods as coroutines. ``Verifier.require(scopes=...)`` is a
FastAPI/Starlette dependency, :class:`VerifyMiddleware` an ASGI middleware.

This module runs in other services: it imports nothing of fwrest's server, only PyJWT (with
``cryptography``) and httpx, and Starlette when an adapter is used.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = [
    "AsyncVerifier",
    "InsufficientScope",
    "InvalidToken",
    "IssuerUnavailable",
    "NoPublicKey",
    "Verifier",
    "VerifyMiddleware",
]

WELL_KNOWN = "/.well-known/oauth-authorization-server"  # RFC 8414 3.1
KID_REFETCH_S = 60.0  # SPEC 16.4: an unknown kid fetches the set unless one was fetched since
INTROSPECT_CACHE_S = 30.0  # SPEC 16.4: an introspection answer is remembered at most this long
DEFAULT_MAX_AGE_S = 300.0  # a key set answered without Cache-Control max-age
MAX_AGE_CAP_S = 86400.0  # a key set is fetched again at least daily, whatever it says
HTTP_TIMEOUT_S = 5.0
DPOP_WINDOW_S = 60.0  # a DPoP proof's iat within this of now (SPEC 16.2)
SIGNING_ALGS = ("ES256", "EdDSA", "RS256")  # fwrest's public-key algorithms (SPEC 12.1)
DPOP_ALGS = SIGNING_ALGS  # a DPoP proof's (SPEC 16.2)
_INTROSPECT_MAX = 10_000  # introspection answers remembered (oldest dropped)
_JTI_MAX = 10_000  # DPoP proof ids remembered for their window (oldest dropped)
_MAX_AGE = re.compile(r"(?:^|,)\s*(?:s-)?max-age\s*=\s*\"?(\d+)\"?", re.IGNORECASE)
_NO_CACHE = re.compile(r"(?:^|,)\s*(?:no-store|no-cache)\s*(?:,|$)", re.IGNORECASE)
_THUMBPRINT_MEMBERS = {
    "EC": ("crv", "kty", "x", "y"),
    "OKP": ("crv", "kty", "x"),
    "RSA": ("e", "kty", "n"),
}


# -- errors ----------------------------------------------------------------------------------


def _quoted(text: str) -> str:
    """An auth-param value (RFC 7235 quoted-string): no quote, backslash or control char."""
    return "".join(c for c in text if c >= " " and c not in '"\\')


class InvalidToken(Exception):
    """A token to refuse: 401, with the RFC 6750 challenge in :attr:`www_authenticate`."""

    status = 401

    def __init__(self, description: str, *, www_authenticate: str | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.www_authenticate = www_authenticate or (
            f'Bearer error="invalid_token", error_description="{_quoted(description)}"'
        )


class InsufficientScope(Exception):
    """A valid token without the scopes asked for: 403 (RFC 6750 3.1)."""

    status = 403

    def __init__(self, scopes: Iterable[str]) -> None:
        self.scopes = tuple(scopes)
        wanted = " ".join(self.scopes)
        super().__init__(f"the access token lacks the scope {wanted}")
        self.description = str(self)
        self.www_authenticate = (
            f'Bearer error="insufficient_scope", scope="{_quoted(wanted)}", '
            f'error_description="{_quoted(self.description)}"'
        )


class NoPublicKey(ValueError):
    """The issuer publishes no key set: an HS256 port of fwrest signs with a secret key that is
    never published, so no other service can verify its tokens (sign with EdDSA, ES256 or
    RS256: ``"signingAlg"``)."""


class IssuerUnavailable(Exception):
    """The issuer's metadata, key set or introspection route could not be read (the network,
    the issuer down, a malformed answer): 503, the token neither accepted nor refused."""

    status = 503

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description
        self.www_authenticate = ""


# -- what the sync and async verifiers share (no I/O) ----------------------------------------


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def jwk_thumbprint(jwk: dict[str, Any]) -> str:
    """The RFC 7638 SHA-256 thumbprint of a public JWK (its required members, sorted, no
    white space)."""
    members = _THUMBPRINT_MEMBERS.get(str(jwk.get("kty")))
    if members is None or any(not isinstance(jwk.get(m), str) for m in members):
        raise InvalidToken("the DPoP proof's jwk is not an EC, OKP or RSA public key")
    canonical = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    return _b64url(hashlib.sha256(canonical.encode("utf-8")).digest())


def _cert_thumbprint(cert: object) -> str:
    """The RFC 8705 ``x5t#S256`` of a certificate: PEM or DER, ``str`` or ``bytes``, or a
    ``cryptography`` certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    if isinstance(cert, x509.Certificate):
        der = cert.public_bytes(Encoding.DER)
    elif isinstance(cert, str | bytes):
        raw = cert.encode("ascii", "replace") if isinstance(cert, str) else cert
        try:
            if b"-----BEGIN" in raw:
                der = x509.load_pem_x509_certificate(raw).public_bytes(Encoding.DER)
            else:
                der = x509.load_der_x509_certificate(raw).public_bytes(Encoding.DER)
        except ValueError:
            raise InvalidToken("the client certificate could not be read") from None
    else:
        raise TypeError("client_cert: PEM or DER (str or bytes) or a cryptography certificate")
    return _b64url(hashlib.sha256(der).digest())


def _max_age(cache_control: str | None) -> float:
    """Seconds a key set may be kept, from its ``Cache-Control``."""
    if not cache_control:
        return DEFAULT_MAX_AGE_S
    if _NO_CACHE.search(cache_control):
        return 0.0
    found = _MAX_AGE.search(cache_control)
    if found is None:
        return DEFAULT_MAX_AGE_S
    return min(float(found.group(1)), MAX_AGE_CAP_S)


def _target(url: str) -> tuple[str, str, str] | None:
    """(scheme, authority, path) of a URL, folded and without query or fragment, as RFC 9449
    4.3 compares ``htu``; None for a URL that does not parse."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    default = {"https": 443, "http": 80}.get(scheme)
    authority = host if port in (None, default) else f"{host}:{port}"
    return scheme, authority, parts.path or "/"


@dataclass(frozen=True, slots=True)
class _Keys:
    """A fetched key set: kid -> (algorithm, key), and when it goes stale (monotonic)."""

    by_kid: dict[str, tuple[str, Any]]
    stale_at: float


class _Core:
    """The checks of a verifier, and its caches; the sync and async classes fetch."""

    def __init__(
        self,
        issuer: str,
        audience: str | Iterable[str] | None,
        leeway: float,
        introspect: tuple[str, str] | None,
    ) -> None:
        if not isinstance(issuer, str) or not issuer:
            raise ValueError("Verifier: issuer must be the issuer's URL (the tokens' iss)")
        parts = urlsplit(issuer)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"Verifier: issuer {issuer!r} is not an https URL")
        if not 0 <= leeway <= 300:
            raise ValueError("Verifier: leeway must be 0-300 seconds")
        if introspect is not None and (
            len(introspect) != 2 or not all(isinstance(v, str) for v in introspect)
        ):
            raise ValueError("Verifier: introspect must be (client_id, client_secret)")
        self.issuer = issuer
        self.audience = (
            audience if audience is None or isinstance(audience, str) else list(audience)
        )
        self.leeway = leeway
        self.introspect = introspect
        path = parts.path.rstrip("/")
        self.metadata_url = f"{parts.scheme}://{parts.netloc}{WELL_KNOWN}{path}"
        self.jwks_uri: str | None = None
        self.introspection_endpoint: str | None = None
        self.keys: _Keys | None = None
        self.last_fetch = float("-inf")  # monotonic: the key set's last fetch
        # settable on an instance (tests shorten them; SPEC 9's rule for deadlines)
        self.kid_refetch_interval = KID_REFETCH_S
        self.introspect_cache_s = INTROSPECT_CACHE_S
        self._active: dict[str, tuple[float, bool]] = {}
        self._jtis: dict[str, float] = {}
        self._caches = threading.Lock()  # the two above, shared by a Verifier's threads
        self.no_key: NoPublicKey | None = None  # an issuer without a key set, once found

    # -- discovery ----------------------------------------------------------------------------
    def take_metadata(self, status: int, body: bytes) -> None:
        if status != 200:
            raise IssuerUnavailable(
                f"the issuer's metadata ({self.metadata_url}) answered {status}"
            )
        try:
            meta = json.loads(body)
        except ValueError:
            raise IssuerUnavailable("the issuer's metadata is not JSON") from None
        if not isinstance(meta, dict) or meta.get("issuer") != self.issuer:
            # RFC 8414 3.3: the document must name the issuer it was asked for
            raise IssuerUnavailable(
                f"the metadata at {self.metadata_url} is not the issuer {self.issuer}'s"
            )
        jwks_uri = meta.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri:
            # remembered: a misconfigured service does not ask the issuer on every request
            self.no_key = NoPublicKey(
                f"the issuer {self.issuer} publishes no key set (jwks_uri): its tokens are "
                "signed with a secret key (HS256); set signingAlg to EdDSA, ES256 or RS256"
            )
            raise self.no_key
        self.jwks_uri = jwks_uri
        endpoint = meta.get("introspection_endpoint")
        self.introspection_endpoint = endpoint if isinstance(endpoint, str) else None
        if self.introspect is not None and self.introspection_endpoint is None:
            raise IssuerUnavailable(f"the issuer {self.issuer} has no introspection endpoint")

    def take_keys(self, status: int, body: bytes, cache_control: str | None) -> None:
        import jwt

        self.last_fetch = time.monotonic()
        if status != 200:
            raise IssuerUnavailable(f"the issuer's key set answered {status}")
        try:
            document = json.loads(body)
            members = document["keys"]
            if not isinstance(members, list):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise IssuerUnavailable("the issuer's key set is not a JWK Set") from None
        by_kid: dict[str, tuple[str, Any]] = {}
        for member in members:
            if not isinstance(member, dict) or member.get("use", "sig") != "sig":
                continue
            kid, alg = member.get("kid"), member.get("alg")
            if not isinstance(kid, str) or alg not in SIGNING_ALGS:
                continue  # only signing keys of fwrest's algorithms, each with its own alg
            try:
                key = jwt.PyJWK(member, algorithm=alg).key
            except jwt.PyJWTError:
                continue
            by_kid[kid] = (alg, key)
        self.keys = _Keys(by_kid, self.last_fetch + _max_age(cache_control))

    def keys_stale(self) -> bool:
        return self.keys is None or time.monotonic() >= self.keys.stale_at

    def may_refetch(self) -> bool:
        """An unknown kid fetches the set again unless a fetch was made in the last minute."""
        return time.monotonic() - self.last_fetch >= self.kid_refetch_interval

    # -- the token ----------------------------------------------------------------------------
    def header(self, token: object) -> dict[str, Any]:
        import jwt

        if not isinstance(token, str) or not token:
            raise InvalidToken("an access token is required")
        try:
            header = dict(jwt.get_unverified_header(token))
        except jwt.PyJWTError:
            raise InvalidToken("the access token is malformed") from None
        if str(header.get("typ", "")).lower() not in ("at+jwt", "application/at+jwt"):
            raise InvalidToken("the token is not an access token (typ at+jwt)")
        if "crit" in header:
            raise InvalidToken("the access token names critical extensions")
        return header

    def key_of(self, header: dict[str, Any]) -> tuple[str, Any] | None:
        kid = header.get("kid")
        if self.keys is None or not isinstance(kid, str):
            return None
        return self.keys.by_kid.get(kid)

    def claims(
        self, token: str, header: dict[str, Any], found: tuple[str, Any] | None
    ) -> dict[str, Any]:
        import jwt

        if found is None:
            raise InvalidToken("the access token names no key of the issuer's key set")
        alg, key = found
        if header.get("alg") != alg:
            raise InvalidToken("the access token is not signed with its key's algorithm")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[alg],
                issuer=self.issuer,
                audience=self.audience,
                leeway=self.leeway,
                options={
                    "require": ["exp", "iss", "sub"],
                    "verify_aud": self.audience is not None,
                },
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the access token has expired") from None
        except jwt.ImmatureSignatureError:
            raise InvalidToken("the access token is not valid yet") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken("the access token was issued by another issuer") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken("the access token was issued for another audience") from None
        except jwt.MissingRequiredClaimError as exc:
            raise InvalidToken(f"the access token has no {exc.claim} claim") from None
        except jwt.PyJWTError:
            raise InvalidToken("the access token signature or claims are invalid") from None
        return claims

    @staticmethod
    def scopes(claims: dict[str, Any], asked: Iterable[str]) -> None:
        wanted = _scope_list(asked)
        if not wanted:
            return
        held = claims.get("scope")
        granted = set(held.split()) if isinstance(held, str) else set()
        missing = [scope for scope in wanted if scope not in granted]
        if missing:
            raise InsufficientScope(wanted)

    def bindings(
        self,
        token: str,
        claims: dict[str, Any],
        dpop_proof: str | None,
        method: str | None,
        url: str | None,
        client_cert: object,
    ) -> None:
        """The token's ``cnf`` (RFC 7800): a certificate's or a DPoP key's thumbprint."""
        cnf = claims.get("cnf")
        if cnf is None:
            return
        if not isinstance(cnf, dict):
            raise InvalidToken("the access token's cnf claim is malformed")
        x5t = cnf.get("x5t#S256")
        if x5t is not None:
            if client_cert is None:
                raise InvalidToken("the access token is bound to a client certificate")
            if not isinstance(x5t, str) or not hmac.compare_digest(
                _cert_thumbprint(client_cert).encode(), x5t.encode("utf-8", "replace")
            ):
                raise InvalidToken("the access token is bound to another client certificate")
        jkt = cnf.get("jkt")
        if jkt is not None:
            if not isinstance(jkt, str):
                raise InvalidToken("the access token's cnf claim is malformed")
            self.dpop(token, jkt, dpop_proof, method, url)

    def dpop(
        self, token: str, jkt: str, proof: str | None, method: str | None, url: str | None
    ) -> None:
        """RFC 9449 4.3 and 7.1: the proof of possession of the key the token is bound to."""
        import jwt

        if not proof:
            raise _dpop_error("the access token is bound to a DPoP key: a DPoP proof is required")
        if not method or not url:
            raise ValueError("verify: a DPoP-bound token needs method= and url= of the request")
        try:
            header = dict(jwt.get_unverified_header(proof))
        except jwt.PyJWTError:
            raise _dpop_error("the DPoP proof is malformed") from None
        alg = header.get("alg")
        jwk = header.get("jwk")
        if str(header.get("typ", "")).lower() != "dpop+jwt":
            raise _dpop_error("the DPoP proof's typ is not dpop+jwt")
        if alg not in DPOP_ALGS:
            raise _dpop_error("the DPoP proof's algorithm is not accepted")
        if not isinstance(jwk, dict) or any(m in jwk for m in ("d", "p", "q", "k")):
            raise _dpop_error("the DPoP proof carries no public jwk")
        try:
            key = jwt.PyJWK(jwk, algorithm=alg).key
            claims = jwt.decode(
                proof,
                key,
                algorithms=[alg],
                options={"require": ["iat", "jti", "htm", "htu"], "verify_iat": False},
            )
        except jwt.PyJWTError:
            raise _dpop_error("the DPoP proof's signature or claims are invalid") from None
        if not hmac.compare_digest(jwk_thumbprint(jwk).encode(), jkt.encode("utf-8", "replace")):
            raise _dpop_error("the DPoP proof is signed with another key than the token's")
        if claims.get("htm") != method.upper():
            raise _dpop_error("the DPoP proof is for another method")
        htu = claims.get("htu")
        if not isinstance(htu, str) or _target(htu) is None or _target(htu) != _target(url):
            raise _dpop_error("the DPoP proof is for another URL")
        iat = claims.get("iat")
        now = time.time()
        if not isinstance(iat, int | float) or abs(now - iat) > DPOP_WINDOW_S:
            raise _dpop_error("the DPoP proof is stale")
        ath = _b64url(hashlib.sha256(token.encode("ascii", "replace")).digest())
        if not isinstance(claims.get("ath"), str) or not hmac.compare_digest(
            claims["ath"].encode("utf-8", "replace"), ath.encode()
        ):
            raise _dpop_error("the DPoP proof is for another access token")
        jti = claims.get("jti")
        if not isinstance(jti, str) or not jti:
            raise _dpop_error("the DPoP proof has no jti")
        self._seen_jti(f"{jkt}:{jti}", now)

    def _seen_jti(self, key: str, now: float) -> None:
        """A proof used twice within its window is a replay (RFC 9449 11.1), in this process."""
        with self._caches:
            seen = self._jtis
            until = seen.get(key)
            if until is not None and until > now:
                raise _dpop_error("the DPoP proof was used before")
            if len(seen) >= _JTI_MAX:
                for old in [k for k, t in seen.items() if t <= now] or [next(iter(seen))]:
                    del seen[old]
            seen[key] = now + 2 * DPOP_WINDOW_S

    # -- introspection ------------------------------------------------------------------------
    @staticmethod
    def token_key(token: str) -> str:
        return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()

    def cached_active(self, token: str) -> bool | None:
        with self._caches:
            found = self._active.get(self.token_key(token))
        if found is None or time.monotonic() >= found[0]:
            return None
        return found[1]

    def take_introspection(
        self, token: str, claims: dict[str, Any], status: int, body: bytes
    ) -> None:
        if status != 200:
            raise IssuerUnavailable(f"the issuer's introspection answered {status}")
        try:
            answer = json.loads(body)
        except ValueError:
            raise IssuerUnavailable("the issuer's introspection answer is not JSON") from None
        active = isinstance(answer, dict) and answer.get("active") is True
        lifetime = min(self.introspect_cache_s, max(float(claims.get("exp", 0)) - time.time(), 0))
        with self._caches:
            if len(self._active) >= _INTROSPECT_MAX:
                del self._active[next(iter(self._active))]
            self._active[self.token_key(token)] = (time.monotonic() + lifetime, active)
        self.refuse_inactive(active)

    @staticmethod
    def refuse_inactive(active: bool) -> None:
        if not active:
            raise InvalidToken(
                "the access token is not active (revoked, expired, or not visible to the "
                "introspecting client)"
            )


def _scope_list(scopes: Iterable[str]) -> tuple[str, ...]:
    """Scopes as a list of names, or one space-separated string (``"a b"``, as a token's
    ``scope`` claim writes them), never a string's characters."""
    if isinstance(scopes, str):
        return tuple(scopes.split())
    return tuple(scopes)


def _dpop_error(description: str) -> InvalidToken:
    challenge = (
        f'DPoP error="invalid_dpop_proof", error_description="{_quoted(description)}", '
        f'algs="{" ".join(DPOP_ALGS)}"'
    )
    return InvalidToken(description, www_authenticate=challenge)


def _tls(verify: bool | str | ssl.SSLContext) -> bool | ssl.SSLContext:
    """``verify`` as httpx takes it, a CA bundle's path (a file, or a folder of hashed
    certificates) made a context here (httpx deprecates the path form)."""
    if not isinstance(verify, str):
        return verify
    import os
    import ssl

    if os.path.isdir(verify):
        return ssl.create_default_context(capath=verify)
    return ssl.create_default_context(cafile=verify)


def _http_error(what: str, exc: Exception) -> IssuerUnavailable:
    return IssuerUnavailable(f"the issuer's {what} could not be read: {type(exc).__name__}")


# -- the verifiers ---------------------------------------------------------------------------


class Verifier:
    """Verifies fwrest's access tokens (SPEC 16.4); safe to share between threads.

    ``issuer`` is the tokens' ``iss`` (the issuer fwrest's metadata names), ``audience`` the
    ``aud`` to require (fwrest's: the server section's name; None checks none), ``leeway``
    seconds of clock difference allowed on ``exp``/``nbf``, ``introspect`` a client's
    ``(client_id, secret)`` to ask the introspection route too (a client that sees the tokens:
    one whose ``onAuthparams`` entry lists the scope ``introspect``, or the tokens' own client;
    a token it does not see is refused as not active), ``verify`` as httpx takes it
    (a CA bundle's path, an ``ssl.SSLContext``, True for the system's CAs).

    Nothing is fetched when it is made: the first check reads the metadata and the key set
    (:meth:`discover` does it at once); an issuer without a key set (HS256) raises
    :class:`NoPublicKey` there.
    """

    def __init__(
        self,
        issuer: str,
        *,
        audience: str | Iterable[str] | None = None,
        leeway: float = 30,
        introspect: tuple[str, str] | None = None,
        verify: bool | str | ssl.SSLContext = True,
    ) -> None:
        self._core = _Core(issuer, audience, leeway, introspect)
        self._verify = _tls(verify)
        self._http: httpx.Client | None = None
        self._lock = threading.Lock()

    @property
    def issuer(self) -> str:
        return self._core.issuer

    @property
    def kid_refetch_interval(self) -> float:
        return self._core.kid_refetch_interval

    @kid_refetch_interval.setter
    def kid_refetch_interval(self, seconds: float) -> None:
        self._core.kid_refetch_interval = seconds

    @property
    def introspect_cache_s(self) -> float:
        return self._core.introspect_cache_s

    @introspect_cache_s.setter
    def introspect_cache_s(self, seconds: float) -> None:
        self._core.introspect_cache_s = min(seconds, INTROSPECT_CACHE_S)

    def _client(self) -> httpx.Client:
        if self._http is None:
            import httpx

            self._http = httpx.Client(verify=self._verify, timeout=HTTP_TIMEOUT_S)
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def discover(self) -> None:
        """Read the issuer's metadata and key set now (else at the first check)."""
        with self._lock:
            self._discover()
            self._fetch_keys()

    def _discover(self) -> None:
        import httpx

        if self._core.no_key is not None:
            raise self._core.no_key
        if self._core.jwks_uri is not None:
            return
        try:
            answer = self._client().get(self._core.metadata_url)
        except httpx.HTTPError as exc:
            raise _http_error("metadata", exc) from None
        self._core.take_metadata(answer.status_code, answer.content)

    def _fetch_keys(self) -> None:
        import httpx

        assert self._core.jwks_uri is not None
        try:
            answer = self._client().get(self._core.jwks_uri)
        except httpx.HTTPError as exc:
            self._core.last_fetch = time.monotonic()
            raise _http_error("key set", exc) from None
        self._core.take_keys(
            answer.status_code, answer.content, answer.headers.get("cache-control")
        )

    def _key(self, header: dict[str, Any]) -> tuple[str, Any] | None:
        core = self._core
        if core.keys_stale():
            with self._lock:
                if core.keys_stale():
                    self._discover()
                    try:
                        self._fetch_keys()
                    except IssuerUnavailable:
                        if core.keys is None:
                            raise  # else the stale set serves until the issuer answers
        found = core.key_of(header)
        if found is None and core.may_refetch():
            with self._lock:
                if core.key_of(header) is None and core.may_refetch():
                    self._fetch_keys()  # a key made since (a rotation)
            found = core.key_of(header)
        return found

    def verify(
        self,
        token: str,
        *,
        scopes: Iterable[str] = (),
        dpop_proof: str | None = None,
        method: str | None = None,
        url: str | None = None,
        client_cert: object = None,
    ) -> dict[str, Any]:
        """The claims of a valid token.

        Raises:
            InvalidToken: 401, malformed, badly signed, expired, of another issuer or
                audience, unbound, or revoked; ``www_authenticate`` is the challenge.
            InsufficientScope: 403, a valid token without all of ``scopes``.
            NoPublicKey: the issuer publishes no key (an HS256 port).
            IssuerUnavailable: the issuer could not be asked.
        """
        core = self._core
        if core.jwks_uri is None:
            # an issuer without a key set says so at the first check, whatever the token
            # (SPEC 16.4: NoPublicKey); an issuer that does not answer is said where the
            # token needs its keys
            with self._lock, contextlib.suppress(IssuerUnavailable):
                self._discover()
        header = core.header(token)
        claims = core.claims(token, header, self._key(header))
        core.bindings(token, claims, dpop_proof, method, url, client_cert)
        if core.introspect is not None:
            self._introspect(token, claims)
        core.scopes(claims, scopes)
        return claims

    def _introspect(self, token: str, claims: dict[str, Any]) -> None:
        import httpx

        core = self._core
        cached = core.cached_active(token)
        if cached is not None:
            core.refuse_inactive(cached)
            return
        assert core.introspect is not None and core.introspection_endpoint is not None
        try:
            answer = self._client().post(
                core.introspection_endpoint,
                data={"token": token, "token_type_hint": "access_token"},
                auth=core.introspect,
            )
        except httpx.HTTPError as exc:
            raise _http_error("introspection", exc) from None
        core.take_introspection(token, claims, answer.status_code, answer.content)

    def require(self, scopes: Iterable[str] = ()) -> Callable[..., Awaitable[dict[str, Any]]]:
        """A FastAPI/Starlette dependency giving a request's claims (401/403 otherwise):
        ``claims: dict = Depends(verifier.require(scopes=["orders:read"]))``; in a Starlette
        endpoint, ``claims = await dependency(request)``. The check runs in a worker thread."""
        wanted = _scope_list(scopes)

        async def check(**kwargs: Any) -> dict[str, Any]:
            import anyio.to_thread

            return await anyio.to_thread.run_sync(lambda: self.verify(**kwargs, scopes=wanted))

        return _dependency(check)


class AsyncVerifier:
    """:class:`Verifier` for event-loop code: the same arguments, its methods coroutines."""

    def __init__(
        self,
        issuer: str,
        *,
        audience: str | Iterable[str] | None = None,
        leeway: float = 30,
        introspect: tuple[str, str] | None = None,
        verify: bool | str | ssl.SSLContext = True,
    ) -> None:
        self._core = _Core(issuer, audience, leeway, introspect)
        self._verify = _tls(verify)
        self._http: httpx.AsyncClient | None = None
        self._lock: asyncio.Lock | None = None

    issuer = Verifier.issuer
    kid_refetch_interval = Verifier.kid_refetch_interval
    introspect_cache_s = Verifier.introspect_cache_s

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            import httpx

            self._http = httpx.AsyncClient(verify=self._verify, timeout=HTTP_TIMEOUT_S)
        return self._http

    def _locked(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> AsyncVerifier:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def discover(self) -> None:
        """Read the issuer's metadata and key set now (else at the first check)."""
        async with self._locked():
            await self._discover()
            await self._fetch_keys()

    async def _discover(self) -> None:
        import httpx

        if self._core.no_key is not None:
            raise self._core.no_key
        if self._core.jwks_uri is not None:
            return
        try:
            answer = await self._client().get(self._core.metadata_url)
        except httpx.HTTPError as exc:
            raise _http_error("metadata", exc) from None
        self._core.take_metadata(answer.status_code, answer.content)

    async def _fetch_keys(self) -> None:
        import httpx

        assert self._core.jwks_uri is not None
        try:
            answer = await self._client().get(self._core.jwks_uri)
        except httpx.HTTPError as exc:
            self._core.last_fetch = time.monotonic()
            raise _http_error("key set", exc) from None
        self._core.take_keys(
            answer.status_code, answer.content, answer.headers.get("cache-control")
        )

    async def _key(self, header: dict[str, Any]) -> tuple[str, Any] | None:
        core = self._core
        if core.keys_stale():
            async with self._locked():
                if core.keys_stale():
                    await self._discover()
                    try:
                        await self._fetch_keys()
                    except IssuerUnavailable:
                        if core.keys is None:
                            raise
        found = core.key_of(header)
        if found is None and core.may_refetch():
            async with self._locked():
                if core.key_of(header) is None and core.may_refetch():
                    await self._fetch_keys()
            found = core.key_of(header)
        return found

    async def verify(
        self,
        token: str,
        *,
        scopes: Iterable[str] = (),
        dpop_proof: str | None = None,
        method: str | None = None,
        url: str | None = None,
        client_cert: object = None,
    ) -> dict[str, Any]:
        """:meth:`Verifier.verify`, awaited."""
        core = self._core
        if core.jwks_uri is None:
            async with self._locked():  # as Verifier.verify
                with contextlib.suppress(IssuerUnavailable):
                    await self._discover()
        header = core.header(token)
        claims = core.claims(token, header, await self._key(header))
        core.bindings(token, claims, dpop_proof, method, url, client_cert)
        if core.introspect is not None:
            await self._introspect(token, claims)
        core.scopes(claims, scopes)
        return claims

    async def _introspect(self, token: str, claims: dict[str, Any]) -> None:
        import httpx

        core = self._core
        cached = core.cached_active(token)
        if cached is not None:
            core.refuse_inactive(cached)
            return
        assert core.introspect is not None and core.introspection_endpoint is not None
        try:
            answer = await self._client().post(
                core.introspection_endpoint,
                data={"token": token, "token_type_hint": "access_token"},
                auth=core.introspect,
            )
        except httpx.HTTPError as exc:
            raise _http_error("introspection", exc) from None
        core.take_introspection(token, claims, answer.status_code, answer.content)

    def require(self, scopes: Iterable[str] = ()) -> Callable[..., Awaitable[dict[str, Any]]]:
        """:meth:`Verifier.require`, checked on the event loop."""
        wanted = _scope_list(scopes)

        async def check(**kwargs: Any) -> dict[str, Any]:
            return await self.verify(**kwargs, scopes=wanted)

        return _dependency(check)


# -- adapters --------------------------------------------------------------------------------

_Check = Callable[..., Awaitable[dict[str, Any]]]


def _credentials(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str | None, str | None, bool]:
    """(token, DPoP proof, whether the scheme was DPoP) of a request's raw headers."""
    authorization = proof = None
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"authorization":
            if authorization is not None:
                return None, None, False  # repeated: refused as missing
            authorization = value.decode("latin-1")
        elif lowered == b"dpop":
            proof = value.decode("latin-1")
    if authorization is None:
        return None, proof, False
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() not in ("bearer", "dpop") or not token or " " in token:
        return None, proof, False
    return token, proof, scheme.lower() == "dpop"


def _request_url(scope: MutableMapping[str, Any]) -> str:
    """The URL a client used, as RFC 9449 ``htu`` names it (no query)."""
    scheme = scope.get("scheme", "http")
    host = None
    for name, value in scope.get("headers", ()):
        if name.lower() == b"host":
            host = value.decode("latin-1")
            break
    if host is None:
        server = scope.get("server") or ("localhost", None)
        host = server[0] if server[1] is None else f"{server[0]}:{server[1]}"
    # the full path: servers and frameworks now keep root_path in path (uvicorn, a Starlette
    # Mount); one that does not gets it prepended
    path, root = scope.get("path", "/"), scope.get("root_path", "")
    if root and not path.startswith(root):
        path = root + path
    return f"{scheme}://{host}{path}"


def _peer_cert(scope: MutableMapping[str, Any]) -> object:
    """The client certificate of the connection where the server reports it (the ASGI TLS
    extension), else None."""
    tls = (scope.get("extensions") or {}).get("tls") or {}
    chain = tls.get("client_cert_chain") or ()
    return chain[0] if chain else None


async def _check_scope(check: _Check, scope: MutableMapping[str, Any]) -> dict[str, Any]:
    token, proof, dpop = _credentials(scope.get("headers", ()))
    if token is None:
        raise InvalidToken("an access token is required", www_authenticate="Bearer")
    claims = await check(
        token=token,
        dpop_proof=proof,
        method=scope.get("method", "GET"),
        url=_request_url(scope),
        client_cert=_peer_cert(scope),
    )
    cnf = claims.get("cnf")
    if dpop != (isinstance(cnf, dict) and "jkt" in cnf):
        # RFC 9449 7.1: a DPoP-bound token goes with the DPoP scheme, only it
        raise InvalidToken("the access token is sent with the wrong authorization scheme")
    return claims


def _dependency(check: _Check) -> Callable[..., Awaitable[dict[str, Any]]]:
    import inspect

    from starlette.exceptions import HTTPException
    from starlette.requests import HTTPConnection

    async def dependency(request: HTTPConnection) -> dict[str, Any]:
        try:
            return await _check_scope(check, request.scope)
        except (InvalidToken, InsufficientScope, IssuerUnavailable) as exc:
            headers = {"WWW-Authenticate": exc.www_authenticate} if exc.www_authenticate else None
            raise HTTPException(exc.status, exc.description, headers=headers) from None

    # FastAPI reads the parameter's type to hand it the request (this module's annotations
    # are strings it could not resolve)
    dependency.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                "request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=HTTPConnection
            )
        ],
        return_annotation=dict,
    )
    return dependency


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class VerifyMiddleware:
    """An ASGI middleware: every HTTP request (and WebSocket) needs a valid token, whose claims
    it puts in ``scope["fwrest.claims"]``; otherwise it answers 401 or 403 with the RFC 6750
    challenge and a JSON body ``{"detail": ...}`` (a WebSocket is closed with 1008)."""

    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        *,
        verifier: Verifier | AsyncVerifier,
        scopes: Iterable[str] = (),
    ) -> None:
        self.app = app
        wanted = _scope_list(scopes)
        if isinstance(verifier, AsyncVerifier):

            async def check(**kwargs: Any) -> dict[str, Any]:
                return await verifier.verify(**kwargs, scopes=wanted)

        else:

            async def check(**kwargs: Any) -> dict[str, Any]:
                import anyio.to_thread

                return await anyio.to_thread.run_sync(
                    lambda: verifier.verify(**kwargs, scopes=wanted)
                )

        self._check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        try:
            claims = await _check_scope(self._check, scope)
        except (InvalidToken, InsufficientScope, IssuerUnavailable) as exc:
            await _refuse(scope, receive, send, exc)
            return
        scope["fwrest.claims"] = claims
        await self.app(scope, receive, send)


async def _refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    exc: InvalidToken | InsufficientScope | IssuerUnavailable,
) -> None:
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008})
        return
    body = json.dumps({"detail": exc.description}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if exc.www_authenticate:
        headers.append((b"www-authenticate", exc.www_authenticate.encode("latin-1", "replace")))
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
