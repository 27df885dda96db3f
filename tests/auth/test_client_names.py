"""Users, clients and ``onAuthNoCheckUri`` locations kept apart (issue 34), in process: a client
credentials token keeps ``sub`` = client id (SPEC 12.4) with ``fw_kind: "client"``, and is
``client:<id>`` to the application (``getAuthUser()``, ``onAdmin``, the audit actor), a name no user
may have; names folding together (case, NFKC) are refused at start; a pattern beginning with a
location's prefix is that location's only."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import trustme
from argon2 import PasswordHasher

from tests.auth.conftest import check
from tests.auth.oauth2_support import (
    LocalService,
    OAuthPort,
    assert_error,
    expect,
    fresh_claims,
    issuer_of,
    local_service,
    oauth_section,
    sign,
    signing_key,
)
from tests.conftest import APP_SOURCE, issue_certs, module_config, wait_for

ADA = ("ada", "Ada-Pw-1")
ADMIN = ("admin", "Admin-Secret-1")  # a client, named as a naive onAdmin's user
OPS = ("ops", "Ops-Secret-2")  # a client onAdmin names as client:ops; its secret hashed
OPS_HASH = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash(OPS[1])
AUDIT = "/fw/rest/audit"
CONFIG = "/fw/rest/config"
INTROSPECT = "/fw/oauth2/introspect"

APP = (
    APP_SOURCE
    + f"""

def names_params():
    return {{"client": [{{"client_id": "web", "client_secret": "Web-Secret-9q"}},
                       {{"client_id": "admin", "client_secret": "Admin-Secret-1"}},
                       {{"client_id": "ops", "client_secret": {OPS_HASH!r}}}],
             "users": [{{"username": "ada", "password": "Ada-Pw-1"}}],
             "types": [{{"grant_type": "password"}}, {{"grant_type": "client_credentials"}}]}}


def names_legacy(params):
    # the legacy form, filling in the password of whichever user the request names
    params.update(client_id="web", client_secret="Web-Secret-9q")
    params["password"] = "Pw-" + params.get("username", "")


def names_admin(user):
    return user in ("admin", "client:ops")


def names_nocheck():
    return ["/app/hello", "/items/:id"]


@get("/whoami")
def whoami():
    return {{"user": rest.getAuthUser()}}
"""
)


MODULE = "tauth_client_names_app"


def write_service(folder: Path, certs: dict[str, Path]) -> Path:
    section = oauth_section(certs, locations="ROOT,APP", onAuthparams=f"{MODULE}.names_params",
                            onAdmin=f"{MODULE}.names_admin",
                            onAuthNoCheckUri=f"{MODULE}.names_nocheck")  # fmt: skip
    legacy = oauth_section(certs, onAuthparams=f"{MODULE}.names_legacy")
    extra = {"APP": {"Path": "/app", "ThreadPool": "POOL"}}
    servers = {"NAMES": section, "LEGACY": legacy}
    return module_config(folder, MODULE, servers=servers, extra=extra, app=APP)


svc = local_service(write_service, "client-names")


@pytest.fixture(scope="module")
def port(svc: LocalService) -> OAuthPort:
    return svc["NAMES"]


def client_token(port: OAuthPort, client: tuple[str, str]) -> str:
    answer = expect(port.post({"grant_type": "client_credentials"}, auth=client))
    return str(answer.json()["access_token"])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json"}


def post_json(port: OAuthPort, path: str, body: Any, token: str) -> httpx.Response:
    headers = {**bearer(token), "Content-Type": "application/json"}
    return port.http.post(port.base + path, content=json.dumps(body), headers=headers)


def test_a_client_named_admin_is_not_the_user_admin(port: OAuthPort) -> None:
    token = client_token(port, ADMIN)
    claims = jwt.decode(token, options={"verify_signature": False})
    # SPEC 12.4 as written: sub is the client id; the kind says it is no user's
    assert (claims["sub"], claims["client_id"], claims["fw_kind"]) == ("admin", "admin", "client")
    assert port.get("/whoami", token).json() == {"user": "client:admin"}
    # onAdmin(user) == "admin" does not let the client in
    assert port.get(AUDIT, token).status_code == 403
    assert post_json(port, CONFIG, {"rest_log_level": 5}, token).status_code == 403
    expect(post_json(port, "/fw/oauth2/revoke-user", {"username": "ada"}, token), 403)
    # a user's token is the user's, as before
    user = port.tokens(*ADA, client_id=ADMIN[0], client_secret=ADMIN[1])["access_token"]
    assert port.get("/whoami", user).json() == {"user": "ada"}


def test_on_admin_lets_a_client_in_by_its_client_name_and_the_audit_names_it(
    port: OAuthPort,
) -> None:
    token = client_token(port, OPS)  # its secret is an argon2id hash
    assert port.get("/whoami", token).json() == {"user": "client:ops"}
    try:
        expect(post_json(port, CONFIG, {"rest_log_level": 4}, token))

        def actors() -> list[str]:
            url = port.base + AUDIT + "?event=settings.change"
            trail = expect(port.http.get(url, headers=bearer(token)))
            return [event["actor"] for event in trail.json()]

        wait_for(actors, 15, "the settings change in the audit trail")
        assert actors()[0] == "client:ops", actors()
    finally:
        assert post_json(port, CONFIG, {"rest_log_level": None}, token).status_code == 200


def test_a_hashed_client_secret_is_checked_as_a_password_is(port: OAuthPort) -> None:
    wrong = port.post({"grant_type": "client_credentials"}, auth=(OPS[0], OPS[1] + "x"))
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client", wrong.text
    expect(port.post({"grant_type": "client_credentials"}, auth=(OPS[0], OPS_HASH)), 401)


@pytest.mark.parametrize("name", ["client:web", "Client:web", "\uff43lient:web"])
def test_a_user_name_of_a_client_token_is_invalid_grant_not_a_500(
    svc: LocalService, name: str
) -> None:
    port = svc["LEGACY"]
    assert_error(port.grant(name, "Pw-" + name), "invalid_grant")
    assert port.grant("someone", "Pw-someone").status_code == 200


def test_a_client_token_of_an_earlier_release_is_a_clients_too(svc: LocalService) -> None:
    port = svc["NAMES"]
    claims = fresh_claims(sub="admin", aud="NAMES", iss=issuer_of(port))
    claims["client_id"] = "admin"  # sub = client_id, no fw_kind
    token = sign(claims, signing_key(svc.folder))
    assert port.get("/whoami", token).json() == {"user": "client:admin"}
    assert port.get(AUDIT, token).status_code == 403


def test_the_introspection_of_a_client_token_names_no_user(port: OAuthPort) -> None:
    token = client_token(port, OPS)
    answer = expect(port.http.post(port.base + INTROSPECT, data={"token": token}, auth=OPS))
    described = answer.json()
    assert described["active"] is True and described["sub"] == "ops"
    assert described["client_id"] == "ops" and "username" not in described
    user = port.tokens(*ADA, client_id=OPS[0], client_secret=OPS[1])["access_token"]
    about_user = port.http.post(port.base + INTROSPECT, data={"token": user}, auth=OPS).json()
    assert about_user["username"] == "ada"


def test_a_pattern_with_a_locations_prefix_is_that_locations_only(port: OAuthPort) -> None:
    origin = port.base.removesuffix("/rest")
    http = port.http
    # "/app/hello" is the location /app's: open there ...
    assert http.get(origin + "/app/hello").status_code == 200
    # ... and not a path relative to the location /rest (it was: 404 instead of 401)
    assert http.get(origin + "/rest/app/hello").status_code == 401
    assert http.get(origin + "/rest/hello").status_code == 401
    # a relative pattern is every location's
    assert http.get(origin + "/rest/items/7").status_code == 200
    assert http.get(origin + "/app/items/7").status_code == 200


# -- the start and `fwrest check` --------------------------------------------------------------


def checked(folder: Path, servers: dict[str, Any], app: str = APP, *, real: bool = False,
            **extra: Any) -> Any:  # fmt: skip
    """``fwrest check``, real or in process (a unique module name: it is imported here)."""
    module = f"tauth_names_check_{uuid.uuid4().hex[:12]}"
    text = json.dumps(servers).replace('"app.', f'"{module}.')
    config = module_config(folder, module, servers=json.loads(text), extra=extra, app=app)
    return check(config, real=real)


def users(*names: str) -> list[dict[str, str]]:
    """User entries of these names, each with a password of its own."""
    return [{"username": name, "password": "ab"[i % 2]} for i, name in enumerate(names)]


@pytest.mark.parametrize(
    ("params", "message"),
    [({"users": users("newuser", "NEWUSER")}, "the user 'NEWUSER' and the user 'newuser' are one name"),
     ({"users": users("newuser", "\uff4e\uff45\uff57\uff55\uff53\uff45\uff52")}, "are one name"),
     ({"client_id": "Admin", "client_secret": "s", "users": users("admin")},
      "the client 'Admin' and the user 'admin' are one name"),
     ({"users": users("client:web")}, "begins with 'client:'")],
)  # fmt: skip
def test_the_start_refuses_a_params_file_whose_names_fold_to_one(
    tmp_path: Path, ca: trustme.CA, params: dict[str, Any], message: str
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    (tmp_path / "params.json").write_text(json.dumps(params))
    section = oauth_section(certs, onAuthparams="file:params.json")
    result = checked(tmp_path, {"TOK": section}, real="NEWUSER" in message)  # one for real
    assert result.returncode != 0, result.stdout + result.stderr
    assert message in result.stderr, result.stderr


FUNCTION_APP = (
    APP_SOURCE
    + """

def folded_params():
    return {
        "client": [{"client_id": "Admin", "client_secret": "s"},
                   {"client_id": "svc", "client_secret": "t", "scopes": ["introspect"]}],
        "users": [{"username": "admin", "password": "a"},
                  {"username": "bob", "password": "b"},
                  {"username": "cy", "password": "c", "scopes": []}],
    }


def paths():
    return ["/app/*", "/hello"]
"""
)


def test_check_warns_about_folded_names_introspect_and_pattern_reach(
    tmp_path: Path, ca: trustme.CA
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    params = {"onAuthparams": "app.folded_params", "onAuthNoCheckUri": "app.paths"}
    section = oauth_section(certs, locations="ROOT,APP", **params)
    extra = {
        "ROOT": {"Path": "/", "ThreadPool": "POOL"},
        "APP": {"Path": "/app", "ThreadPool": "POOL"},
    }
    result = checked(tmp_path, {"TOK": section}, app=FUNCTION_APP, **extra)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "the client 'Admin' and the user 'admin' are one name" in out, out
    # bob lists no scopes: through svc he may be granted introspect; cy lists [] and may not
    assert "the client 'svc' may be granted 'introspect'" in out, out
    assert "users without scopes ('admin', 'bob')" in out, out
    # /app/* written for the root location opens the location /app's routes
    assert "onAuthNoCheckUri '/app/*' begins with the prefix of the location /app" in out, out
    assert "GET /app/hello" in out, out
    # /hello is relative: every location's
    assert "onAuthNoCheckUri '/hello' is relative" in out, out
    assert "GET /hello, GET /app/hello; write a location's prefix" in out, out
    assert "(e.g. '/app/hello')" in out, out
