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
A DPoP proof is remembered until it leaves its window, never sooner (``dpop_cache_size``, then
:class:`ReplayCacheFull`).
Each fetch's whole answer comes within ``timeout`` seconds (5) or is given up, one at a time,
and a failed one is not tried again for a back-off of 5-30 s (a stale set serving meanwhile,
15 minutes past its max-age at most; docs/verifying-tokens.md).
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
import heapq
import hmac
import json
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = [
    "AsyncVerifier",
    "InsufficientScope",
    "InvalidToken",
    "IssuerUnavailable",
    "NoPublicKey",
    "ReplayCacheFull",
    "Verifier",
    "VerifyMiddleware",
]

WELL_KNOWN = "/.well-known/oauth-authorization-server"  # RFC 8414 3.1
KID_REFETCH_S = 60.0  # SPEC 16.4: an unknown kid fetches the set unless one was fetched since
INTROSPECT_CACHE_S = 30.0  # SPEC 16.4: an introspection answer is remembered at most this long
DEFAULT_MAX_AGE_S = 300.0  # a key set answered without Cache-Control max-age
MAX_AGE_CAP_S = 86400.0  # a key set is fetched again at least daily, whatever it says
HTTP_TIMEOUT_S = 5.0  # one fetch's whole answer (connection, headers and body) within this
MAX_BODY = 1 << 20  # bytes of a metadata, key set or introspection answer read at most
RETRY_FIRST_S = 5.0  # after a failed fetch, none again for this long, doubled each failure...
RETRY_MAX_S = 30.0  # ...up to this (docs/decisions.md, "fwrest.verify")
STALE_GRACE_S = 900.0  # a stale key set serves this long past its max-age, the issuer unreachable
DPOP_WINDOW_S = 60.0  # a DPoP proof's iat within this of now (SPEC 16.2)
SIGNING_ALGS = ("ES256", "EdDSA", "RS256")  # fwrest's public-key algorithms (SPEC 12.1)
DPOP_ALGS = SIGNING_ALGS  # a DPoP proof's (SPEC 16.2)
_INTROSPECT_MAX = 10_000  # introspection answers remembered (oldest dropped)
DPOP_CACHE_SIZE = 100_000  # DPoP proofs remembered within their window at most (then 503)
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
    """A valid token without the scopes asked for: 403 (RFC 6750 3.1), challenged with the
    ``DPoP`` scheme for a DPoP-bound token (RFC 9449 7.1)."""

    status = 403

    def __init__(self, scopes: Iterable[str], *, dpop: bool = False) -> None:
        self.scopes = tuple(scopes)
        wanted = " ".join(self.scopes)
        super().__init__(f"the access token lacks the scope {wanted}")
        self.description = str(self)
        self.www_authenticate = (
            f'{"DPoP" if dpop else "Bearer"} error="insufficient_scope", '
            f'scope="{_quoted(wanted)}", error_description="{_quoted(self.description)}"'
        )
        if dpop:
            self.www_authenticate += f', algs="{" ".join(DPOP_ALGS)}"'


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


class ReplayCacheFull(IssuerUnavailable):
    """A DPoP proof that cannot be recorded: the verifier already remembers
    ``dpop_cache_size`` proofs still within their window (RFC 9449 11.1). 503, as
    :class:`IssuerUnavailable`: the proof is neither accepted nor refused, and a fresh one is
    accepted once older proofs leave their window (at most 60 s later)."""


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


_MAX_JTI = 256  # characters, as fwrest's own check (auth/oauth2/dpop.py MAX_JTI)


def _target(url: str) -> tuple[str, str, str] | None:
    """(scheme, authority, path) of a URL, folded and without query or fragment, its path as
    fwrest's router reads it (:func:`_route_path`; fwrest's own check compares ``htu`` so:
    RFC 9449 4.3, RFC 3986 6.2.2 and 6.2.3); None for a URL that does not parse or a path
    that names no route."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    path = _route_path(parts.path or "/")
    if path is None:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    default = {"https": 443, "http": 80}.get(scheme)
    authority = host if port in (None, default) else f"{host}:{port}"
    return scheme, authority, path


# what fwrest's router refuses in a target's path: a bad escape; an encoded slash, backslash
# or NUL; a control character
_NO_ROUTE_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})|%(?:2[Ff]|5[Cc]|00)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _route_path(path: str) -> str | None:
    """``path`` as fwrest's router reads a target (``fwrest.routing.paths.normalise_path``,
    which this module does not import: it loads nothing of the server; the two must agree):
    percent escapes decoded, empty and ``.`` segments dropped, ``..`` applied, no trailing
    slash; None where the router finds no route (a bad escape, an encoded slash, a control
    character, invalid UTF-8, ``..`` above ``/``).

    >>> _route_path("/rest//x/../%77hoami/"), _route_path("/a/../../b"), _route_path("/a%2Fb")
    ('/rest/whoami', None, None)
    """
    if "%" in path:
        if _NO_ROUTE_ESCAPE.search(path):
            return None
        try:
            path = unquote(path, errors="strict")
        except UnicodeDecodeError:
            return None
    if _CONTROL.search(path):
        return None
    segments: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not segments:
                return None
            segments.pop()
            continue
        segments.append(seg)
    return "/" + "/".join(segments)


@dataclass(frozen=True, slots=True)
class _Keys:
    """A fetched key set: kid -> (algorithm, key), and when it goes stale (monotonic)."""

    by_kid: dict[str, tuple[str, Any]]
    stale_at: float


@dataclass(frozen=True, slots=True)
class _Answer:
    """An issuer's whole answer, read within its deadline."""

    status: int
    body: bytes
    cache_control: str | None


class _Backoff:
    """After a failed fetch, none again for a while (5 s, doubled each failure in a row, up
    to 30 s): calls meanwhile get the failure's answer at once, not a wait each."""

    __slots__ = ("error", "failures", "first", "most", "until")

    def __init__(self) -> None:
        self.failures = 0
        self.until = float("-inf")  # monotonic
        self.error: IssuerUnavailable | None = None
        self.first = RETRY_FIRST_S  # settable (tests shorten them)
        self.most = RETRY_MAX_S

    def active(self) -> IssuerUnavailable | None:
        """The last failure while its back-off runs, else None."""
        if self.error is not None and time.monotonic() < self.until:
            return self.error
        return None

    def failed(self, error: IssuerUnavailable) -> None:
        self.failures += 1
        delay = min(self.first * 2 ** min(self.failures - 1, 16), self.most)
        self.until = time.monotonic() + delay
        self.error = error

    def succeeded(self) -> None:
        self.failures = 0
        self.until = float("-inf")
        self.error = None


class _Fetch:
    """One fetch of the metadata (when not known yet) and the key set, in flight: the callers
    that need it wait for it, none longer than its deadline."""

    __slots__ = ("deadline", "done", "error", "settled", "step", "task")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline  # monotonic
        self.step = "key set"  # what it reads now (its error's words)
        self.settled = False
        self.error: IssuerUnavailable | NoPublicKey | None = None
        self.done = threading.Event()  # a Verifier's
        self.task: asyncio.Future[None] | None = None  # an AsyncVerifier's

    def outcome(self, serve_stale: bool) -> None:
        """Raise the fetch's failure to a caller that cannot do without it (``NoPublicKey``
        always; ``IssuerUnavailable`` unless the set held may serve)."""
        if self.error is not None and (isinstance(self.error, NoPublicKey) or not serve_stale):
            raise self.error


def _late(what: str, timeout: float) -> IssuerUnavailable:
    return IssuerUnavailable(f"the issuer's {what} was not read within {timeout:g} s")


def _too_large(what: str) -> IssuerUnavailable:
    return IssuerUnavailable(f"the issuer's {what} is larger than {MAX_BODY} bytes")


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
        if parts.scheme != "https" or not parts.hostname:
            # RFC 8414 2, SPEC 12.2: an issuer, and so every iss fwrest writes, is https
            raise ValueError(
                f"Verifier: issuer {issuer!r} is not an https URL (the tokens' iss, "
                "https://host[:port]/path)"
            )
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
        self.last_fetch = float("-inf")  # monotonic: the key set's last fetch (its start)
        # settable on an instance (tests shorten them; SPEC 9's rule for deadlines)
        self.kid_refetch_interval = KID_REFETCH_S
        self.introspect_cache_s = INTROSPECT_CACHE_S
        self.timeout = HTTP_TIMEOUT_S
        self.stale_grace_s = STALE_GRACE_S
        self.max_age = MAX_AGE_CAP_S  # keys_max_age
        self.key_backoff = _Backoff()  # the metadata and key set's
        self.introspect_backoff = _Backoff()
        self._active: dict[str, tuple[float, bool]] = {}
        # DPoP proofs seen: id -> when its window ends (time.time()); the heap orders them so
        self._jtis: dict[bytes, float] = {}
        self._jti_ends: list[tuple[float, bytes]] = []
        self.dpop_cache_size = DPOP_CACHE_SIZE
        self._caches = threading.Lock()  # the caches above, shared by a Verifier's threads
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

    def parse_keys(self, status: int, body: bytes, cache_control: str | None) -> _Keys:
        import jwt

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
        return _Keys(by_kid, time.monotonic() + min(_max_age(cache_control), self.max_age))

    def settle(self, keys: _Keys | None, error: Exception | None) -> None:
        """A fetch's outcome: the new set, or a failure's back-off (NoPublicKey is kept as
        ``no_key`` for good)."""
        if keys is not None:
            self.keys = keys
            self.key_backoff.succeeded()
        elif isinstance(error, IssuerUnavailable):
            self.key_backoff.failed(error)

    def fetch_needed(self, serve_stale: bool) -> bool:
        """Whether a fetch starts now (none is in flight): not while the last failure's
        back-off runs, when the set held may serve (False) or its failure is raised; a port
        without a public key raises ``NoPublicKey``."""
        if self.no_key is not None:
            raise self.no_key
        failed = self.key_backoff.active()
        if failed is not None:
            if serve_stale:
                return False
            raise failed
        return True

    def start_fetch(self) -> _Fetch:
        self.last_fetch = time.monotonic()
        fetch = _Fetch(self.last_fetch + self.timeout)
        if self.jwks_uri is None:
            fetch.step = "metadata"
        return fetch

    def keys_stale(self) -> bool:
        return self.keys is None or time.monotonic() >= self.keys.stale_at

    def stale_usable(self) -> bool:
        """Whether the set held may serve when it cannot be fetched again: until
        ``stale_grace_s`` (15 minutes) past its max-age."""
        return self.keys is not None and time.monotonic() < self.keys.stale_at + self.stale_grace_s

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
        if missing:  # a bound token came with its proof (bindings): the DPoP scheme
            raise InsufficientScope(wanted, dpop=_dpop_bound(claims))

    def bindings(
        self,
        token: str,
        claims: dict[str, Any],
        dpop_proof: str | Sequence[str] | None,
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
        self,
        token: str,
        jkt: str,
        proofs: str | Sequence[str] | None,
        method: str | None,
        url: str | None,
    ) -> None:
        """RFC 9449 4.3 and 7.1: the proof of possession of the key the token is bound to."""
        import jwt

        if proofs is None or isinstance(proofs, str):
            given = proofs or ""
        else:  # the values of every DPoP header line of the request
            lines = list(proofs)
            if len(lines) > 1:  # RFC 9449 4.3 (1)
                raise _dpop_error("the request carries more than one DPoP proof")
            given = lines[0] if lines else ""
        if not isinstance(given, str) or not given.strip():
            raise _ProofMissing(
                _dpop_error("the access token is bound to a DPoP key: a DPoP proof is required")
            )
        if "," in given:  # two header lines joined into one value (RFC 9110 5.3)
            raise _dpop_error("the request carries more than one DPoP proof")
        proof = given.strip()
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
        # a blank jti names no proof (each client would share it), as fwrest's check says
        if not isinstance(jti, str) or not jti.strip() or len(jti) > _MAX_JTI:
            raise _dpop_error("the DPoP proof's jti is missing or malformed")
        proof_id = hashlib.sha256(f"{jkt}\n{jti}".encode("utf-8", "replace")).digest()
        # accepted until its iat leaves the window (+1 s: the clock read here and there)
        self._seen_jti(proof_id, float(iat) + DPOP_WINDOW_S + 1.0, now)

    def _seen_jti(self, proof_id: bytes, until: float, now: float) -> None:
        """A proof used twice within its window is a replay (RFC 9449 11.1), in this process.
        Each is remembered for as long as it would be accepted, never forgotten sooner: with
        ``dpop_cache_size`` of them still in their window, a new proof is ReplayCacheFull."""
        with self._caches:
            seen, ends = self._jtis, self._jti_ends
            while ends and ends[0][0] <= now:  # the proofs whose window has ended
                end, old = heapq.heappop(ends)
                if seen.get(old) == end:
                    del seen[old]
            if proof_id in seen:
                raise _dpop_error("the DPoP proof was used before")
            if len(seen) >= self.dpop_cache_size:
                raise ReplayCacheFull(
                    f"the DPoP proof cannot be recorded: {len(seen)} proofs are within their "
                    f"{DPOP_WINDOW_S:g} s window (dpop_cache_size); try again with a new proof"
                )
            seen[proof_id] = until
            heapq.heappush(ends, (until, proof_id))

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
    ) -> bool:
        """Whether the token is active (remembered); IssuerUnavailable for no answer."""
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
        return active

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


class _ProofMissing(InvalidToken):
    """A DPoP-bound token checked without a proof (``invalid_dpop_proof``); the adapters
    answer a request that sent it with the ``Bearer`` scheme as fwrest's bearer check does."""

    def __init__(self, refused: InvalidToken) -> None:
        super().__init__(refused.description, www_authenticate=refused.www_authenticate)


def _dpop_error(description: str, error: str = "invalid_dpop_proof") -> InvalidToken:
    challenge = (
        f'DPoP error="{error}", error_description="{_quoted(description)}", '
        f'algs="{" ".join(DPOP_ALGS)}"'
    )
    return InvalidToken(description, www_authenticate=challenge)


def _dpop_bound(claims: dict[str, Any] | None) -> bool:
    cnf = claims.get("cnf") if claims is not None else None
    return isinstance(cnf, dict) and "jkt" in cnf


def _in_scheme(exc: InvalidToken, dpop: bool) -> InvalidToken:
    """RFC 9449 7.1: the refusal of a DPoP request (a proof given, the ``DPoP`` scheme) or of
    a DPoP-bound token challenges with ``DPoP``, whatever was wrong (an expired or inactive
    token, an unknown key, the certificate), as fwrest's own bearer check does."""
    if not dpop or not exc.www_authenticate.startswith("Bearer "):
        return exc
    return _dpop_error(exc.description, "invalid_token")


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
        self._lock = threading.Lock()  # the fetch in flight; never held across I/O
        self._closed = False
        self._fetch: _Fetch | None = None

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

    @property
    def dpop_cache_size(self) -> int:
        """How many DPoP proofs still within their window are remembered at most (100,000):
        a proof is never forgotten while it would be accepted (RFC 9449 11.1), so with that
        many a new one raises :class:`ReplayCacheFull` (503) until older ones leave their
        window (60 s after their ``iat``). About 200 bytes each."""
        return self._core.dpop_cache_size

    @dpop_cache_size.setter
    def dpop_cache_size(self, proofs: int) -> None:
        if not 1 <= proofs <= 10_000_000:
            raise ValueError("Verifier: dpop_cache_size must be 1-10,000,000 proofs")
        self._core.dpop_cache_size = proofs

    @property
    def timeout(self) -> float:
        """Seconds for the whole answer of one fetch (metadata and key set together, or an
        introspection): 5 by default."""
        return self._core.timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        if not 0 < seconds <= 60:
            raise ValueError("Verifier: timeout must be 0-60 seconds")
        self._core.timeout = seconds

    @property
    def keys_max_age(self) -> float:
        """The longest the key set is kept, whatever its ``Cache-Control`` says (a day by
        default; fwrest's says 300 s): lower it to bound how long a key that fwrest's operator
        removed (after a leak) is still accepted here. It counts from the next fetch."""
        return self._core.max_age

    @keys_max_age.setter
    def keys_max_age(self, seconds: float) -> None:
        if not 0 <= seconds <= MAX_AGE_CAP_S:
            raise ValueError("Verifier: keys_max_age must be 0-86400 seconds")
        self._core.max_age = seconds

    def _client(self) -> httpx.Client:
        http = self._http
        if http is None:
            import httpx

            with self._lock:  # one client, whichever thread asks first
                if self._closed:  # a fetch thread outliving close() makes none to leak
                    raise IssuerUnavailable("the verifier was closed")
                if self._http is None:
                    self._http = httpx.Client(verify=self._verify, timeout=HTTP_TIMEOUT_S)
                http = self._http
        return http

    def close(self) -> None:
        """Close the verifier's connections; a closed verifier fetches no more (its keys
        held still check tokens, a fetch raises :class:`IssuerUnavailable`)."""
        with self._lock:
            self._closed = True
            http, self._http = self._http, None
        if http is not None:
            http.close()

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def discover(self) -> None:
        """Read the issuer's metadata and key set now (else at the first check)."""
        self._refresh(serve_stale=False)

    def _get(self, what: str, url: str, deadline: float, **post: Any) -> _Answer:
        """The whole answer to a GET (a POST with ``post``), body and all, by ``deadline``
        (a read waits no longer than what was left when it began: the caller stops waiting at
        the deadline, this thread a read later at most)."""
        import httpx

        left = deadline - time.monotonic()
        if left <= 0:
            raise _late(what, self._core.timeout)
        try:
            with self._client().stream(
                "POST" if post else "GET", url, timeout=left, **post
            ) as answer:
                body = bytearray()
                for chunk in answer.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY:
                        raise _too_large(what)
                    if time.monotonic() > deadline:
                        raise _late(what, self._core.timeout)
                return _Answer(answer.status_code, bytes(body), answer.headers.get("cache-control"))
        except httpx.TimeoutException:
            raise _late(what, self._core.timeout) from None
        except httpx.HTTPError as exc:
            raise _http_error(what, exc) from None

    def _refresh(self, *, serve_stale: bool) -> None:
        """Fetch the key set (the metadata first when not read yet), or wait for the fetch
        another thread is making, never past its deadline. ``serve_stale``: the set held may
        serve if the fetch fails, and does meanwhile when another thread fetches. Raises the
        fetch's failure (``IssuerUnavailable``) when nothing may serve, at once while the
        back-off of the last failure runs; ``NoPublicKey``."""
        core = self._core
        with self._lock:  # never held across I/O
            fetch = self._fetch
            if fetch is None:
                if not core.fetch_needed(serve_stale):
                    return
                fetch = self._fetch = core.start_fetch()
                threading.Thread(
                    target=self._run, args=(fetch,), name="fwrest-verify-fetch", daemon=True
                ).start()
            elif serve_stale:
                return  # another thread fetches; the set held serves meanwhile
        if not fetch.done.wait(max(fetch.deadline - time.monotonic(), 0.0)):
            self._settle(fetch, None, _late(fetch.step, core.timeout))
        fetch.outcome(serve_stale)

    def _run(self, fetch: _Fetch) -> None:
        """A fetch, in a thread of its own: its callers stop waiting at its deadline even when
        a read has not returned."""
        core = self._core
        keys: _Keys | None = None
        error: IssuerUnavailable | NoPublicKey | None = None
        try:
            if core.jwks_uri is None:
                fetch.step = "metadata"
                meta = self._get("metadata", core.metadata_url, fetch.deadline)
                core.take_metadata(meta.status, meta.body)
                fetch.step = "key set"
            assert core.jwks_uri is not None
            answer = self._get("key set", core.jwks_uri, fetch.deadline)
            keys = core.parse_keys(answer.status, answer.body, answer.cache_control)
        except (IssuerUnavailable, NoPublicKey) as exc:
            error = exc
        except Exception as exc:  # never a waiter left without an answer
            error = _http_error(fetch.step, exc)
        self._settle(fetch, keys, error)

    def _settle(
        self, fetch: _Fetch, keys: _Keys | None, error: IssuerUnavailable | NoPublicKey | None
    ) -> None:
        """The first outcome of a fetch counts (its answer, or its deadline passing)."""
        with self._lock:
            if fetch.settled:
                return
            fetch.settled = True
            fetch.error = error
            self._core.settle(keys, error)
            if self._fetch is fetch:
                self._fetch = None
            fetch.done.set()

    def _key(self, header: dict[str, Any]) -> tuple[str, Any] | None:
        core = self._core
        if core.keys_stale():
            # a stale set serves while the issuer cannot be read, up to stale_grace_s
            self._refresh(serve_stale=core.stale_usable())
        found = core.key_of(header)
        if found is None and (self._fetch is not None or core.may_refetch()):
            self._refresh(serve_stale=False)  # a key made since (a rotation)
            found = core.key_of(header)
        return found

    def verify(
        self,
        token: str,
        *,
        scopes: Iterable[str] = (),
        dpop_proof: str | Sequence[str] | None = None,
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
            IssuerUnavailable: the issuer could not be asked; its ``ReplayCacheFull``: the
                DPoP proof could not be recorded (``dpop_cache_size`` proofs in their window).

        ``dpop_proof`` is the request's ``DPoP`` header: the value of each of its lines (a
        list; more than one is refused, RFC 9449 4.3), or one string (refused when it joins
        two lines with a comma).
        """
        core = self._core
        if core.jwks_uri is None:
            # an issuer without a key set says so at the first check, whatever the token
            # (SPEC 16.4: NoPublicKey); an issuer that does not answer is said where the
            # token needs its keys (by the failure's back-off: the issuer is asked once)
            with contextlib.suppress(IssuerUnavailable):
                self._refresh(serve_stale=False)
        claims: dict[str, Any] | None = None
        try:
            header = core.header(token)
            claims = core.claims(token, header, self._key(header))
            core.bindings(token, claims, dpop_proof, method, url, client_cert)
            if core.introspect is not None:
                self._introspect(token, claims)
        except InvalidToken as exc:
            raise _in_scheme(exc, dpop_proof is not None or _dpop_bound(claims)) from None
        core.scopes(claims, scopes)
        return claims

    def _introspect(self, token: str, claims: dict[str, Any]) -> None:
        core = self._core
        cached = core.cached_active(token)
        if cached is not None:
            core.refuse_inactive(cached)
            return
        failed = core.introspect_backoff.active()
        if failed is not None:
            raise failed
        assert core.introspect is not None and core.introspection_endpoint is not None
        endpoint, auth = core.introspection_endpoint, core.introspect
        deadline = time.monotonic() + core.timeout
        box: list[_Answer | Exception] = []
        done = threading.Event()

        def ask() -> None:
            try:
                box.append(
                    self._get(
                        "introspection",
                        endpoint,
                        deadline,
                        data={"token": token, "token_type_hint": "access_token"},
                        auth=auth,
                    )
                )
            except Exception as exc:
                box.append(exc)
            finally:
                done.set()

        # in a thread of its own, so that this check waits no longer than the deadline
        threading.Thread(target=ask, name="fwrest-verify-introspect", daemon=True).start()
        try:
            if not done.wait(max(deadline - time.monotonic(), 0.0)):
                raise _late("introspection", core.timeout)
            answer = box[0]
            if isinstance(answer, IssuerUnavailable):
                raise answer
            if isinstance(answer, Exception):
                raise _http_error("introspection", answer)
            active = core.take_introspection(token, claims, answer.status, answer.body)
        except IssuerUnavailable as exc:
            core.introspect_backoff.failed(exc)
            raise
        core.introspect_backoff.succeeded()
        core.refuse_inactive(active)

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
        self._fetch: _Fetch | None = None  # the fetch in flight
        self._tasks: set[asyncio.Future[None]] = set()

    issuer = Verifier.issuer
    kid_refetch_interval = Verifier.kid_refetch_interval
    introspect_cache_s = Verifier.introspect_cache_s
    timeout = Verifier.timeout
    keys_max_age = Verifier.keys_max_age
    dpop_cache_size = Verifier.dpop_cache_size

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            import httpx

            self._http = httpx.AsyncClient(verify=self._verify, timeout=HTTP_TIMEOUT_S)
        return self._http

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
        await self._refresh(serve_stale=False)

    async def _get(self, what: str, url: str, deadline: float, **post: Any) -> _Answer:
        """:meth:`Verifier._get`, the whole answer cancelled at the deadline."""
        import httpx

        left = deadline - time.monotonic()
        if left <= 0:
            raise _late(what, self._core.timeout)
        try:
            async with asyncio.timeout(left):
                async with self._client().stream(
                    "POST" if post else "GET", url, timeout=left, **post
                ) as answer:
                    body = bytearray()
                    async for chunk in answer.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_BODY:
                            raise _too_large(what)
                    return _Answer(
                        answer.status_code, bytes(body), answer.headers.get("cache-control")
                    )
        except (TimeoutError, httpx.TimeoutException):
            raise _late(what, self._core.timeout) from None
        except httpx.HTTPError as exc:
            raise _http_error(what, exc) from None

    async def _refresh(self, *, serve_stale: bool) -> None:
        """:meth:`Verifier._refresh`: the fetch is a task of its own, which the coroutines that
        need it wait for until its deadline (one of them cancelled leaves it running)."""
        core = self._core
        fetch = self._fetch
        if fetch is not None and (
            fetch.task is None or fetch.task.get_loop() is not asyncio.get_running_loop()
        ):
            self._abandon(fetch)  # of a loop now gone: no answer, no back-off
            fetch = None
        if fetch is None:
            if not core.fetch_needed(serve_stale):
                return
            fetch = self._fetch = core.start_fetch()
            task = asyncio.ensure_future(self._run(fetch))
            self._tasks.add(task)  # held until done (the loop keeps only a weak reference)
            task.add_done_callback(self._tasks.discard)
            fetch.task = task
        elif serve_stale:
            return  # another coroutine fetches; the set held serves meanwhile
        assert fetch.task is not None
        await asyncio.wait({fetch.task}, timeout=max(fetch.deadline - time.monotonic(), 0.0))
        if not fetch.settled:
            self._settle(fetch, None, _late(fetch.step, core.timeout))
        fetch.outcome(serve_stale)

    async def _run(self, fetch: _Fetch) -> None:
        core = self._core
        keys: _Keys | None = None
        error: IssuerUnavailable | NoPublicKey | None = None
        try:
            if core.jwks_uri is None:
                fetch.step = "metadata"
                meta = await self._get("metadata", core.metadata_url, fetch.deadline)
                core.take_metadata(meta.status, meta.body)
                fetch.step = "key set"
            assert core.jwks_uri is not None
            answer = await self._get("key set", core.jwks_uri, fetch.deadline)
            keys = core.parse_keys(answer.status, answer.body, answer.cache_control)
        except (IssuerUnavailable, NoPublicKey) as exc:
            error = exc
        except asyncio.CancelledError:
            self._abandon(fetch)  # the loop closing: not the issuer's failure, no back-off
            raise
        except Exception as exc:  # never a waiter left without an answer
            error = _http_error(fetch.step, exc)
        self._settle(fetch, keys, error)

    def _abandon(self, fetch: _Fetch) -> None:
        if not fetch.settled:
            fetch.settled = True
            fetch.error = IssuerUnavailable(f"the issuer's {fetch.step} fetch was cancelled")
            if self._fetch is fetch:
                self._fetch = None

    def _settle(
        self, fetch: _Fetch, keys: _Keys | None, error: IssuerUnavailable | NoPublicKey | None
    ) -> None:
        if fetch.settled:
            return
        fetch.settled = True
        fetch.error = error
        self._core.settle(keys, error)
        if self._fetch is fetch:
            self._fetch = None

    async def _key(self, header: dict[str, Any]) -> tuple[str, Any] | None:
        core = self._core
        if core.keys_stale():
            await self._refresh(serve_stale=core.stale_usable())
        found = core.key_of(header)
        if found is None and (self._fetch is not None or core.may_refetch()):
            await self._refresh(serve_stale=False)
            found = core.key_of(header)
        return found

    async def verify(
        self,
        token: str,
        *,
        scopes: Iterable[str] = (),
        dpop_proof: str | Sequence[str] | None = None,
        method: str | None = None,
        url: str | None = None,
        client_cert: object = None,
    ) -> dict[str, Any]:
        """:meth:`Verifier.verify`, awaited."""
        core = self._core
        if core.jwks_uri is None:
            with contextlib.suppress(IssuerUnavailable):  # as Verifier.verify
                await self._refresh(serve_stale=False)
        claims: dict[str, Any] | None = None
        try:
            header = core.header(token)
            claims = core.claims(token, header, await self._key(header))
            core.bindings(token, claims, dpop_proof, method, url, client_cert)
            if core.introspect is not None:
                await self._introspect(token, claims)
        except InvalidToken as exc:  # as Verifier.verify
            raise _in_scheme(exc, dpop_proof is not None or _dpop_bound(claims)) from None
        core.scopes(claims, scopes)
        return claims

    async def _introspect(self, token: str, claims: dict[str, Any]) -> None:
        core = self._core
        cached = core.cached_active(token)
        if cached is not None:
            core.refuse_inactive(cached)
            return
        failed = core.introspect_backoff.active()
        if failed is not None:
            raise failed
        assert core.introspect is not None and core.introspection_endpoint is not None
        try:
            answer = await self._get(
                "introspection",
                core.introspection_endpoint,
                time.monotonic() + core.timeout,
                data={"token": token, "token_type_hint": "access_token"},
                auth=core.introspect,
            )
            active = core.take_introspection(token, claims, answer.status, answer.body)
        except IssuerUnavailable as exc:
            core.introspect_backoff.failed(exc)
            raise
        core.introspect_backoff.succeeded()
        core.refuse_inactive(active)

    def require(self, scopes: Iterable[str] = ()) -> Callable[..., Awaitable[dict[str, Any]]]:
        """:meth:`Verifier.require`, checked on the event loop."""
        wanted = _scope_list(scopes)

        async def check(**kwargs: Any) -> dict[str, Any]:
            return await self.verify(**kwargs, scopes=wanted)

        return _dependency(check)


# -- adapters --------------------------------------------------------------------------------

_Check = Callable[..., Awaitable[dict[str, Any]]]


def _credentials(
    headers: Iterable[tuple[bytes, bytes]],
) -> tuple[str | None, list[str], bool]:
    """(token, the DPoP header lines' values, whether the scheme was DPoP) of a request's raw
    headers (every DPoP line: two are refused, RFC 9449 4.3)."""
    authorization = None
    proofs: list[str] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"authorization":
            if authorization is not None:
                return None, proofs, False  # repeated: refused as missing
            authorization = value.decode("latin-1")
        elif lowered == b"dpop":
            proofs.append(value.decode("latin-1"))
    if authorization is None:
        return None, proofs, False
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() not in ("bearer", "dpop") or not token or " " in token:
        return None, proofs, False
    return token, proofs, scheme.lower() == "dpop"


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
    token, proofs, dpop = _credentials(scope.get("headers", ()))
    if token is None:
        raise InvalidToken("an access token is required", www_authenticate="Bearer")
    try:
        claims = await check(
            token=token,
            dpop_proof=proofs or None,  # none sent: no proof (a Bearer request)
            method=scope.get("method", "GET"),
            url=_request_url(scope),
            client_cert=_peer_cert(scope),
        )
    except _ProofMissing:
        if dpop:
            raise
        # a DPoP-bound token as a bearer token: the scheme is wrong, as fwrest's bearer
        # check says it (RFC 9449 7.1)
        why = "the access token is DPoP-bound: send it as Authorization: DPoP with a proof"
        raise _dpop_error(why, "invalid_token") from None
    except InvalidToken as exc:
        raise _in_scheme(exc, dpop) from None  # the DPoP scheme: its challenge (RFC 9449 7.1)
    if dpop != _dpop_bound(claims):
        # RFC 9449 7.1: a DPoP-bound token goes with the DPoP scheme, only it; either way the
        # challenge is DPoP's, as fwrest's bearer check answers
        why = "the access token is sent with the wrong authorization scheme"
        raise _dpop_error(why, "invalid_token")
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
