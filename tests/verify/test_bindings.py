"""SPEC 16.4: ``fwrest.verify``'s bound-token checks (``cnf``): DPoP thumbprint against a proof (RFC
9449), certificate against the client's (RFC 8705). Tokens mostly minted by a small TLS issuer here
(``http.server``, trustme; RFC 8414 metadata and JWKS) so every ``cnf`` can be tried, and one
DPoP-bound token from ``fwrest serve`` (SPEC 16.2). Thumbprints by joserfc, proofs by PyJWT."""

from __future__ import annotations

import asyncio
import hashlib
import json
import ssl
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding
from joserfc.jwk import import_key
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from fwrest.verify import (
    AsyncVerifier,
    InsufficientScope,
    InvalidToken,
    ReplayCacheFull,
    Verifier,
    VerifyMiddleware,
)
from tests.auth.oauth2_support import OAuthService, b64url
from tests.conftest import free_port, issue_certs, wait_for
from tests.verify.support import ADA, CLIENT, revoke, serve_issuer

API = "https://api.example.com/orders"


class Issuer:
    """An issuer of the test's own: ES256 key, metadata and JWK Set over TLS."""

    def __init__(self, certs: dict[str, Path]) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        jwk = ECAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        self.kid = import_key(jwk).thumbprint()
        self.jwks = {"keys": [{**jwk, "kid": self.kid, "alg": "ES256", "use": "sig"}]}
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/oauth-authorization-server/bound":
                    body = {"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks"}
                elif self.path == "/bound/jwks":
                    body = issuer.jwks
                else:
                    self.send_error(404)
                    return
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("cache-control", "max-age=300")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certs["cert"], certs["key"])
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/bound"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def token(self, cnf: dict[str, str], ttl: int = 600) -> str:
        now = int(time.time())
        claims = {"iss": self.url, "aud": "API", "sub": "ada", "iat": now, "exp": now + ttl,
                  "jti": uuid.uuid4().hex, "scope": "orders:read", "cnf": cnf}  # fmt: skip
        return jwt.encode(claims, self.key, "ES256", headers={"typ": "at+jwt", "kid": self.kid})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def issuer(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Issuer]:
    certs = issue_certs(ca, tmp_path_factory.mktemp("bound"))
    found = Issuer(certs)
    found.ca = str(certs["ca"])  # type: ignore[attr-defined]
    try:
        yield found
    finally:
        found.close()


@pytest.fixture(scope="module")
def verifier(issuer: Issuer) -> Iterator[Verifier]:
    with Verifier(issuer.url, audience="API", verify=issuer.ca) as v:  # type: ignore[attr-defined]
        yield v


# -- DPoP ------------------------------------------------------------------------------------

KEYS = {
    "ES256": lambda: ec.generate_private_key(ec.SECP256R1()),
    "EdDSA": ed25519.Ed25519PrivateKey.generate,
    "RS256": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
}
TO_JWK = {"ES256": ECAlgorithm.to_jwk, "EdDSA": OKPAlgorithm.to_jwk, "RS256": RSAAlgorithm.to_jwk}


class Holder:
    """A client's DPoP key: its public JWK, thumbprint (joserfc) and proofs (PyJWT)."""

    def __init__(self, alg: str = "ES256") -> None:
        self.alg = alg
        self.key: Any = KEYS[alg]()
        self.jwk = TO_JWK[alg](self.key.public_key(), as_dict=True)
        self.jkt = import_key(self.jwk).thumbprint()

    def proof(self, access_token: str, method: str = "GET", url: str = API, **over: Any) -> str:
        ath = b64url(hashlib.sha256(access_token.encode()).digest())
        claims = {"htm": method, "htu": url, "iat": int(time.time()), "jti": uuid.uuid4().hex,
                  "ath": ath, **over}  # fmt: skip
        headers = {"typ": over.pop("typ", "dpop+jwt"), "jwk": self.jwk}
        claims.pop("typ", None)
        return jwt.encode(claims, self.key, self.alg, headers=headers)


@pytest.fixture(scope="module")
def svc(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthService]:
    yield from serve_issuer(ca, tmp_path_factory.mktemp("verify-dpop"))


def test_a_dpop_bound_token_issued_by_fwrest_is_verified_with_a_proof(svc: OAuthService) -> None:
    port = svc["EC"]
    holder = Holder("EdDSA")
    assert port.token_url.startswith("https://127.0.0.1:")  # the whole URL: the proof's htu
    grant = {"grant_type": "password", "username": ADA[0], "password": ADA[1]}
    proof = {"DPoP": holder.proof("", "POST", port.token_url)}
    answer = port.http.post(port.token_url, data=grant, headers=proof)
    assert answer.status_code == 200, answer.text
    assert answer.json()["token_type"] == "DPoP"
    access = answer.json()["access_token"]
    ca = str(svc.certs["ca"])
    with Verifier(svc.proc.url("EC"), verify=ca) as v:
        claims = v.verify(access, dpop_proof=holder.proof(access), method="GET", url=API)
        assert claims["cnf"] == {"jkt": holder.jkt}
        # without a proof, or with another key's, it is refused
        dpop_refused(v, access, None)
        dpop_refused(v, access, Holder("ES256").proof(access))


def test_any_refusal_of_a_dpop_request_challenges_with_dpop(
    svc: OAuthService, issuer: Issuer, verifier: Verifier
) -> None:
    # RFC 9449 7.1, as fwrest's bearer check: a revoked (inactive), expired or unknown-key token
    # presented with a proof, or DPoP-bound, is refused with the DPoP challenge
    port, holder = svc["EC"], Holder("ES256")
    grant = {"grant_type": "password", "username": ADA[0], "password": ADA[1]}
    answer = port.http.post(
        port.token_url, data=grant, headers={"DPoP": holder.proof("", "POST", port.token_url)}
    )
    assert answer.status_code == 200, answer.text
    pair = answer.json()
    revoke(svc, pair["refresh_token"])
    ca = str(svc.certs["ca"])

    def challenged(refuse: Any) -> str:
        with pytest.raises(InvalidToken) as caught:
            refuse()
        challenge = caught.value.www_authenticate
        assert challenge.startswith('DPoP error="invalid_token"'), challenge
        assert 'algs="ES256 EdDSA RS256"' in challenge, challenge
        return caught.value.description

    access = pair["access_token"]
    with Verifier(svc.proc.url("EC"), verify=ca, introspect=CLIENT) as asking:
        why = challenged(lambda: asking.verify(access, dpop_proof=holder.proof(access),
                                               method="GET", url=API))  # fmt: skip
        assert "revoked" in why or "not active" in why, why

        async def twin() -> None:
            async with AsyncVerifier(svc.proc.url("EC"), verify=ca, introspect=CLIENT) as av:
                await av.verify(access, dpop_proof=holder.proof(access), method="GET", url=API)

        challenged(lambda: asyncio.run(twin()))
    expired = issuer.token({"jkt": holder.jkt}, ttl=-600)
    proof = holder.proof(expired)
    assert "expired" in challenged(
        lambda: verifier.verify(expired, dpop_proof=proof, method="GET", url=API)
    )
    unknown_kid = jwt.encode(
        jwt.decode(expired, options={"verify_signature": False}),
        ec.generate_private_key(ec.SECP256R1()),
        "ES256",
        headers={"typ": "at+jwt", "kid": "nobody"},
    )
    challenged(lambda: verifier.verify(unknown_kid, dpop_proof=holder.proof(unknown_kid),
                                       method="GET", url=API))  # fmt: skip
    # without a proof and unbound: Bearer, as before
    with pytest.raises(InvalidToken) as caught:
        verifier.verify(issuer.token({}, ttl=-600))
    assert caught.value.www_authenticate.startswith('Bearer error="invalid_token"')


def dpop_refused(
    verifier: Verifier, access: str, proof: str | Sequence[str] | None, **kw: Any
) -> str:
    with pytest.raises(InvalidToken) as caught:
        verifier.verify(access, dpop_proof=proof, method=kw.pop("method", "GET"), url=API, **kw)
    exc = caught.value
    assert exc.status == 401
    assert exc.www_authenticate.startswith('DPoP error="invalid_dpop_proof"'), exc.www_authenticate
    assert 'algs="ES256 EdDSA RS256"' in exc.www_authenticate
    return exc.description


@pytest.mark.parametrize("alg", sorted(KEYS))
def test_a_dpop_bound_token_needs_a_proof_of_its_key(
    issuer: Issuer, verifier: Verifier, alg: str
) -> None:
    holder = Holder(alg)
    access = issuer.token({"jkt": holder.jkt})
    claims = verifier.verify(access, dpop_proof=holder.proof(access), method="get", url=API)
    assert claims["cnf"] == {"jkt": holder.jkt}
    # htu is compared without the query, scheme and host case-folded (RFC 9449 4.3)
    proof = holder.proof(access, url="HTTPS://API.example.com:443/orders")
    assert verifier.verify(access, dpop_proof=proof, method="GET", url=API + "?page=2")
    # a scope it lacks: 403 in the DPoP scheme too (RFC 9449 7.1)
    with pytest.raises(InsufficientScope) as caught:
        verifier.verify(access, dpop_proof=holder.proof(access), method="GET", url=API,
                        scopes="orders:write")  # fmt: skip
    challenge = caught.value.www_authenticate
    assert challenge.startswith('DPoP error="insufficient_scope", scope="orders:write"'), challenge
    assert 'algs="ES256 EdDSA RS256"' in challenge, challenge

    async def twin() -> dict[str, Any]:
        async with AsyncVerifier(issuer.url, audience="API", verify=issuer.ca) as av:  # type: ignore[attr-defined]
            return await av.verify(access, dpop_proof=holder.proof(access), method="GET", url=API)

    assert asyncio.run(twin())["sub"] == "ada"


def test_bad_dpop_proofs_are_refused_with_the_dpop_challenge(
    issuer: Issuer, verifier: Verifier
) -> None:
    holder = Holder()
    access = issuer.token({"jkt": holder.jkt})
    other_token = issuer.token({"jkt": holder.jkt})
    hs_claims = {"htm": "GET", "htu": API, "iat": int(time.time()), "jti": "x"}
    hs = jwt.encode(hs_claims, "k" * 32, "HS256", headers={"typ": "dpop+jwt", "jwk": holder.jwk})
    cases = {
        "a DPoP proof is required": None,
        "another method": holder.proof(access, method="POST"),
        "another URL": holder.proof(access, url="https://api.example.com/other"),
        "stale": holder.proof(access, iat=int(time.time()) - 120),
        "another access token": holder.proof(other_token),
        "another key": Holder().proof(access),
        "typ is not dpop+jwt": holder.proof(access, typ="jwt"),
        "algorithm is not accepted": hs,
        "malformed": "not-a-proof",
    }
    for why, proof in cases.items():
        assert why in dpop_refused(verifier, access, proof), why
    # a blank jti names no proof, as the server refuses it (SPEC 16.2: a jti never seen)
    for jti in ("", " ", "\t", "\u00a0", "j" * 257):
        assert "jti" in dpop_refused(verifier, access, holder.proof(access, jti=jti)), repr(jti)
    # a proof is good once (RFC 9449 11.1)
    once = holder.proof(access)
    verifier.verify(access, dpop_proof=once, method="GET", url=API)
    assert "used before" in dpop_refused(verifier, access, once)
    # a malformed cnf is refused; a cnf without a binding this module knows asks nothing
    with pytest.raises(InvalidToken, match="cnf"):
        verifier.verify(issuer.token({"jkt": 5}))  # type: ignore[dict-item]
    assert verifier.verify(issuer.token({}))["sub"] == "ada"


# -- certificate-bound -------------------------------------------------------------------------


def test_a_certificate_bound_token_needs_that_certificate(
    ca: trustme.CA, issuer: Issuer, verifier: Verifier
) -> None:
    leaf = ca.issue_cert("client.example")
    pem = leaf.cert_chain_pems[0].bytes()
    cert = x509.load_pem_x509_certificate(pem)
    der = cert.public_bytes(Encoding.DER)
    x5t = b64url(hashlib.sha256(der).digest())
    access = issuer.token({"x5t#S256": x5t})
    for given in (pem, pem.decode(), der, cert):
        assert verifier.verify(access, client_cert=given)["cnf"] == {"x5t#S256": x5t}
    other = ca.issue_cert("other.example").cert_chain_pems[0].bytes()
    refusals = ((None, "bound to a client certificate"), (other, "another client certificate"),
                (b"garbage", "could not be read"))  # fmt: skip
    for given, why in refusals:
        with pytest.raises(InvalidToken, match=why) as caught:
            verifier.verify(access, client_cert=given)
        assert caught.value.www_authenticate.startswith('Bearer error="invalid_token"')

    async def twin() -> dict[str, Any]:
        async with AsyncVerifier(issuer.url, audience="API", verify=issuer.ca) as av:  # type: ignore[attr-defined]
            return await av.verify(access, client_cert=cert)

    assert asyncio.run(twin())["sub"] == "ada"


# -- the ASGI middleware with DPoP -------------------------------------------------------------


@pytest.fixture(scope="module")
def asgi_app(issuer: Issuer) -> Iterator[str]:
    """A Starlette app behind ``VerifyMiddleware`` under uvicorn on a thread; its base URL."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route

    async def orders(request: Request) -> JSONResponse:
        return JSONResponse({"user": request.scope["fwrest.claims"]["sub"]})

    verifier = AsyncVerifier(issuer.url, audience="API", verify=issuer.ca)  # type: ignore[attr-defined]
    sync_verifier = Verifier(issuer.url, audience="API", verify=issuer.ca)  # type: ignore[attr-defined]
    dependency = sync_verifier.require(scopes="orders:read")  # one string: space-separated

    async def plain_starlette(request: Request) -> JSONResponse:
        # the dependency in a Starlette endpoint: awaited with the request
        claims = await dependency(request)
        return JSONResponse({"user": claims["sub"]})

    guarded = VerifyMiddleware(Starlette(routes=[Route("/orders", orders)]), verifier=verifier)
    app = Starlette(routes=[Mount("/mw", app=guarded), Route("/dep", plain_starlette)])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 20, "uvicorn")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sync_verifier.close()  # its pooled TLS connection, else closed by the GC with a warning


def test_the_middleware_takes_dpop_tokens_with_their_proof(issuer: Issuer, asgi_app: str) -> None:
    holder = Holder()
    access = issuer.token({"jkt": holder.jkt})
    url = asgi_app + "/mw/orders"

    def get(scheme: str, token: str, proof: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"{scheme} {token}"}
        if proof is not None:
            headers["DPoP"] = proof
        return httpx.get(url, headers=headers, timeout=15)

    good = get("DPoP", access, holder.proof(access, url=url))
    assert good.status_code == 200, good.text
    assert good.json() == {"user": "ada"}
    missing = get("DPoP", access)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith('DPoP error="invalid_dpop_proof"')
    elsewhere = get("DPoP", access, holder.proof(access, url=asgi_app + "/mw/other"))
    assert elsewhere.status_code == 401 and "another URL" in elsewhere.json()["detail"]
    # RFC 9449 7.1: a DPoP-bound token sent as a bearer token is refused, proof or not
    as_bearer = get("Bearer", access, holder.proof(access, url=url))
    assert as_bearer.status_code == 401 and "scheme" in as_bearer.json()["detail"]
    assert as_bearer.headers["www-authenticate"].startswith('DPoP error="invalid_token"')
    # without a proof too, as fwrest's bearer check answers it (not invalid_dpop_proof)
    bare = get("Bearer", access)
    assert bare.status_code == 401 and "send it as Authorization: DPoP" in bare.json()["detail"]
    assert bare.headers["www-authenticate"].startswith('DPoP error="invalid_token"')
    # an unbound token: as Bearer it passes, as DPoP it is refused
    plain = issuer.token({})
    assert get("Bearer", plain).status_code == 200
    as_dpop = get("DPoP", plain, holder.proof(plain, url=url))
    assert as_dpop.status_code == 401
    assert as_dpop.headers["www-authenticate"].startswith('DPoP error="invalid_token"')
    # any refusal of a request with the DPoP scheme challenges with DPoP (RFC 9449 7.1)
    for token in (issuer.token({"jkt": holder.jkt}, ttl=-600), issuer.token({}, ttl=-600)):
        old = get("DPoP", token, holder.proof(token, url=url))
        assert old.status_code == 401 and "expired" in old.json()["detail"]
        assert old.headers["www-authenticate"].startswith('DPoP error="invalid_token"')
    assert (
        get("Bearer", issuer.token({}, ttl=-600))
        .headers["www-authenticate"]
        .startswith('Bearer error="invalid_token"')
    )


def test_the_dependency_in_a_starlette_endpoint(issuer: Issuer, asgi_app: str) -> None:
    url = asgi_app + "/dep"
    ok = httpx.get(url, headers={"Authorization": f"Bearer {issuer.token({})}"}, timeout=15)
    assert ok.status_code == 200, ok.text
    assert ok.json() == {"user": "ada"}
    missing = httpx.get(url, timeout=15)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    old = {"Authorization": f"Bearer {issuer.token({}, ttl=-600)}"}
    expired = httpx.get(url, headers=old, timeout=15)
    assert expired.status_code == 401
    assert expired.headers["www-authenticate"].startswith('Bearer error="invalid_token"')


def test_the_middleware_checks_websockets_too(issuer: Issuer) -> None:
    """A WebSocket handshake as ASGI calls it (no WebSocket library here): 1008, or let through."""
    seen: list[dict[str, Any]] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["fwrest.claims"])
        await send({"type": "websocket.accept"})

    async def handshake(headers: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
        async with AsyncVerifier(issuer.url, audience="API", verify=issuer.ca) as verifier:  # type: ignore[attr-defined]
            app = VerifyMiddleware(inner, verifier=verifier)
            sent: list[dict[str, Any]] = []

            async def receive() -> dict[str, Any]:
                return {"type": "websocket.connect"}

            async def send(message: Any) -> None:
                sent.append(message)

            scope = {"type": "websocket", "path": "/ws", "headers": headers, "scheme": "wss"}
            await app(scope, receive, send)
            return sent

    refused = asyncio.run(handshake([(b"host", b"api.example.com")]))
    assert refused == [{"type": "websocket.close", "code": 1008}] and not seen
    bearer = f"Bearer {issuer.token({})}".encode()
    accepted = asyncio.run(handshake([(b"host", b"api.example.com"), (b"authorization", bearer)]))
    assert accepted == [{"type": "websocket.accept"}]
    assert seen[0]["sub"] == "ada"


# -- the replay cache, many proofs, percent-encoded htu ------------------------------------------


def test_a_proof_is_refused_again_however_many_proofs_came_between(issuer: Issuer) -> None:
    """RFC 9449 11.1: a proof is remembered for as long as it would be accepted; a flood of
    valid proofs of the attacker's own key and token never pushes a captured one out."""
    victim, attacker = Holder("EdDSA"), Holder("EdDSA")
    victims, attackers = issuer.token({"jkt": victim.jkt}), issuer.token({"jkt": attacker.jkt})
    captured = victim.proof(victims)
    flood = 10_001  # more than the proofs the verifier held before it remembered all

    def run(v: Verifier) -> None:
        v.verify(victims, dpop_proof=captured, method="GET", url=API)
        for _ in range(flood):
            v.verify(attackers, dpop_proof=attacker.proof(attackers), method="GET", url=API)
        assert "used before" in dpop_refused(v, victims, captured)

    with Verifier(issuer.url, audience="API", verify=issuer.ca) as v:  # type: ignore[attr-defined]
        run(v)

    async def twin() -> str:
        async with AsyncVerifier(issuer.url, audience="API", verify=issuer.ca) as av:  # type: ignore[attr-defined]
            av.dpop_cache_size = 50  # a small one: the same rule, whatever the size
            await av.verify(victims, dpop_proof=captured, method="GET", url=API)
            for _ in range(30):
                await av.verify(attackers, dpop_proof=attacker.proof(attackers), method="GET",
                                url=API)  # fmt: skip
            with pytest.raises(InvalidToken) as caught:
                await av.verify(victims, dpop_proof=captured, method="GET", url=API)
            return caught.value.description

    assert "used before" in asyncio.run(twin())


def test_a_full_replay_cache_refuses_new_proofs_until_old_ones_leave_their_window(
    issuer: Issuer,
) -> None:
    holder = Holder("EdDSA")
    access = issuer.token({"jkt": holder.jkt})
    with Verifier(issuer.url, audience="API", verify=issuer.ca) as v:  # type: ignore[attr-defined]
        assert v.dpop_cache_size == 100_000
        with pytest.raises(ValueError, match="dpop_cache_size"):
            v.dpop_cache_size = 0
        v.dpop_cache_size = 5
        # proofs near the end of their window (iat 56 s ago): remembered 5 s more at most
        old = [holder.proof(access, iat=int(time.time()) - 56) for _ in range(5)]
        for proof in old:
            v.verify(access, dpop_proof=proof, method="GET", url=API)
        with pytest.raises(ReplayCacheFull) as caught:
            v.verify(access, dpop_proof=holder.proof(access), method="GET", url=API)
        assert caught.value.status == 503 and caught.value.www_authenticate == ""
        assert "cannot be recorded" in caught.value.description
        # a replay is still said to be one, not "full"
        assert "used before" in dpop_refused(v, access, old[0])
        time.sleep(5.5)  # the old proofs' window over: they are forgotten, a new one passes
        assert v.verify(access, dpop_proof=holder.proof(access), method="GET", url=API)
        assert "stale" in dpop_refused(v, access, old[0])


def test_a_percent_encoded_htu_is_the_url_it_encodes(svc: OAuthService, issuer: Issuer) -> None:
    """fwrest's token route and the verifier compare ``htu`` alike: the path read as the
    router reads a target (``/%6Frders`` is ``/orders``; dot segments removed)."""
    port = svc["EC"]
    holder = Holder("EdDSA")
    grant = {"grant_type": "password", "username": ADA[0], "password": ADA[1]}
    base, _, route = port.token_url.rpartition("/")  # .../fw/oauth2/token
    encoded = f"{base}/%74{route[1:]}"  # .../fw/oauth2/%74oken
    answer = port.http.post(port.token_url, data=grant,
                            headers={"DPoP": holder.proof("", "POST", encoded)})  # fmt: skip
    assert answer.status_code == 200, answer.text  # the server takes it
    access = issuer.token({"jkt": holder.jkt})
    with Verifier(issuer.url, audience="API", verify=issuer.ca) as v:  # type: ignore[attr-defined]
        url = "https://api.example.com/%6Frders"
        assert v.verify(access, dpop_proof=holder.proof(access, url=url), method="GET", url=API)
        proof = holder.proof(access)  # and the request's URL encoded, the proof's not
        assert v.verify(access, dpop_proof=proof, method="GET", url=url)
        assert "another URL" in dpop_refused(
            v, access, holder.proof(access, url="https://api.example.com/%6Frder")
        )
        # dot segments, empty segments and a trailing slash as the router reads them; a path
        # the router refuses names nothing
        dotted = "https://api.example.com/x/..//orders/./"
        assert v.verify(access, dpop_proof=holder.proof(access, url=dotted), method="GET", url=API)
        for refused in ("/../orders", "/x%2F../orders", "/%zzorders"):
            url = "https://api.example.com" + refused
            assert "another URL" in dpop_refused(v, access, holder.proof(access, url=url)), url


def test_two_dpop_header_lines_are_refused(issuer: Issuer, asgi_app: str) -> None:
    """RFC 9449 4.3 (1): not more than one DPoP header field, by the middleware, the
    dependency and ``verify`` given the lines (a list, or joined with a comma)."""
    holder = Holder()
    access = issuer.token({"jkt": holder.jkt})
    for path in ("/mw/orders", "/dep"):
        url = asgi_app + path
        one = [("Authorization", f"DPoP {access}"), ("DPoP", holder.proof(access, url=url))]
        good = httpx.get(url, headers=one, timeout=15)
        assert good.status_code == 200, (path, good.text)
        two = [*one[:1], ("DPoP", holder.proof(access, url=url)),
               ("DPoP", holder.proof(access, url=url))]  # fmt: skip
        refused = httpx.get(url, headers=two, timeout=15)
        assert refused.status_code == 401, (path, refused.text)
        assert "more than one DPoP proof" in refused.text  # JSON (middleware) or text
        challenge = refused.headers["www-authenticate"]
        assert challenge.startswith('DPoP error="invalid_dpop_proof"'), challenge
    with Verifier(issuer.url, audience="API", verify=issuer.ca) as v:  # type: ignore[attr-defined]
        first, second = holder.proof(access), holder.proof(access)
        for given in ([first, second], f"{first}, {second}", (first, first)):
            assert "more than one" in dpop_refused(v, access, given)
        assert v.verify(access, dpop_proof=[first], method="GET", url=API)
