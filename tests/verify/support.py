"""A running fwrest issuing the tokens the ``fwrest.verify`` tests verify: ``fwrest serve`` of
``EC`` (ES256), ``RSA`` (RS256), ``HS`` (HS256, nothing published), sqlite, one user with scopes,
client ``web``, and docs/verifying-tokens.md's ``orders-api`` (lists ``introspect``) and
``shop-web`` (does not)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import trustme

from tests.auth.oauth2_support import ADA as USER
from tests.auth.oauth2_support import WEB, OAuthService, oauth_section, params_source, serve_oauth
from tests.conftest import APP_SOURCE, free_config, run_forked, wait_for
from tests.docs.blocks import example

SCOPES = ["orders:read", "orders:write", "orders:admin"]
ADA = ("ada", "Ada-Pw-7731")
CLIENT = ("web", "Web-Secret-9q")
# docs/verifying-tokens.md's clients: a front end's, a resource server's (with introspect)
_GUIDE = json.loads(example("verifying-introspect-client").text)["client"]
_RESOURCE = next(entry for entry in _GUIDE if "introspect" in entry.get("scopes", ()))
RESOURCE = (_RESOURCE["client_id"], _RESOURCE["client_secret"])
ORDINARY = (_GUIDE[0]["client_id"], _GUIDE[0]["client_secret"])  # a client without it
_OTHERS = [_GUIDE[0], _RESOURCE]
APP = APP_SOURCE + params_source(
    **WEB, client=_OTHERS, users=[{**USER, "scopes": SCOPES}], access_expires="10m"
)
ALGS = {"EC": "ES256", "RSA": "RS256"}


def _write(folder: Path, certs: dict[str, Path]) -> Path:
    servers = {name: oauth_section(certs, onAuthparams="app.params", signingAlg=alg)
               for name, alg in ALGS.items()}  # fmt: skip
    servers["HS"] = oauth_section(certs, onAuthparams="app.params")
    extra = {"HTTPSERVER": {"StateStore": "sqlite"}}
    return free_config(folder, servers=servers, app=APP, extra=extra)


def serve_issuer(ca: trustme.CA, folder: Path) -> Iterator[OAuthService]:
    """``fwrest serve`` of the module's service (a module fixture: ``yield from``)."""
    yield from serve_oauth(ca, folder, _write)


def issuer(svc: OAuthService, port: str) -> str:
    """A port's issuer: ``https://127.0.0.1:{port}/rest`` (derived, SPEC 12.2)."""
    return svc.proc.url(port)


def token(svc: OAuthService, port: str = "EC", **extra: str) -> str:
    return str(svc[port].tokens(*ADA, **extra)["access_token"])


def kid_of(access_token: str) -> str:
    return str(jwt.get_unverified_header(access_token)["kid"])


def signed_by_fwrest(svc: OAuthService, alg: str, claims: dict[str, Any]) -> str:
    """Signed with fwrest's current ``alg`` key and kid (from its key set), the test's claims."""
    for key in json.loads((svc.folder / ".fwrest" / "keyset.json").read_text())["keys"]:
        if key["alg"] == alg and key["current"]:
            headers = {"typ": "at+jwt", "kid": key["kid"]}
            return jwt.encode(claims, key["pem"], algorithm=alg, headers=headers)
    raise AssertionError(f"no current {alg} key")


def claims_for(iss: str, aud: str = "EC", ttl: int = 600, **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": iss, "aud": aud, "sub": "ada", "client_id": "web", "iat": now,
            "exp": now + ttl, "jti": "j" * 32, "scope": "default", **extra}  # fmt: skip


def revoke(svc: OAuthService, refresh_token: str) -> None:
    """Revokes ``refresh_token`` (and the access tokens of its grant) at the ``EC`` port."""
    port = svc["EC"]
    answer = port.http.post(
        port.base + "/fw/oauth2/revoke", data={"token": refresh_token}, auth=CLIENT
    )
    assert answer.status_code == 200, answer.text


def rotate(svc: OAuthService, port: str = "EC") -> str:
    """``fwrest keys rotate`` forked (as an operator: tests/auth/test_keys.py); the new kid."""
    before = kid_of(token(svc, port))
    done = run_forked("keys", "rotate", str(svc.proc.config), cwd=svc.folder)
    assert done.returncode == 0, done.stderr
    found: list[str] = []

    def rotated() -> bool:
        found[:] = [kid_of(token(svc, port))]
        return found[0] != before

    took = wait_for(rotated, 30, "tokens signed with the new key")  # a hang guard
    print(f"rotated: tokens of the new key {took:.2f} s after the command returned")
    return found[0]
