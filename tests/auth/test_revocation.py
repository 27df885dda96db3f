"""SPEC 12.3: revocation (RFC 7009), introspection (RFC 7662) and revocation by user, in process
(module ``tauth_revocation_app``; one sqlite store both ports share). ``OAUTH``: clients ``web``,
``mobile``; users ``ada``, ``bob``, ``cy``; ``onAdmin`` lets only ada revoke by user. ``OTHER``:
another port's tokens. Real clients, workers and hosts: tests/e2e/test_revocation_e2e.py,
test_hosts_state.py."""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
import pytest

from fwrest.auth.oauth2.grants import refresh_hash
from tests.auth.conftest import in_process  # for real: tests/e2e/test_revocation_e2e.py
from tests.auth.oauth2_support import (
    LocalOAuth,
    LocalService,
    assert_error,
    error_of,
    expect,
    fresh_claims,
    issuer_of,
    local_service,
    oauth_section,
    params_source,
    sign,
    signing_key,
    wait_for,
)
from tests.conftest import APP_SOURCE, module_config

MODULE = "tauth_revocation_app"
REVOKE = "/fw/oauth2/revoke"
INTROSPECT = "/fw/oauth2/introspect"
REVOKE_USER = "/fw/oauth2/revoke-user"
WEB = {"client_id": "web", "client_secret": "Web-Secret-9q"}
MOBILE = {"client_id": "mobile", "client_secret": "Mob-Secret-4x"}
# a resource server's own client: its entry lists introspect (it sees every token of the port)
ORDERS_API = {"client_id": "orders-api", "client_secret": "Orders-Secret-5w"}
USERS = {"ada": "Ada-Pw-7731", "bob": "Bob-Pw-2207", "cy": "Cy-Pw-1188"}

PEOPLE = [{"username": user, "password": password} for user, password in USERS.items()]
APP = (
    APP_SOURCE
    + params_source(
        "revocation_params",
        client=[WEB, MOBILE, {**ORDERS_API, "scopes": ["introspect"]}],
        users=PEOPLE,
        access_expires="1h",
    )
    + """

def revocation_admin(user):
    return user == "ada"


def revocation_anyone(user):
    return True
"""
)


def _write(folder: Path, certs: dict[str, Path]) -> Path:
    params = f"{MODULE}.revocation_params"
    servers = {
        "OAUTH": oauth_section(certs, onAuthparams=params, onAdmin=f"{MODULE}.revocation_admin"),
        "OTHER": oauth_section(certs, onAuthparams=params),
        "OPENED": oauth_section(certs, onAuthparams=params, onAdmin=f"{MODULE}.revocation_anyone"),
    }
    # revoke-user opened to requests without a token, and an onAdmin that says yes to all
    servers["OPENED"]["FwData"]["NativeRoutes"] = {"public": ["oauth2/revoke-user"]}
    extra = {
        "HTTPSERVER": {"StateStore": "sqlite", "LogFile": "server.log"},
        "GENERAL": {"rest_log_level": 5},  # bodies and headers in the log: none may leak
    }
    return module_config(folder, MODULE, servers=servers, app=APP, extra=extra)


svc = local_service(_write, "revocation")


@pytest.fixture
def port(svc: LocalService) -> LocalOAuth:
    return svc["OAUTH"]


def login(port: LocalOAuth, user: str = "bob", client: dict[str, str] = WEB) -> dict[str, Any]:
    return port.tokens(user, USERS[user], **client)


def revoke(port: LocalOAuth, data: dict[str, str], **kw: Any) -> Any:
    return port.http.post(port.base + REVOKE, data=data, **kw)


def introspect(port: LocalOAuth, data: dict[str, str], **kw: Any) -> Any:
    return port.http.post(port.base + INTROSPECT, data=data, **kw)


def assert_revoked(port: LocalOAuth, tokens: dict[str, Any]) -> None:
    refused = expect(port.get("/hello", tokens["access_token"]), 401)
    assert "revoked" in refused.headers["www-authenticate"]
    assert_error(port.refresh(tokens["refresh_token"], **WEB), "invalid_grant")


def assert_valid(port: LocalOAuth, tokens: dict[str, Any]) -> None:
    assert port.get("/hello", tokens["access_token"]).status_code == 200
    answer = introspect(port, {"token": tokens["refresh_token"], **WEB})
    assert answer.json()["active"] is True, answer.text


def assert_empty_200(response: Any) -> None:
    assert response.status_code == 200, response.text
    assert response.content == b""
    assert response.headers["cache-control"] == "no-store"


# -- revocation --------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["refresh_token", "access_token"])
def test_revoking_either_token_revokes_its_whole_family(port: LocalOAuth, which: str) -> None:
    first = login(port)
    rotated = port.refresh(first["refresh_token"], **WEB).json()  # the family's second pair
    other_family = login(port)  # the same user, another login
    assert port.get("/hello", first["access_token"]).status_code == 200
    hint = {"token_type_hint": which} if which == "access_token" else {}
    assert_empty_200(revoke(port, {"token": rotated[which], **hint, **WEB}))
    assert_revoked(port, rotated)
    # the family's earlier access token too (issued from the first refresh token)
    assert port.get("/hello", first["access_token"]).status_code == 401
    assert_valid(port, other_family)
    # revoked again: still 200, nothing else changes
    assert_empty_200(revoke(port, {"token": rotated[which], **WEB}))
    assert_valid(port, other_family)


def test_a_token_of_another_client_is_answered_200_and_not_revoked(
    port: LocalOAuth, svc: LocalService
) -> None:
    tokens = login(port, client=MOBILE)
    for which in ("refresh_token", "access_token"):
        assert_empty_200(revoke(port, {"token": tokens[which], **WEB}))
        # no credentials: the first client, web, as on the token route
        assert_empty_200(revoke(port, {"token": tokens[which]}))
    assert port.get("/hello", tokens["access_token"]).status_code == 200
    again = expect(port.refresh(tokens["refresh_token"], **MOBILE))
    assert "not revoked" in svc.log()
    # its own client revokes it
    assert_empty_200(revoke(port, {"token": again.json()["refresh_token"], **MOBILE}))
    assert port.get("/hello", again.json()["access_token"]).status_code == 401


def test_unknown_and_malformed_tokens_are_answered_200(port: LocalOAuth, svc: LocalService) -> None:
    tokens = login(port)
    key = signing_key(svc.folder)
    for token in (
        "no-such-token",
        "a.b.c",
        "x" * 4000,
        "é\u2028",
        sign(fresh_claims(sub="bob", aud="OAUTH"), b"another key of 32 bytes or more!"),
        sign({**fresh_claims(sub="bob", aud="OAUTH"), "exp": int(time.time()) - 5}, key),
    ):
        assert_empty_200(revoke(port, {"token": token, **WEB}))
    assert_valid(port, tokens)


def test_a_token_of_another_port_is_not_revoked_there(svc: LocalService) -> None:
    other, port = svc["OTHER"], svc["OAUTH"]
    tokens = login(port)
    for which in ("refresh_token", "access_token"):
        assert_empty_200(revoke(other, {"token": tokens[which], **WEB}))
    assert_valid(port, tokens)


def test_revocation_errors_are_the_token_routes(port: LocalOAuth) -> None:
    missing = assert_error(revoke(port, WEB), "invalid_request")
    assert set(missing.json()) == {"error", "error_description"}
    wrong = revoke(port, {"token": "x", "client_id": "web", "client_secret": "nope"})
    assert wrong.status_code == 401 and error_of(wrong) == "invalid_client", wrong.text
    assert wrong.headers["www-authenticate"].startswith("Basic")
    twice = port.http.post(port.base + REVOKE + "?token=a", data={"token": "b", **WEB})
    assert twice.status_code == 400 and error_of(twice) == "invalid_request"
    assert_error(port.http.post(port.base + REVOKE, json={"token": "a"}), "invalid_request")
    expect(port.http.get(port.base + REVOKE, params={"token": "a"}), 405)
    expect(revoke(port, {"token": "t" * 20_000, **WEB}), 413)


def test_basic_client_authentication_works_as_on_the_token_route(port: LocalOAuth) -> None:
    tokens = login(port, client=MOBILE)
    assert_empty_200(revoke(port, {"token": tokens["refresh_token"]}, auth=_pair(MOBILE)))
    assert_revoked(port, tokens)


# -- introspection -----------------------------------------------------------------------------


def test_introspection_describes_both_kinds_of_token(port: LocalOAuth) -> None:
    tokens = login(port, "cy")
    before = int(time.time())
    access = expect(introspect(port, {"token": tokens["access_token"], **WEB}))
    assert access.headers["cache-control"] == "no-store"
    assert access.headers["content-type"].startswith("application/json")
    body = access.json()
    claims = jwt.decode(tokens["access_token"], options={"verify_signature": False})
    assert body == {"active": True, "scope": "default", "client_id": "web", "username": "cy",
                    "token_type": "access_token", "sub": "cy",
                    **{k: claims[k] for k in ("exp", "iat", "iss", "jti")}}  # fmt: skip
    refresh = introspect(
        port, {"token": tokens["refresh_token"]}, auth=("web", WEB["client_secret"])
    )
    found = refresh.json()
    assert found["active"] is True and found["token_type"] == "refresh_token", found
    assert (found["client_id"], found["username"], found["sub"]) == ("web", "cy", "cy")
    assert found["scope"] == "default" and found["iss"] == claims["iss"]
    assert found["exp"] >= before + 3600  # refresh_expires: the end of tomorrow
    assert found["iat"] == claims["iat"]  # issued with the access token
    # jti: a stable identifier of the refresh token that does not give the token away
    jti = found["jti"]
    assert re.fullmatch(r"[0-9a-f]{32}", jti) and jti != claims["jti"], jti
    assert jti not in tokens["refresh_token"]
    again = introspect(port, {"token": tokens["refresh_token"], **WEB}).json()
    assert again["jti"] == jti
    rotated = port.refresh(tokens["refresh_token"], **WEB).json()
    following = introspect(port, {"token": rotated["refresh_token"], **WEB}).json()
    assert following["active"] is True and following["jti"] != jti


def test_a_refresh_record_of_an_earlier_fwrest_has_no_iat(
    port: LocalOAuth, svc: LocalService
) -> None:
    """Stored before issue times were (sqlite's default 0): introspection leaves ``iat`` out."""
    tokens = login(port, "cy")
    with contextlib.closing(sqlite3.connect(svc.folder / ".fwrest" / "state.sqlite3")) as db:
        # under the name as the section spells it, which fwrest 0.1.0 reads (SPEC 17.2)
        hashed = refresh_hash(tokens["refresh_token"], "OAUTH")
        changed = db.execute("UPDATE refresh SET issued_at = 0 WHERE token_hash = ?", (hashed,))
        db.commit()
        assert changed.rowcount == 1
    found = introspect(port, {"token": tokens["refresh_token"], **WEB}).json()
    assert found["active"] is True and "iat" not in found, found
    assert found["jti"] == hashed[:32]


def test_inactive_tokens_are_answered_active_false(port: LocalOAuth, svc: LocalService) -> None:
    key = signing_key(svc.folder)
    spent = login(port)
    port.refresh(spent["refresh_token"], **WEB)
    revoked = login(port)
    revoke(port, {"token": revoked["refresh_token"], **WEB})
    mobile = login(port, client=MOBILE)
    elsewhere = login(svc["OTHER"])
    expired = sign({**fresh_claims(sub="bob", aud="OAUTH"), "exp": int(time.time()) - 5}, key)
    inactive = {
        "unknown": "no-such-token",
        "malformed": "a.b.c",
        "not a JWT of ours": sign(fresh_claims(sub="bob", aud="OAUTH"), b"k" * 32),
        "expired": expired,
        "spent refresh": spent["refresh_token"],
        "revoked access": revoked["access_token"],
        "revoked refresh": revoked["refresh_token"],
        "another client's access": mobile["access_token"],
        "another client's refresh": mobile["refresh_token"],
        "another port's access": elsewhere["access_token"],
        "another port's refresh": elsewhere["refresh_token"],
        "control characters": "\x00\x1b[31m",
    }
    for why, token in inactive.items():
        answer = introspect(port, {"token": token, **WEB})
        assert answer.status_code == 200, (why, answer.text)
        assert answer.json() == {"active": False}, why
        assert answer.headers["cache-control"] == "no-store"


def test_introspection_needs_client_authentication(port: LocalOAuth) -> None:
    tokens = login(port)
    for data, kw in (
        ({"token": tokens["access_token"]}, {}),
        ({"token": tokens["access_token"], "client_id": "web", "client_secret": "wrong"}, {}),
        ({"token": tokens["access_token"]}, {"auth": ("nobody", "x")}),
    ):
        refused = assert_error(introspect(port, data, **kw), "invalid_client", 401)
        assert "active" not in refused.json()
    assert_error(introspect(port, WEB), "invalid_request")


def test_a_bearer_token_with_the_scope_introspect_may_introspect(
    port: LocalOAuth, svc: LocalService
) -> None:
    key = signing_key(svc.folder)
    tokens = login(port, client=MOBILE)
    claims = fresh_claims(sub="orders-api", aud="OAUTH", iss=issuer_of(port))
    resource = {**claims, "scope": "default introspect"}
    headers = {"Authorization": f"Bearer {sign(resource, key)}"}
    answer = expect(introspect(port, {"token": tokens["access_token"]}, headers=headers))
    # every token of the port: this one is mobile's, the caller is no client of it
    assert answer.json()["active"] is True and answer.json()["client_id"] == "mobile"
    plain = {"Authorization": f"Bearer {tokens['access_token']}"}  # scope default only
    refused = introspect(port, {"token": tokens["access_token"]}, headers=plain)
    # neither client nor bearer of the scope: 401 invalid_client, the challenge naming the scope
    assert refused.status_code == 401 and error_of(refused) == "invalid_client", refused.text
    challenges = refused.headers["www-authenticate"]
    assert challenges.startswith('Basic realm="Access to REST", Bearer ')
    assert 'error="insufficient_scope"' in challenges and 'scope="introspect"' in challenges
    foreign = {**resource, "aud": "OTHER"}
    bad = introspect(
        port, {"token": "x"}, headers={"Authorization": f"Bearer {sign(foreign, key)}"}
    )
    assert bad.status_code == 401 and error_of(bad) == "invalid_client", bad.text
    assert 'Bearer realm="Access to REST", error="invalid_token"' in bad.headers["www-authenticate"]


def test_a_client_whose_entry_lists_introspect_sees_every_token_of_its_port(
    port: LocalOAuth, svc: LocalService
) -> None:
    """A resource server's own client listing ``introspect`` (docs/decisions.md) sees every client's
    tokens of its port; an ordinary client only its own; another port's token is foreign to both."""
    tokens = login(port, "cy", client=MOBILE)
    for kind in ("access_token", "refresh_token"):
        seen = expect(introspect(port, {"token": tokens[kind]}, auth=_pair(ORDERS_API))).json()
        assert seen["active"] is True and seen["token_type"] == kind, seen
        assert (seen["client_id"], seen["username"]) == ("mobile", "cy")
        assert introspect(port, {"token": tokens[kind], **WEB}).json() == {"active": False}
    elsewhere = login(svc["OTHER"], "cy", client=MOBILE)
    for kind in ("access_token", "refresh_token"):
        foreign = introspect(port, {"token": elsewhere[kind], **ORDERS_API})
        assert foreign.json() == {"active": False}, kind
    expect(revoke(port, {"token": tokens["refresh_token"], **MOBILE}))
    for kind in ("access_token", "refresh_token"):
        gone = introspect(port, {"token": tokens[kind], **ORDERS_API})
        assert gone.json() == {"active": False}, kind


def _pair(client: dict[str, str]) -> tuple[str, str]:
    return client["client_id"], client["client_secret"]


# -- revocation by user ------------------------------------------------------------------------


def admin_headers(port: LocalOAuth, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {login(port, user)['access_token']}"}


def revoke_user(port: LocalOAuth, body: dict[str, Any], by: str = "ada") -> Any:
    """``oauth2/revoke-user`` with the JSON ``body``, asked by the user ``by``."""
    return port.http.post(port.base + REVOKE_USER, json=body, headers=admin_headers(port, by))


def test_revoke_user_revokes_every_family_of_the_user(port: LocalOAuth, svc: LocalService) -> None:
    logins = [login(port, "bob"), login(port, "bob", MOBILE)]
    logins.append(port.refresh(logins[0]["refresh_token"], **WEB).json())
    keep = login(port, "cy")
    answer = expect(revoke_user(port, {"username": "bob"}))
    assert answer.json()["username"] == "bob" and answer.json()["revoked_families"] >= 2
    # the cache is read every 0.5 s (the 1 s bound: tests/faults/test_sqlite_refresh.py); a guard
    mobile = logins[1]["access_token"]
    wait_for(lambda: port.get("/hello", mobile).status_code != 200, 15, "the revocation seen")
    for tokens in (logins[0], logins[2]):
        assert port.get("/hello", tokens["access_token"]).status_code == 401
    for tokens, client in ((logins[1], MOBILE), (logins[2], WEB)):
        assert_error(port.refresh(tokens["refresh_token"], **client), "invalid_grant")
    assert_valid(port, keep)
    assert "every token family of user 'bob' revoked by 'ada'" in svc.log()


def test_revoke_user_is_for_onadmin_users_only(svc: LocalService) -> None:
    port = svc["OAUTH"]
    victim = login(port, "cy")
    url = port.base + REVOKE_USER
    body = {"username": "cy"}
    expect(revoke_user(port, body, "bob"), 403)
    assert port.http.post(url, json=body).status_code == 401  # behind the port's scheme
    # OTHER names no onAdmin: no one may
    other = svc["OTHER"]
    nobody = revoke_user(other, body)
    assert nobody.status_code == 403 and "names no onAdmin" in nobody.text, nobody.text
    ada = admin_headers(port, "ada")
    expect(port.http.post(url, data=body, headers=ada), 415)
    for bad in (b"{", b'{"username": ""}', b'{"username": 7}', b"[]"):
        answer = port.http.post(
            url, content=bad, headers={**ada, "Content-Type": "application/json"}
        )
        assert answer.status_code == 400, (bad, answer.text)
    expect(port.http.post(url, json=body, headers={**ada, "Origin": "https://evil.example"}), 403)
    # opened by NativeRoutes.public: without a user, onAdmin has no one to allow
    opened = svc["OPENED"]
    expect(opened.http.post(opened.base + REVOKE_USER, json=body), 403)
    assert_valid(port, victim)


def test_revoke_user_refuses_other_keys_and_control_characters(
    port: LocalOAuth, svc: LocalService
) -> None:
    """A body of another shape or a name no user can have is 400 saying why, and nothing is
    revoked (both were 200 with an event ``families: 0``); a name no user has stays 200
    (the route does not tell which users exist)."""
    victim = login(port, "cy")
    for body, why in (
        ({"username": "cy", "user": "cy"}, "unknown key 'user'"),
        ({"username": "cy", "force": True}, "unknown key 'force'"),
        ({"username": "c\x00y"}, "the user name 'c\\x00y' holds a control character"),
        ({"username": "cy\n"}, "holds a control character"),
        ({"username": "\x7f"}, "holds a control character"),
    ):
        answer = revoke_user(port, body)
        assert answer.status_code == 400, (body, answer.text)
        assert why in answer.json()["detailedMessage"], (body, answer.text)
    assert_valid(port, victim)
    unknown = expect(revoke_user(port, {"username": "nobody-at-all"}))
    assert unknown.json() == {"username": "nobody-at-all", "revoked_families": 0}
    # the command refuses such a name as the route does
    code, out, err = in_process("tokens", "revoke", str(svc.config), "--user", "c\ny")
    assert (code, out) == (2, "") and "holds a control character" in err, err


def test_the_command_revokes_every_family_of_a_user(port: LocalOAuth, svc: LocalService) -> None:
    logins = [login(port, "cy"), login(port, "cy", MOBILE)]
    code, out, err = in_process("tokens", "revoke", str(svc.config), "--user", "cy")
    assert code == 0, err
    # these two and those of cy's logins in earlier tests not revoked yet
    found = re.fullmatch(r"fwrest tokens: revoked (\d+) token families of user 'cy'\n", out)
    assert found is not None and int(found.group(1)) >= 2, out
    again = in_process("tokens", "revoke", str(svc.config), "--user", "cy")[1]
    assert again == "fwrest tokens: revoked 0 token families of user 'cy'\n"  # none new
    for tokens, client in ((logins[0], WEB), (logins[1], MOBILE)):
        for _ in range(2):  # the store, at once; a client's retry is no replay either
            refused = port.refresh(tokens["refresh_token"], **client)
            assert refused.status_code == 400 and error_of(refused) == "invalid_grant"
            assert refused.json()["error_description"] == "the refresh token was revoked"
    # its LogFile moved away (logrotate, before the service reopens it): the audit line on
    # standard error, and no file made that the service might not be able to open
    log_file = svc.folder / "server.log"
    moved = log_file.rename(svc.folder / "server.log.1")
    try:
        code, out, err = in_process("tokens", "revoke", str(svc.config), "--user", "nobody")
        assert not log_file.exists()
    finally:
        moved.rename(log_file)
    assert (code, out.strip()) == (0, "fwrest tokens: revoked 0 token families of user 'nobody'")
    assert " INFO fwrest.audit [cli] revocation actor='cli' client=- port=- " in err, err
    assert '{"user":"nobody","families":0,"via":"fwrest tokens revoke","os_user":' in err, err


def test_the_command_refuses_a_memory_store(tmp_path: Path) -> None:
    config = module_config(tmp_path, "tauth_revocation_memory_app")  # StateStore=memory
    code, out, err = in_process("tokens", "revoke", str(config), "--user", "ada")
    assert code == 2 and not out
    assert "the state store is memory" in err and "revoke-user" in err, err


# -- routes, names, logs -----------------------------------------------------------------------


def test_the_routes_are_listed_and_open(port: LocalOAuth) -> None:
    token = login(port)["access_token"]
    listing = port.get("/fw/rest/list/service", token).json()
    entries = {e["endpoint"]: e for e in listing}
    for path, public in ((REVOKE, True), (INTROSPECT, True), (REVOKE_USER, False)):
        assert entries[path]["type"] == "fw"
        assert entries[path]["public"] is public, entries[path]
        assert [m["method"] for m in entries[path]["methods"]] == ["POST"]


def test_tokens_and_secrets_never_reach_the_log(port: LocalOAuth, svc: LocalService) -> None:
    tokens = login(port)
    introspect(port, {"token": tokens["access_token"], **WEB})
    port.http.post(
        port.base + INTROSPECT + f"?token={tokens['refresh_token']}",
        auth=("web", WEB["client_secret"]),
    )
    revoke(port, {"token": tokens["refresh_token"], **WEB})
    text = svc.log()
    assert "/fw/oauth2/revoke" in text and "/fw/oauth2/introspect" in text
    for secret in (tokens["access_token"], tokens["refresh_token"], WEB["client_secret"]):
        assert secret not in text


# -- the audit trail (SPEC 13.5) ---------------------------------------------------------------


def audit_events(port: LocalOAuth, event: str, found: Any) -> list[dict[str, Any]]:
    """The trail's ``event`` events where ``found`` holds, waited for, read by ada."""
    headers = admin_headers(port, "ada")
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 15
    while not seen:
        assert time.monotonic() < deadline, f"no {event} event: {seen}"
        answer = expect(port.get(f"/fw/rest/audit?event={event}", headers=headers))
        seen = [e for e in answer.json() if found(e)]
        time.sleep(0.02)
    return seen


def test_replays_and_revocations_are_in_the_audit_trail(
    port: LocalOAuth, svc: LocalService
) -> None:
    """A replay, an RFC 7009 revocation, a revocation by user (route and ``fwrest tokens revoke``):
    each an event naming who, from where, family or user; never a token or secret."""
    replayed = login(port, "bob")
    assert port.refresh(replayed["refresh_token"], **WEB).status_code == 200
    spent = port.refresh(replayed["refresh_token"], **WEB)
    assert error_of(spent) == "invalid_grant"
    family = claims_family(port, replayed["access_token"])
    replay = audit_events(port, "refresh.replay", lambda e: e["details"]["family"] == family)[0]
    assert (replay["actor"], replay["client"], replay["port"]) == ("bob", "127.0.0.1", "OAUTH")
    assert replay["details"] == {"client_id": "web", "family": family}

    revoked = login(port, "cy", MOBILE)
    assert_empty_200(revoke(port, {"token": revoked["access_token"], **MOBILE}))
    family = claims_family(port, revoked["access_token"])
    event = audit_events(port, "revocation", lambda e: e["details"].get("family") == family)[0]
    assert event["actor"] == "client:mobile", event
    assert (event["client"], event["port"]) == ("127.0.0.1", "OAUTH"), event
    assert event["details"] == {"user": "cy", "client_id": "mobile", "family": family,
                                "token_type": "access_token", "via": "oauth2/revoke"}  # fmt: skip

    login(port, "bob")
    # bob was revoked by the route before: this one's event is at or after now (the trail's format)
    before = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    answer = expect(revoke_user(port, {"username": "bob"}))
    ours = lambda e: e["details"].get("via") == "oauth2/revoke-user" and e["ts"] >= before  # noqa: E731
    by_route = audit_events(port, "revocation", ours)[0]
    assert (by_route["actor"], by_route["port"]) == ("ada", "OAUTH")
    assert by_route["details"]["user"] == "bob"
    assert by_route["details"]["families"] == answer.json()["revoked_families"]

    code, _out, err = in_process("tokens", "revoke", str(svc.config), "--user", "bob")
    assert code == 0 and "audit" not in err, err
    by_command = audit_events(
        port, "revocation", lambda e: e["details"].get("via") == "fwrest tokens revoke"
    )[0]
    assert (by_command["actor"], by_command["client"], by_command["port"]) == ("cli", None, None)
    assert by_command["details"]["user"] == "bob" and by_command["details"]["os_user"]
    # the trail as a whole: no token, no secret, no password
    everything = port.get("/fw/rest/audit?limit=10000", headers=admin_headers(port, "ada")).text
    secrets = [replayed["refresh_token"], replayed["access_token"], revoked["access_token"]]
    for secret in (*secrets, WEB["client_secret"], MOBILE["client_secret"], *USERS.values()):
        assert secret not in everything


def claims_family(port: LocalOAuth, access_token: str) -> str:
    family = jwt.decode(access_token, options={"verify_signature": False})["fam"]
    assert isinstance(family, str)
    return family
