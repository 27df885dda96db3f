"""DPoP proofs as a client makes them (RFC 9449 4.2), for SPEC 16.2: keys by ``cryptography``,
proofs by PyJWT, the thumbprint (RFC 7638) computed here, so the server is checked against the RFC,
not itself."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from tests.auth.oauth2_support import b64url

ALGS_PARAM = 'algs="ES256 EdDSA RS256"'


class DpopKey:
    """A client's DPoP key pair of ``alg`` (ES256, EdDSA or RS256)."""

    def __init__(self, alg: str = "ES256") -> None:
        self.alg = alg
        self.private: Any
        if alg == "ES256":
            self.private = ec.generate_private_key(ec.SECP256R1())
            self.jwk = json.loads(ECAlgorithm.to_jwk(self.private.public_key()))
        elif alg == "EdDSA":
            self.private = ed25519.Ed25519PrivateKey.generate()
            self.jwk = json.loads(OKPAlgorithm.to_jwk(self.private.public_key()))
        else:
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.jwk = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))

    @property
    def jkt(self) -> str:
        """The RFC 7638 thumbprint: the required members, sorted, no white space."""
        members = {"EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x"), "RSA": ("e", "kty", "n")}  # fmt: skip
        picked = {m: self.jwk[m] for m in members[self.jwk["kty"]]}
        canonical = json.dumps(picked, separators=(",", ":"), sort_keys=True)
        return b64url(hashlib.sha256(canonical.encode()).digest())

    def proof(
        self,
        method: str,
        url: str,
        token: str | None = None,
        *,
        iat: float | None = None,
        jti: str | None = None,
        header: dict[str, Any] | None = None,
        claims: dict[str, Any] | None = None,
    ) -> str:
        """A proof for ``method`` ``url`` (``ath`` of ``token``); ``header``, ``claims``: None
        removes."""
        body: dict[str, Any] = {
            "htm": method,
            "htu": url,
            "iat": int(time.time() if iat is None else iat),
            "jti": jti or uuid.uuid4().hex,
        }
        if token is not None:
            body["ath"] = b64url(hashlib.sha256(token.encode()).digest())
        head: dict[str, Any] = {"typ": "dpop+jwt", "jwk": self.jwk}
        for target, extra in ((body, claims), (head, header)):
            for name, value in (extra or {}).items():
                if value is None:
                    target.pop(name, None)
                else:
                    target[name] = value
        return jwt.encode(body, self.private, algorithm=self.alg, headers=head)


def unsigned_proof(method: str, url: str, jwk: dict[str, Any]) -> str:
    """A proof with ``alg: none`` (no signature)."""
    head = {"typ": "dpop+jwt", "alg": "none", "jwk": jwk}
    body = {"htm": method, "htu": url, "iat": int(time.time()), "jti": uuid.uuid4().hex}
    return b64url(json.dumps(head).encode()) + "." + b64url(json.dumps(body).encode()) + "."


def dpop_headers(token: str, proof: str) -> dict[str, str]:
    return {"Authorization": f"DPoP {token}", "DPoP": proof}
