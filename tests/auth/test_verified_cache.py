"""Issue 38: the bearer check remembers verified tokens (by hash, until ``exp``, bounded), so ES256
is about as fast as HS256; what can change is checked every request. In process (module
``tauth_vcache_app``): ``EC``, ``HS`` (ten-minute tokens), ``SHORT`` (three seconds). Each token is
used once, then the key leaves the set, the family is revoked, or the token expires."""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest

from tests.auth.conftest import fwrest_cli
from tests.auth.oauth2_support import (
    ADA,
    KEYS_ADA,
    WEB,
    LocalService,
    assert_invalid_token,
    expect,
    expire_retired_key,
    jwks_kids,
    local_service,
    oauth_section,
    params_source,
    wait_for,
)
from tests.conftest import APP_SOURCE, module_config

MODULE = "tauth_vcache_app"
CLIENT = WEB
APP = (
    APP_SOURCE
    + params_source(**WEB, users=[ADA], access_expires="10m")
    + params_source("short", **WEB, users=[ADA], access_expires="3s")
)


def _write(folder: Path, certs: dict[str, Path]) -> Path:
    servers = {
        "EC": oauth_section(certs, onAuthparams=f"{MODULE}.params", signingAlg="ES256"),
        "HS": oauth_section(certs, onAuthparams=f"{MODULE}.params"),
        "SHORT": oauth_section(certs, onAuthparams=f"{MODULE}.short", signingAlg="ES256"),
    }
    extra = {"HTTPSERVER": {"StateStore": "sqlite"}}
    return module_config(folder, MODULE, servers=servers, app=APP, extra=extra)


svc = local_service(_write, "vcache")


def kid_of(token: str) -> str:
    return str(jwt.get_unverified_header(token)["kid"])


def test_a_remembered_token_of_a_key_removed_from_the_set_is_refused(svc: LocalService) -> None:
    ec = svc["EC"]
    token = ec.tokens(*KEYS_ADA)["access_token"]
    assert ec.get("/hello", token).status_code == 200  # verified once: remembered
    old = kid_of(token)
    done = fwrest_cli("keys", "rotate", str(svc.config), real=False)  # tested in test_keys.py
    assert done.returncode == 0, done.stderr
    # the retired key's tokens made expired (an operator's edit): the set drops it, as a leaked key
    expire_retired_key(svc.folder, old)
    wait_for(lambda: old not in jwks_kids(ec), 10, "the removed key gone from the port's set")
    refused = ec.get("/hello", token)
    assert_invalid_token(refused)
    assert "key set" in refused.json()["detailedMessage"]
    # a token of the new key is let through, and remembered as well
    fresh = ec.tokens(*KEYS_ADA)["access_token"]
    assert kid_of(fresh) != old
    assert ec.get("/hello", fresh).status_code == 200
    assert ec.get("/hello", fresh).status_code == 200


@pytest.mark.parametrize("port", ["EC", "HS"])
def test_a_remembered_token_is_refused_once_revoked(svc: LocalService, port: str) -> None:
    client = svc[port]
    tokens = client.tokens(*KEYS_ADA)
    access = tokens["access_token"]
    assert client.get("/hello", access).status_code == 200  # remembered
    assert client.get("/hello", access).status_code == 200
    form = {"token": tokens["refresh_token"], **CLIENT}
    expect(client.http.post(client.base + "/fw/oauth2/revoke", data=form))
    refusing = "the revoked token refused (SPEC 7: within 1 s)"
    wait_for(lambda: client.get("/hello", access).status_code == 401, 10, refusing)
    refused = client.get("/hello", access)
    assert_invalid_token(refused)
    assert "revoked" in refused.json()["detailedMessage"]


def test_a_remembered_token_is_refused_once_expired(svc: LocalService) -> None:
    short = svc["SHORT"]
    access = short.tokens(*KEYS_ADA)["access_token"]
    expires = jwt.decode(access, options={"verify_signature": False})["exp"]
    assert short.get("/hello", access).status_code == 200  # remembered
    time.sleep(max(expires - time.time(), 0) + 0.05)
    refused = short.get("/hello", access)
    assert_invalid_token(refused)
    assert "expired" in refused.json()["detailedMessage"]


def test_a_token_differing_from_a_remembered_one_is_verified(svc: LocalService) -> None:
    ec = svc["EC"]
    access = ec.tokens(*KEYS_ADA)["access_token"]
    assert ec.get("/hello", access).status_code == 200  # remembered
    head, body, signature = access.split(".")
    # the same header and claims with another signature: not the remembered token
    forged = f"{head}.{body}.{signature[:-4]}AAAA"
    assert_invalid_token(ec.get("/hello", forged))
    assert ec.get("/hello", access).status_code == 200
