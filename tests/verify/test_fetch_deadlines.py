"""SPEC 16.4: ``Verifier`` and ``AsyncVerifier`` facing an issuer that answers slowly or not at all
(a TLS issuer of the test's own on a real socket, ``http.server``): every fetch's whole answer
within ``timeout``, one fetch shared by the callers that need it, a back-off after a failure, a
stale key set serving for a bounded time. ``timeout`` is shortened to 2 s (SPEC 9); the bounds
asserted are those seconds plus a loaded machine's slack, far below what a hang costs (the hangs
end at the module's teardown; each check is run under a 30 s hang guard)."""

from __future__ import annotations

import asyncio
import collections
import json
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
import trustme
from cryptography.hazmat.primitives.asymmetric import ec
from joserfc.jwk import import_key
from jwt.algorithms import ECAlgorithm

from fwrest.verify import (
    MAX_BODY,
    RETRY_FIRST_S,
    RETRY_MAX_S,
    AsyncVerifier,
    InvalidToken,
    IssuerUnavailable,
    Verifier,
)
from tests.conftest import issue_certs

TIMEOUT = 2.0  # the verifiers' timeout here
SLACK = 4.0  # a loaded machine's; a trickle cost minutes, a hang 5 s per check, one by one
AT_ONCE = 1.0  # an answer that waits for no fetch (a fetch here waits 2 s)
GUARD = 30.0  # a hang guard


class Issuer:
    """An ES256 issuer of the test's own over TLS: RFC 8414 metadata, JWK Set (``max-age=1``),
    introspection; ``modes`` make each answer ``ok``, ``hang`` (the request read, no answer),
    ``drip`` (headers, then the body a byte every 0.2 s) or ``huge`` (more than MAX_BODY)."""

    def __init__(self, certs: dict[str, Path]) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        jwk = ECAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        self.kid = import_key(jwk).thumbprint()
        self.jwks = {"keys": [{**jwk, "kid": self.kid, "alg": "ES256", "use": "sig"}]}
        self.modes: dict[str, str] = {}
        self.hits: collections.Counter[str] = collections.Counter()
        self.release = threading.Event()  # ends the hangs and drips
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self, which: str, body: dict[str, Any]) -> None:
                issuer.hits[which] += 1
                mode = issuer.modes.get(which, "ok")
                if mode == "hang":
                    issuer.release.wait(GUARD * 4)
                    return
                raw = json.dumps(body).encode()
                if mode == "huge":
                    raw = b" " * (MAX_BODY + 1) + raw
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("cache-control", "max-age=1")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                if mode != "drip":
                    self.wfile.write(raw)
                    return
                for byte in raw:
                    if issuer.release.wait(0.2):
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()

            def do_GET(self) -> None:
                if self.path == "/.well-known/oauth-authorization-server/slow":
                    self.answer("metadata", {
                        "issuer": issuer.url, "jwks_uri": issuer.url + "/jwks",
                        "introspection_endpoint": issuer.url + "/introspect",
                    })  # fmt: skip
                elif self.path == "/slow/jwks":
                    self.answer("jwks", issuer.jwks)
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                self.answer("introspect", {"active": True})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certs["cert"], certs["key"])
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/slow"
        self.ca = str(certs["ca"])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, kid: str | None = None) -> str:
        now = int(time.time())
        claims = {"iss": self.url, "aud": "API", "sub": "ada", "iat": now, "exp": now + 600,
                  "jti": uuid.uuid4().hex, "scope": "orders:read"}  # fmt: skip
        headers = {"typ": "at+jwt", "kid": kid or self.kid}
        return jwt.encode(claims, self.key, "ES256", headers=headers)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def module_issuer(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Issuer]:
    found = Issuer(issue_certs(ca, tmp_path_factory.mktemp("slow")))
    try:
        yield found
    finally:
        found.close()


@pytest.fixture
def issuer(module_issuer: Issuer) -> Issuer:
    module_issuer.modes.clear()
    module_issuer.hits.clear()
    return module_issuer


Outcome = tuple[dict[str, Any] | Exception, float]  # a check's claims or error, its seconds


class Checks:
    """A ``Verifier`` (checks in threads) or an ``AsyncVerifier`` (checks as coroutines on one
    loop) of the issuer, ``timeout`` 2 s."""

    def __init__(self, kind: str, issuer: Issuer, **kw: Any) -> None:
        self.issuer = issuer
        cls = AsyncVerifier if kind == "async" else Verifier
        self.v: Verifier | AsyncVerifier = cls(issuer.url, audience="API", verify=issuer.ca, **kw)
        self.v.timeout = TIMEOUT
        self.runner = asyncio.Runner() if kind == "async" else None

    @property
    def core(self) -> Any:
        return self.v._core

    def run(self, count: int = 1, token: str | None = None) -> list[Outcome]:
        """``count`` checks at once, each of ``token`` (the issuer's), under the hang guard."""
        token = token or self.issuer.token()
        if self.runner is None:
            assert isinstance(self.v, Verifier)
            sync = self.v
            found: list[Outcome] = []

            def one() -> None:
                started = time.monotonic()
                try:
                    claims: dict[str, Any] | Exception = sync.verify(token)
                except Exception as exc:
                    claims = exc
                found.append((claims, time.monotonic() - started))

            threads = [threading.Thread(target=one, daemon=True) for _ in range(count)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(GUARD)
            assert not any(t.is_alive() for t in threads), f"a check still waits after {GUARD} s"
            return found
        assert isinstance(self.v, AsyncVerifier)
        av = self.v

        async def one() -> Outcome:
            started = time.monotonic()
            try:
                claims: dict[str, Any] | Exception = await av.verify(token)
            except Exception as exc:
                claims = exc
            return claims, time.monotonic() - started

        async def every() -> list[Outcome]:
            return list(
                await asyncio.wait_for(asyncio.gather(*(one() for _ in range(count))), GUARD)
            )

        return self.runner.run(every())

    def warm(self) -> None:
        """A check that fetched the set (``max-age=1``), then the set gone stale."""
        [(claims, _)] = self.run()
        assert isinstance(claims, dict), claims
        time.sleep(1.2)

    def close(self) -> None:
        if isinstance(self.v, Verifier):
            self.v.close()
        else:
            assert self.runner is not None
            self.runner.run(self.v.aclose())
            self.runner.close()


@pytest.fixture(params=["sync", "async"])
def checks(request: pytest.FixtureRequest, issuer: Issuer) -> Iterator[Checks]:
    made = Checks(request.param, issuer)
    try:
        yield made
    finally:
        made.close()


def unavailable(outcome: Outcome, words: str) -> float:
    error, took = outcome
    assert isinstance(error, IssuerUnavailable), error
    assert words in error.description, error.description
    return took


def served(outcome: Outcome) -> float:
    claims, took = outcome
    assert isinstance(claims, dict), claims
    assert claims["sub"] == "ada"
    return took


def test_a_key_set_sent_a_byte_at_a_time_is_given_up_at_the_deadline(
    checks: Checks, issuer: Issuer
) -> None:
    """The metadata answers, the key set trickles (each read in time, the whole not): a new
    verifier's checks, two at once, are unavailable within the timeout; a warm one's, once its
    set is stale, are answered with the stale set, neither waiting on the other's fetch."""
    issuer.modes["jwks"] = "drip"
    outcomes = checks.run(2)
    for outcome in outcomes:
        assert unavailable(outcome, "key set was not read within 2 s") < TIMEOUT + SLACK
    assert issuer.hits["jwks"] == 1, issuer.hits  # the two shared one fetch

    warm = Checks("async" if checks.runner else "sync", issuer)
    try:
        issuer.modes.clear()
        warm.warm()
        issuer.modes["jwks"] = "drip"
        took = sorted(served(outcome) for outcome in warm.run(2))
        assert took[0] < AT_ONCE, took  # the set held served the one not fetching
        assert took[1] < TIMEOUT + SLACK, took  # the fetching one: the deadline, then it
    finally:
        warm.close()


def test_a_hung_issuer_is_asked_once_per_back_off(checks: Checks, issuer: Issuer) -> None:
    """The issuer accepts and never answers: once the set is stale, checks at once share one
    fetch and are answered with the stale set; during the back-off that follows, checks are
    answered at once without asking; after it, one fetch again (the back-off doubled); once the
    issuer answers, the new set."""
    assert (RETRY_FIRST_S, RETRY_MAX_S) == (5.0, 30.0)  # docs/verifying-tokens.md
    backoff = checks.core.key_backoff
    backoff.first = 1.5  # SPEC 9: shortened
    checks.warm()
    issuer.modes["jwks"] = "hang"
    started = time.monotonic()
    for outcome in checks.run(3):
        served(outcome)
    assert time.monotonic() - started < TIMEOUT + SLACK  # not one timeout per check
    assert issuer.hits["jwks"] == 2, issuer.hits
    for _ in range(3):  # the back-off: answered at once, the issuer not asked
        assert served(checks.run()[0]) < AT_ONCE
    assert issuer.hits["jwks"] == 2, issuer.hits
    time.sleep(max(backoff.until - time.monotonic(), 0) + 0.1)
    served(checks.run()[0])  # the back-off over: asked once more; failing, 3 s of back-off
    assert issuer.hits["jwks"] == 3, issuer.hits
    assert backoff.until - time.monotonic() > 2.0  # doubled
    issuer.modes.clear()
    assert served(checks.run()[0]) < AT_ONCE
    assert issuer.hits["jwks"] == 3, issuer.hits
    time.sleep(max(backoff.until - time.monotonic(), 0) + 0.1)
    served(checks.run()[0])
    assert issuer.hits["jwks"] == 4, issuer.hits
    assert not checks.core.keys_stale()


def test_a_stale_set_serves_for_a_bounded_time_while_the_issuer_is_unreachable(
    checks: Checks, issuer: Issuer
) -> None:
    """A stale set serves while the issuer cannot be read, up to ``stale_grace_s`` (15 minutes;
    1.5 s here) past its max-age; then checks are unavailable, not answered with it."""
    assert checks.core.stale_grace_s == 900
    checks.core.stale_grace_s = 1.5
    checks.warm()  # stale 0.2 s ago
    issuer.modes["jwks"] = "hang"
    served(checks.run()[0])
    time.sleep(1.5)
    assert unavailable(checks.run()[0], "key set was not read") < AT_ONCE  # the back-off's


def test_a_new_verifier_facing_a_hung_issuer_asks_once(checks: Checks, issuer: Issuer) -> None:
    """Three first checks at once against metadata that never comes: one request, each check
    unavailable within one timeout; the next check, at once, without asking."""
    issuer.modes["metadata"] = "hang"
    for outcome in checks.run(3):
        assert unavailable(outcome, "metadata was not read within 2 s") < TIMEOUT + SLACK
    assert unavailable(checks.run()[0], "metadata") < AT_ONCE
    assert issuer.hits["metadata"] == 1, issuer.hits
    # a malformed token is still refused as such, before any key is needed
    [(error, _)] = checks.run(token="not-a-token")
    assert isinstance(error, InvalidToken), error


def test_an_answer_larger_than_the_cap_is_not_read(checks: Checks, issuer: Issuer) -> None:
    issuer.modes["jwks"] = "huge"
    unavailable(checks.run()[0], f"key set is larger than {MAX_BODY} bytes")


def test_a_hung_introspection_is_given_up_then_backed_off(issuer: Issuer) -> None:
    """Introspection that never answers: the check is unavailable within the timeout, and the
    next one at once (its back-off), the issuer not asked again meanwhile."""
    for kind in ("sync", "async"):
        issuer.hits.clear()
        checks = Checks(kind, issuer, introspect=("orders-api", "secret"))
        try:
            served(checks.run()[0])
            issuer.modes["introspect"] = "hang"
            fresh = issuer.token()  # a token not introspected yet
            took = unavailable(checks.run(token=fresh)[0], "introspection was not read within")
            assert took < TIMEOUT + SLACK
            assert unavailable(checks.run(token=issuer.token())[0], "introspection") < AT_ONCE
            assert issuer.hits["introspect"] == 2, issuer.hits
        finally:
            issuer.modes.clear()
            checks.close()
