"""SPEC 7.1: an access token is valid only on the section that issued it. ``SHOP`` (ada, bob) and
``ADMIN`` (ada) share the signing key and one sqlite store (module ``tauth_audience_app``), so a
refresh token tried on the wrong port is looked for in the store that holds it."""

from __future__ import annotations

from pathlib import Path

import jwt

from tests.auth.oauth2_support import (
    ADA,
    WEB,
    LocalService,
    assert_error,
    expect,
    fresh_claims,
    issuer_of,
    local_service,
    oauth_section,
    params_source,
    sign,
    signing_key,
)
from tests.conftest import APP_SOURCE, module_config

SHOP = {**WEB, "types": [{"grant_type": "password"}, {"grant_type": "refresh_token"}]}
BOB = {"username": "bob", "password": "Bob-Pw-2207"}
APP = (
    APP_SOURCE
    + params_source("shop_params", **SHOP, users=[ADA, BOB])
    + params_source("admin_params", **SHOP, users=[ADA])
)


MODULE = "tauth_audience_app"


def _write(folder: Path, certs: dict[str, Path]) -> Path:
    servers = {
        "SHOP": oauth_section(certs, onAuthparams=f"{MODULE}.shop_params"),
        "ADMIN": oauth_section(certs, onAuthparams=f"{MODULE}.admin_params"),
    }
    extra = {"HTTPSERVER": {"StateStore": "sqlite"}}  # one store for both ports' workers
    return module_config(folder, MODULE, servers=servers, app=APP, extra=extra)


svc = local_service(_write, "audience")


def test_an_access_token_names_its_section_and_works_there_only(svc: LocalService) -> None:
    shop, admin = svc["SHOP"], svc["ADMIN"]
    tokens = shop.tokens("bob", "Bob-Pw-2207", **WEB)
    claims = jwt.decode(tokens["access_token"], options={"verify_signature": False})
    assert claims["aud"] == "SHOP"
    assert shop.get("/hello", tokens["access_token"]).status_code == 200
    refused = expect(admin.get("/hello", tokens["access_token"]), 401)
    assert 'error="invalid_token"' in refused.headers["www-authenticate"]
    assert "another server" in refused.headers["www-authenticate"]
    # a user both ports know is refused across them as well
    ada = admin.tokens("ada", "Ada-Pw-7731", **WEB)
    assert admin.get("/hello", ada["access_token"]).status_code == 200
    assert shop.get("/hello", ada["access_token"]).status_code == 401


def test_a_refresh_token_of_another_section_is_refused_and_not_spent(svc: LocalService) -> None:
    shop, admin = svc["SHOP"], svc["ADMIN"]
    tokens = shop.tokens("ada", "Ada-Pw-7731", **WEB)
    assert_error(admin.refresh(tokens["refresh_token"], **WEB), "invalid_grant")
    home = shop.refresh(tokens["refresh_token"], **WEB)
    assert home.status_code == 200, home.text  # not spent by the refusal, no replay either
    fresh = home.json()
    assert shop.get("/hello", fresh["access_token"]).status_code == 200


def test_a_token_without_aud_or_with_a_foreign_one_is_refused(svc: LocalService) -> None:
    key = signing_key(svc.folder)
    shop = svc["SHOP"]
    iss = issuer_of(shop)
    assert shop.get("/hello", sign(fresh_claims(aud="SHOP", iss=iss), key)).status_code == 200
    missing = {k: v for k, v in fresh_claims(aud="SHOP", iss=iss).items() if k != "aud"}
    foreign: list[object] = ["ADMIN", ["ADMIN"], [], "", ["SHOP", 1], {"SHOP": 1}, 7, None]
    for claims in (missing, *(fresh_claims(aud=aud, iss=iss) for aud in foreign)):
        response = shop.get("/hello", sign(claims, key))
        assert response.status_code == 401, (claims.get("aud"), response.text)
        assert 'error="invalid_token"' in response.headers["www-authenticate"]


def test_the_aud_names_the_section_in_any_case(svc: LocalService) -> None:
    """SPEC 9: sections are case-insensitive: ``aud`` in any spelling, or a list naming it."""
    key = signing_key(svc.folder)
    shop = svc["SHOP"]
    iss = issuer_of(shop)
    for aud in ("shop", "Shop", ["ADMIN", "shop"], ["SHOP"]):
        response = shop.get("/hello", sign(fresh_claims(aud=aud, iss=iss), key))
        assert response.status_code == 200, (aud, response.text)
    assert (
        svc["ADMIN"].get("/hello", sign(fresh_claims(aud="shop", iss=iss), key)).status_code == 401
    )
