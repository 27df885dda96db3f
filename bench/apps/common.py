"""What every server of the benchmark shares: credentials, the JWT key, the payloads.

The values are fixed so that wrk can send the same request to every server of a case.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import secrets
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import jwt

USER = "bench"
PASSWORD = "bench-pass"
CLIENT_ID = "bench-client"
CLIENT_SECRET = "bench-secret"
BASIC_HEADER = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
# The peers' HS256 key (fwrest makes its own signing key at start and issues its own tokens).
JWT_KEY = b"fwrest-bench-peer-signing-key-0123456789abcdef"
TOKEN_FORM = (
    f"grant_type=password&username={USER}&password={PASSWORD}"
    f"&client_id={CLIENT_ID}&client_secret={CLIENT_SECRET}"
)
ROUTE_COUNT_SMALL = 10
ROUTE_COUNT_LARGE = 1000
HELLO = {"message": "Hello, world!"}
STATIC_NAME = "file.bin"  # case 11: the static file under the location /rest
STATIC_SIZE = 1024 * 1024


def _big(size: int = 64 * 1024) -> dict[str, Any]:
    """Case 11's JSON answer: about ``size`` bytes once encoded, text that compresses as an
    API's lists do (repeated keys, varied values)."""
    items: list[dict[str, Any]] = []
    length = 12
    while length < size:
        i = len(items)
        item = {"id": i, "name": f"item {i}", "price": round(i * 1.37, 2), "tag": str(i % 7)}
        items.append(item)
        length += len(json.dumps(item, separators=(",", ":"))) + 1
    return {"items": items}


BIG = _big()


def static_bytes() -> bytes:
    """Case 11's file: 1 MiB that does not compress (served as application/octet-stream)."""
    return hashlib.shake_256(b"fwrest-bench").digest(STATIC_SIZE)


def hello() -> dict[str, Any]:
    """The JSON of the hello endpoints (a new dict per request, as a handler would build)."""
    return {"message": "Hello, world!"}


def _order(size: int = 1024) -> str:
    """Case 16's request body: an order of about ``size`` bytes of JSON (a customer and lines
    of sku, quantity, unit price and a note), the same text for every server."""
    lines: list[dict[str, Any]] = []
    order: dict[str, Any] = {"customer": "Kim Lee", "lines": lines}
    while len(json.dumps(order)) < size - 90:
        n = len(lines) + 1
        lines.append({"sku": f"sku-{n:05d}", "qty": n % 5 + 1, "unit_cents": 250 * n, "note": "ok"})
    order["note"] = "x" * (size - len(json.dumps(order)) - len(', "note": ""'))
    return json.dumps(order)


ORDER_JSON = _order()


def order_summary(customer: str, lines: list[tuple[int, int]]) -> dict[str, Any]:
    """What case 16's endpoints answer for a decoded order: its lines' count and total."""
    return {
        "message": f"order of {customer}",
        "lines": len(lines),
        "total_cents": sum(qty * cents for qty, cents in lines),
    }


def same(given: str, expected: str) -> bool:
    return secrets.compare_digest(given.encode(), expected.encode())


def check_basic_header(header: str | None) -> str | None:
    """The user of a valid ``Basic`` header for USER/PASSWORD, else None (the trivial
    validator every peer runs)."""
    if not header:
        return None
    scheme, _, cred = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(cred.strip(), validate=True).decode().partition(":")
    except ValueError:
        return None
    return user if same(user, USER) & same(password, PASSWORD) else None


# Case 19: the peers' ES256 and RS256 keys, made by the bench process (make_peer_keys) in its
# scratch folder, which the servers it starts find through this variable (they inherit it)
PEER_KEYS_ENV = "FWREST_BENCH_PEER_KEYS"
PEER_ALGS = ("ES256", "RS256")


def make_peer_keys(folder: Path) -> None:
    """Make the peers' ES256 (P-256) and RS256 (3072-bit, as fwrest's) keys in ``folder``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    folder.mkdir(parents=True, exist_ok=True)
    made = {
        "ES256": ec.generate_private_key(ec.SECP256R1()),
        "RS256": rsa.generate_private_key(public_exponent=65537, key_size=3072),
    }
    for alg, key in made.items():
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        (folder / f"{alg}.pem").write_bytes(pem)
    os.environ[PEER_KEYS_ENV] = str(folder)


@functools.cache
def _peer_key(alg: str) -> Any:
    from cryptography.hazmat.primitives import serialization

    pem = (Path(os.environ[PEER_KEYS_ENV]) / f"{alg}.pem").read_bytes()
    return serialization.load_pem_private_key(pem, password=None)


def _signing_key(alg: str) -> Any:
    return JWT_KEY if alg == "HS256" else _peer_key(alg)


def _verifying_key(alg: str) -> Any:
    return JWT_KEY if alg == "HS256" else _peer_key(alg).public_key()


def issue_peer_token(ttl_s: int = 3600, alg: str = "HS256") -> str:
    """An access token the peers accept (issued before a run, like fwrest's)."""
    now = int(time.time())
    claims = {"sub": USER, "iat": now, "exp": now + ttl_s, "jti": uuid.uuid4().hex}
    return jwt.encode(claims, _signing_key(alg), algorithm=alg, headers={"typ": "at+jwt"})


def check_bearer_header(header: str | None, alg: str = "HS256") -> str | None:
    """The subject of a valid ``Bearer`` token signed with ``alg``, else None (the signature
    checked on every request, as PyJWT's docs and FastAPI's show)."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    try:
        claims = jwt.decode(
            token.strip(),
            _verifying_key(alg),
            algorithms=[alg],
            options={"require": ["exp", "iat", "jti", "sub"]},
        )
    except jwt.PyJWTError:
        return None
    return str(claims["sub"])


class RefreshStore:
    """The peers' refresh tokens: SHA-256 hashes with subject, client and expiry, in memory
    (what fwrest's ``StateStore=memory`` keeps too)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, tuple[str, str, float]] = {}

    def add(self, token: str, subject: str, client: str, expires: float) -> None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            self._items[digest] = (subject, client, expires)


def password_grant(form: dict[str, str], store: RefreshStore) -> tuple[int, dict[str, Any]]:
    """The OAuth2 password grant every peer answers: (status, JSON body)."""
    if form.get("grant_type") != "password":
        return 400, {"error": "unsupported_grant_type"}
    if not (
        same(form.get("client_id", ""), CLIENT_ID)
        & same(form.get("client_secret", ""), CLIENT_SECRET)
    ):
        return 401, {"error": "invalid_client"}
    if not (same(form.get("username", ""), USER) & same(form.get("password", ""), PASSWORD)):
        return 400, {"error": "invalid_grant"}
    now = time.time()
    claims = {
        "sub": USER,
        "client_id": CLIENT_ID,
        "iat": int(now),
        "exp": int(now) + 900,
        "jti": uuid.uuid4().hex,
        "scope": "default",
    }
    access = jwt.encode(claims, JWT_KEY, algorithm="HS256", headers={"typ": "at+jwt"})
    refresh = secrets.token_urlsafe(32)
    store.add(refresh, USER, CLIENT_ID, now + 86400)
    return 200, {
        "access_token": access,
        "refresh_token": refresh,
        "token_type": "Bearer",
        "expires_in": 900,
        "scope": "default",
    }


def blocking_work() -> dict[str, Any]:
    """The body of the ``def`` handlers of case 5 (run in a thread pool)."""
    return {"message": "Hello, world!"}
