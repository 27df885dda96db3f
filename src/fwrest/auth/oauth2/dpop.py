"""DPoP, proof of possession of a client's key (RFC 9449, SPEC 16.2).

A client signs a short JWT (the proof, header ``DPoP``) with its own key for each request. At
the token route a valid proof binds the tokens issued to that key: the access token carries
``cnf: {"jkt": <RFC 7638 thumbprint>}`` and ``token_type`` is ``DPoP``; a public client's
family of refresh tokens is bound too (the family id carries the thumbprint:
:func:`new_family`; an unbound one at its first refresh with a proof: :func:`refreshed_family`). The bearer check then wants ``Authorization: DPoP <token>`` with a fresh
proof by that key whose ``ath`` is the token's hash.

The signature is checked by PyJWT (``cryptography`` underneath); this module only picks what
it may check with (the algorithm from a fixed list, the key from the proof's public ``jwk``)
and compares the claims. A proof's ``jti`` is used once on every worker and host: its id is
noted in the state store (``note_proof``) for the proof's window.

Nothing here runs for a request without a ``DPoP`` header or a bound token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import time
import uuid
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fwrest.auth.oauth2.errors import OAuthError
from fwrest.errors import Challenge, Unauthorized
from fwrest.routing.paths import BadPath, normalise_path

if TYPE_CHECKING:
    from fwrest.auth.oauth2.grants.base import TokenRequest
    from fwrest.auth.oauth2.tokens import TokenService

__all__ = [
    "ALGS",
    "DPOP",
    "WINDOW_S",
    "DpopCheck",
    "InvalidDpopProof",
    "Proof",
    "ProofError",
    "bound_key",
    "check_proof",
    "client_bound",
    "family_key",
    "family_revoked",
    "family_root",
    "new_family",
    "refreshed_family",
    "thumbprint",
]

ALGS = ("ES256", "EdDSA", "RS256")  # SPEC 16.2; the challenge's algs= and the metadata's
WINDOW_S = 60  # a proof's iat within this many seconds of now, either way (SPEC 16.2)
RSA_MIN_BITS = 2048
MAX_JTI = 256  # characters: a proof id longer than this is no id of a sane client
DPOP = Challenge("DPoP", algs=" ".join(ALGS))  # RFC 9449 7.1
# the key a token request's valid proof was made with ("": none), for the tokens it issues
bound_key: ContextVar[str] = ContextVar("fwrest_dpop_key", default="")
_FAMILY_SEP = "."  # family id "<random hex>.<thumbprint>": a family bound to a key
# a family id's start where the grant that began it authenticated the client (the code grant)
_CLIENT_BOUND = "c-"
_PRIVATE_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")
_THUMBPRINT_MEMBERS = {"EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x"), "RSA": ("e", "kty", "n")}  # fmt: skip
_CURVES = {"ES256": ("EC", "P-256"), "EdDSA": ("OKP", "Ed25519")}


class ProofError(Exception):
    """A proof that must be refused; the message says why (never the proof)."""


class InvalidDpopProof(OAuthError):
    """400 ``invalid_dpop_proof`` at the token route (RFC 9449 5)."""

    def __init__(self, description: str) -> None:
        super().__init__("invalid_dpop_proof", description)


class Proof:
    """A valid proof: the thumbprint of its key (``jkt``), the id its use is noted under,
    and how long that note is kept (to the end of the proof's window)."""

    __slots__ = ("jkt", "keep_s", "proof_id")

    def __init__(self, jkt: str, proof_id: str, keep_s: float) -> None:
        self.jkt = jkt
        self.proof_id = proof_id
        self.keep_s = keep_s


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def thumbprint(jwk: Mapping[str, Any]) -> str:
    """The RFC 7638 SHA-256 thumbprint of a public JWK: its required members, sorted, no
    white space.

    >>> thumbprint({"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"})
    'kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k'
    """
    members = _THUMBPRINT_MEMBERS.get(str(jwk.get("kty")))
    if members is None or any(not isinstance(jwk.get(m), str) for m in members):
        raise ProofError("the DPoP proof's jwk is not an EC, OKP or RSA public key")
    canonical = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    return _b64url(hashlib.sha256(canonical.encode("utf-8")).digest())


def _same_target(htu: str, host: str, path: str) -> bool:
    """Whether ``htu`` names ``https://{host}{path}``, ``path`` as the router normalised the
    request's (RFC 9449 4.3: no query or fragment; RFC 3986 6.2.2 and 6.2.3: the scheme and
    host folded, the default port dropped, and the path through the router's one normaliser,
    so percent escapes decoded and dot segments removed; docs/decisions.md).

    >>> _same_target("https://H.example:443/rest/x/../%77hoami/", "h.example", "/rest/whoami")
    True
    >>> _same_target("https://h.example/rest/../../whoami", "h.example", "/whoami")
    False
    """
    try:
        parts = urlsplit(htu)
        port = parts.port
        own = urlsplit(f"https://{host}")
        own_port = own.port
    except ValueError:
        return False
    if parts.scheme.lower() != "https" or not parts.hostname or parts.username is not None:
        return False
    if (parts.hostname.lower(), port or 443) != ((own.hostname or "").lower(), own_port or 443):
        return False
    try:
        # the proof names the route the request reaches, as the router reads a target
        return normalise_path(parts.path or "/") == (path or "/")
    except BadPath:  # an encoded slash, a bad escape, ".." above the root: no route of ours
        return False


def check_proof(proof: str, method: str, host: str, path: str, token: str | None = None) -> Proof:
    """A proof checked for a request of ``method`` to ``https://{host}{path}``; with
    ``token``, also its ``ath`` (the access token's SHA-256). Its ``jti`` is not looked up
    here (:meth:`DpopCheck.unused`).

    Raises:
        ProofError: malformed, another ``typ``, an algorithm not in :data:`ALGS` (``none``
            among them), no public ``jwk`` (or a private one), a bad signature, another
            method or URL, ``iat`` outside the window, no ``jti``, another ``ath``.
    """
    import jwt  # here: a start without oAuth2 never loads it

    try:
        header = jwt.get_unverified_header(proof)
    except jwt.PyJWTError:
        raise ProofError("the DPoP proof is malformed") from None
    if str(header.get("typ", "")).lower() != "dpop+jwt":
        raise ProofError("the DPoP proof's typ is not dpop+jwt")
    alg = header.get("alg")
    if alg not in ALGS:
        raise ProofError("the DPoP proof's algorithm is not one of " + " ".join(ALGS))
    jwk = header.get("jwk")
    if not isinstance(jwk, dict):
        raise ProofError("the DPoP proof carries no jwk")
    if any(member in jwk for member in _PRIVATE_MEMBERS):
        raise ProofError("the DPoP proof's jwk holds a private key")
    if "crit" in header:
        raise ProofError("the DPoP proof names critical extensions fwrest does not know")
    jkt = thumbprint(jwk)
    wanted = _CURVES.get(str(alg))
    if wanted is not None and (jwk.get("kty"), jwk.get("crv")) != wanted:
        raise ProofError(f"the DPoP proof's jwk is not a {wanted[1]} key for {alg}")
    if alg == "RS256" and jwk.get("kty") != "RSA":
        raise ProofError("the DPoP proof's jwk is not an RSA key for RS256")
    try:
        key = jwt.PyJWK(dict(jwk), algorithm=str(alg)).key
        if alg == "RS256" and getattr(key, "key_size", 0) < RSA_MIN_BITS:
            raise ProofError(f"the DPoP proof's RSA key is shorter than {RSA_MIN_BITS} bits")
        claims: dict[str, Any] = jwt.decode(
            proof,
            key,
            algorithms=[str(alg)],
            options={
                "require": ["iat", "jti", "htm", "htu"],
                "verify_iat": False,
                "verify_aud": False,
            },
        )
    except jwt.PyJWTError:
        raise ProofError("the DPoP proof's signature or claims are invalid") from None
    if claims.get("htm") != method:
        raise ProofError("the DPoP proof is for another method (htm)")
    htu = claims.get("htu")
    if not isinstance(htu, str) or not _same_target(htu, host, path):
        raise ProofError("the DPoP proof is for another URL (htu)")
    iat = claims.get("iat")
    if isinstance(iat, bool) or not isinstance(iat, int | float):
        raise ProofError("the DPoP proof's iat is not a time")
    now = time.time()
    if iat < now - WINDOW_S:
        raise ProofError(f"the DPoP proof is stale (iat over {WINDOW_S} s ago)")
    if iat > now + WINDOW_S:
        raise ProofError(f"the DPoP proof is dated in the future (iat over {WINDOW_S} s ahead)")
    jti = claims.get("jti")
    # an empty or blank jti names no proof: each client would share it (docs/decisions.md)
    if not isinstance(jti, str) or not jti.strip() or len(jti) > MAX_JTI:
        raise ProofError("the DPoP proof's jti is missing or malformed")
    if token is not None:
        ath = _b64url(hashlib.sha256(token.encode("ascii", "replace")).digest())
        given = claims.get("ath")
        if not isinstance(given, str) or not hmac.compare_digest(
            given.encode("utf-8", "replace"), ath.encode()
        ):
            raise ProofError("the DPoP proof is for another access token (ath)")
    proof_id = hashlib.sha256(f"{jkt}\n{jti}".encode()).hexdigest()
    # noted until the proof's window ends: after that its iat refuses it anyway
    return Proof(jkt, proof_id, max(float(iat) + WINDOW_S - now, 0.0) + 1.0)


def new_family(request: TokenRequest, *, client_bound: bool = False) -> str:
    """A new token family's id: random; for a public client whose token request carried a
    valid proof, followed by the proof key's thumbprint, so that every refresh token of the
    family is bound to that key (RFC 9449 5: a confidential client's refresh tokens are bound
    by its authentication). ``client_bound`` (a grant that required the client's
    authentication: the code grant) marks the family so that its refreshes require it too
    (:func:`client_bound`), where the password grant's keep SPEC 4.2's first client."""
    family = _CLIENT_BOUND + uuid.uuid4().hex if client_bound else uuid.uuid4().hex
    jkt = bound_key.get()
    if jkt and request.client_id in request.allowed.public:
        return f"{family}{_FAMILY_SEP}{jkt}"
    return family


def refreshed_family(request: TokenRequest, family: str) -> str:
    """The family a refresh issues its new pair in: the refreshed token's, or, for a public
    client's unbound family refreshed with a valid proof, the same id bound to the proof's key
    (RFC 9449 5: a refresh token issued to a public client that presents a valid proof MUST be
    bound to its key). The id before the ``.`` stays the family's own (:func:`family_root`): a
    revocation under it reaches the tokens of both (:func:`family_revoked`)."""
    jkt = bound_key.get()
    if jkt and not family_key(family) and request.client_id in request.allowed.public:
        return f"{family}{_FAMILY_SEP}{jkt}"
    return family


def family_root(family: str) -> str:
    """A family's id without the key it is bound to: the id its tokens had before a refresh
    bound it (:func:`refreshed_family`), or would have had unbound."""
    return family.partition(_FAMILY_SEP)[0]


def family_revoked(family: str, revoked: Mapping[str, float]) -> bool:
    """Whether the family ``family`` (a token's ``fam``, a refresh record's) is in ``revoked``:
    under its own id, or a bound family under its root (its tokens from before the binding
    were revoked, or a replay revoked the whole family: grants/refresh.py)."""
    if family in revoked:
        return True
    root, sep, _ = family.partition(_FAMILY_SEP)
    return bool(sep) and root in revoked


def client_bound(family: str) -> bool:
    """Whether a family's confidential client must authenticate to refresh it (RFC 6749 6)."""
    return family.startswith(_CLIENT_BOUND)


def family_key(family: str) -> str:
    """The thumbprint a family's refresh tokens are bound to; "" for an unbound family."""
    return family.partition(_FAMILY_SEP)[2]


def _first(value: str | None) -> str:
    return value.split(",", 1)[0].strip() if value else ""


Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]


class DpopCheck:
    """The DPoP checks of one oAuth2 port (one per port and worker, built at start):
    ``required`` when ``"boundTokens": "dpop"``; ``proxies`` the port's ``TrustedProxies``
    (whose ``X-Forwarded-Host``/``-Proto`` name the URL the client used); ``challenges``
    the ``DPoP`` challenge (:data:`DPOP`) with each location's ``resource_metadata=`` (SPEC
    16.3), by location prefix."""

    __slots__ = ("_challenges", "_service", "proxies", "required")

    def __init__(
        self,
        service: TokenService,
        *,
        required: bool,
        proxies: Networks = (),
        challenges: dict[str | None, Challenge] | None = None,
    ) -> None:
        self._service = service
        self.required = required
        self.proxies = proxies
        self._challenges = challenges or {}

    # -- what the token route and the bearer check share --------------------------------------
    def host_of(self, headers: Callable[[str], str | None], peer: str) -> str:
        """The host the client named: ``Host``, or behind a trusted proxy its
        ``X-Forwarded-Host`` (the first, the client's)."""
        if self.proxies and _trusted(peer, self.proxies):
            forwarded = _first(headers("x-forwarded-host"))
            proto = _first(headers("x-forwarded-proto")).lower()
            if proto and proto != "https":
                return ""  # the client used http: no htu of https matches
            if forwarded:
                return forwarded
        return headers("host") or ""

    async def unused(self, proof: Proof) -> bool:
        """Note the proof's use in the state store: False when it was used before, on any
        worker or host (a replay). 503 while the store does not answer (fail closed)."""
        from fwrest.auth.oauth2.tokens import StoreDeadline

        service = self._service
        return await service.store_call(
            StoreDeadline(), service.store.note_proof, proof.proof_id, proof.keep_s
        )

    # -- the token route -----------------------------------------------------------------------
    async def token_request(
        self, headers: Mapping[str, str], method: str, path: str, peer: str
    ) -> str:
        """The thumbprint of the key the token request's proof was made with ("" for a
        request without one, where DPoP is optional).

        Raises:
            InvalidDpopProof: a proof that must be refused, two of them, a replay, none
                where ``boundTokens`` is ``dpop``.
        """
        proof = headers.get("dpop")
        if proof is None:
            if self.required:
                raise InvalidDpopProof("a DPoP proof is required here (boundTokens dpop)")
            return ""
        if "," in proof:
            raise InvalidDpopProof("the request carries more than one DPoP proof")
        try:
            checked = check_proof(proof.strip(), method, self.host_of(headers.get, peer), path)
        except ProofError as exc:
            raise InvalidDpopProof(str(exc)) from None
        if not await self.unused(checked):
            raise InvalidDpopProof("the DPoP proof was used before")
        return checked.jkt

    # -- the bearer check ----------------------------------------------------------------------
    def challenge(self, prefix: str | None, error: str = "", why: str = "") -> str:
        """A ``WWW-Authenticate: DPoP`` value (RFC 9449 7.1), with the location's
        ``resource_metadata=`` (SPEC 16.3); a request without credentials gets no error (RFC
        6750 3.1)."""
        return self._challenges.get(prefix, DPOP).refused(error, why)

    def refuse(self, prefix: str | None, error: str, why: str) -> Unauthorized:
        return Unauthorized(self.challenge(prefix, error, why), why)

    async def access(
        self,
        headers: Callable[[str], str | None],
        method: str,
        path: str,
        peer: str,
        token: str,
        claims: Mapping[str, Any],
        dpop_scheme: bool,
        prefix: str | None,
    ) -> None:
        """The binding of a verified access token (RFC 9449 7): a bound token only with the
        ``DPoP`` scheme and a fresh, unused proof of its key for this request and token; an
        unbound one not with the ``DPoP`` scheme, nor where DPoP is mandatory.

        Raises:
            Unauthorized: 401 with a ``DPoP`` challenge (``invalid_token`` for the scheme,
                ``invalid_dpop_proof`` for the proof).
        """
        cnf = claims.get("cnf")
        jkt = cnf.get("jkt") if isinstance(cnf, dict) else None
        if jkt is None:
            if dpop_scheme:
                raise self.refuse(prefix, "invalid_token", "the access token is not DPoP-bound")
            if self.required:
                raise self.refuse(
                    prefix, "invalid_token", "a DPoP-bound access token is required here"
                )
            return
        if not dpop_scheme:
            raise self.refuse(
                prefix,
                "invalid_token",
                "the access token is DPoP-bound: send it as Authorization: DPoP with a proof",
            )
        proof = headers("dpop")
        if not proof:
            raise self.refuse(prefix, "invalid_dpop_proof", "a DPoP proof is required")
        if "," in proof:
            raise self.refuse(prefix, "invalid_dpop_proof", "more than one DPoP proof")
        try:
            checked = check_proof(
                proof.strip(), method, self.host_of(headers, peer), path, token=token
            )
        except ProofError as exc:
            raise self.refuse(prefix, "invalid_dpop_proof", str(exc)) from None
        if not isinstance(jkt, str) or not hmac.compare_digest(
            checked.jkt.encode(), jkt.encode("utf-8", "replace")
        ):
            raise self.refuse(
                prefix, "invalid_dpop_proof", "the DPoP proof is signed with another key"
            )
        if not await self.unused(checked):
            raise self.refuse(prefix, "invalid_dpop_proof", "the DPoP proof was used before")


def _trusted(address: str, networks: Networks) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in networks)


def dpop_token(header: str | None) -> str | None:
    """``DPoP abc`` -> ``abc`` (scheme case-insensitive); None for anything else."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "dpop" or not token or " " in token:
        return None
    return token


__all__ += ["dpop_token"]
