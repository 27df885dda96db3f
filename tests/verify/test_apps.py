"""SPEC 16.4's adapters (``Verifier.require`` in a worker thread, ``AsyncVerifier.require``,
``VerifyMiddleware``, an introspecting verifier) in a FastAPI app under uvicorn, verifying a real
``fwrest serve`` over TLS."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from tests.auth.oauth2_support import OAuthService, uvicorn_app
from tests.docs.blocks import example
from tests.verify.support import (
    ADA,
    CLIENT,
    claims_for,
    issuer,
    kid_of,
    revoke,
    rotate,
    serve_issuer,
    signed_by_fwrest,
    token,
)

APP = textwrap.dedent(
    """
    import os

    from fastapi import Depends, FastAPI, Request

    from fwrest.verify import AsyncVerifier, Verifier, VerifyMiddleware

    ISSUER, CA = os.environ["RS_ISSUER"], os.environ["RS_CA"]
    CLIENT = tuple(os.environ["RS_CLIENT"].split(":"))

    verifier = Verifier(ISSUER, audience="EC", verify=CA)
    async_verifier = AsyncVerifier(ISSUER, audience="EC", verify=CA)
    audited = AsyncVerifier(ISSUER, audience="EC", verify=CA, introspect=CLIENT)
    audited.introspect_cache_s = 0  # every request asks (the test revokes, then asks at once)

    app = FastAPI()

    @app.get("/orders")
    def orders(claims: dict = Depends(verifier.require(scopes=["orders:read"]))):
        return {"user": claims["sub"], "scope": claims["scope"]}

    @app.get("/async-orders")
    async def async_orders(claims: dict = Depends(async_verifier.require(scopes=["orders:read"]))):
        return {"user": claims["sub"]}

    @app.get("/audited")
    async def audited_route(claims: dict = Depends(audited.require())):
        return {"user": claims["sub"]}

    guarded = FastAPI()
    guarded.add_middleware(VerifyMiddleware, verifier=verifier, scopes=["orders:read"])

    @guarded.get("/whoami")
    async def whoami(request: Request):
        return {"user": request.scope["fwrest.claims"]["sub"]}

    app.mount("/mw", guarded)
    """
)
ROUTES = ("/orders", "/async-orders", "/mw/whoami")


@pytest.fixture(scope="module")
def svc(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthService]:
    yield from serve_issuer(ca, tmp_path_factory.mktemp("verify-apps"))


def fastapi_app(svc: OAuthService, folder: Path, source: str) -> Iterator[str]:
    """``source`` as a FastAPI app under uvicorn (its own process); its base URL."""
    env = {"RS_ISSUER": issuer(svc, "EC"), "RS_CA": str(svc.certs["ca"])}
    yield from uvicorn_app(folder, "rs_fastapi", source, {**env, "RS_CLIENT": ":".join(CLIENT)})


@pytest.fixture(scope="module")
def app(svc: OAuthService, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from fastapi_app(svc, tmp_path_factory.mktemp("fastapi"), APP)


@pytest.fixture(scope="module")
def guide_app(svc: OAuthService, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """docs/verifying-tokens.md's FastAPI example as written (this issuer, CA file and section)."""
    source = (
        example("verifying-fastapi")
        .text.replace('"https://api.example.com/rest"', repr(issuer(svc, "EC")))
        .replace('"ca.pem"', repr(str(svc.certs["ca"])))
        .replace('"HTTPS_REST"', '"EC"')
    )
    yield from fastapi_app(svc, tmp_path_factory.mktemp("fastapi-guide"), source)


def call(url: str, access_token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {access_token}"} if access_token else {}
    return httpx.get(url, headers=headers, timeout=15)


def test_refusals_carry_the_rfc_6750_challenges(svc: OAuthService, app: str) -> None:
    iss = issuer(svc, "EC")
    claims = {"expired": claims_for(iss, ttl=-120, scope="orders:read"),
              "another issuer": claims_for("https://other.example/rest", scope="orders:read"),
              "another audience": claims_for(iss, aud="RSA", scope="orders:read")}  # fmt: skip
    bad = {why: signed_by_fwrest(svc, "ES256", each) for why, each in claims.items()}
    no_scope = token(svc)  # scope default: not orders:read
    for route in ROUTES:
        missing = call(app + route)
        assert missing.status_code == 401, (route, missing.text)
        assert missing.headers["www-authenticate"] == "Bearer", route
        for why, forged in bad.items():
            answer = call(app + route, forged)
            assert answer.status_code == 401, (route, why, answer.text)
            challenge = answer.headers["www-authenticate"]
            assert challenge.startswith('Bearer error="invalid_token"'), (route, why, challenge)
            assert why in challenge, (route, why, challenge)
        scoped = call(app + route, no_scope)
        assert scoped.status_code == 403, (route, scoped.text)
        insufficient = 'Bearer error="insufficient_scope", scope="orders:read"'
        assert scoped.headers["www-authenticate"].startswith(insufficient), route


def test_a_key_rotation_on_fwrest_is_followed(svc: OAuthService, app: str) -> None:
    before = token(svc, scope="orders:read")  # each adapter lets it through, with its claims
    for route in ROUTES:
        answer = call(app + route, before)
        assert answer.status_code == 200 and answer.json()["user"] == "ada", (route, answer.text)
    assert call(app + "/orders", before).json()["scope"] == "orders:read"
    kid = rotate(svc, "EC")
    after = token(svc, scope="orders:read")
    assert kid_of(after) == kid != kid_of(before)
    for route in ROUTES:
        answer = call(app + route, after)
        assert answer.status_code == 200, (route, answer.text)
        # the tokens of the earlier key still verify until they expire
        assert call(app + route, before).status_code == 200, route


def test_a_revoked_token_is_refused_by_the_introspecting_verifier(
    svc: OAuthService, app: str
) -> None:
    pair = svc["EC"].tokens(*ADA)
    assert call(app + "/audited", pair["access_token"]).status_code == 200
    revoke(svc, pair["refresh_token"])
    answer = call(app + "/audited", pair["access_token"])
    assert answer.status_code == 401, answer.text
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]
    assert "not active" in answer.json()["detail"]


def test_the_guide_s_fastapi_example_verifies_fwrest_s_tokens(
    svc: OAuthService, guide_app: str
) -> None:
    reader = token(svc, scope="orders:read")
    assert call(guide_app + "/orders", reader).json() == {"user": "ada"}
    assert call(guide_app + "/orders").status_code == 401
    refused = call(guide_app + "/admin/whoami", reader)
    assert refused.status_code == 403, refused.text
    assert 'scope="orders:admin"' in refused.headers["www-authenticate"]
    admin = token(svc, scope="orders:admin")
    assert call(guide_app + "/admin/whoami", admin).json() == {"user": "ada"}
    # a token of fwrest's other port (another issuer and audience) is refused
    assert call(guide_app + "/orders", token(svc, "RSA", scope="orders:read")).status_code == 401
