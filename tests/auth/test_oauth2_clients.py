"""OAuth2 with real clients (Authlib, requests-oauthlib: the password grant, a call and a refresh
with only the CA bundle, over TLS on a real ``fwrest serve`` of ``SINGLE``; curl: the guide's
commands, tests/docs/test_examples.py) and the forms of ``onAuthparams`` (SPEC 4.2, 7), one port
each in process (module ``tauth_oauth2_clients_app``). One ``fwrest check`` per kind runs the
command."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import bcrypt
import pytest
import requests
import trustme
from argon2 import PasswordHasher
from authlib.integrations.requests_client import OAuth2Session as AuthlibSession
from oauthlib.oauth2 import LegacyApplicationClient
from requests_oauthlib import OAuth2Session as RequestsOAuthSession

from fwrest.server import prepare
from tests.auth.conftest import check
from tests.auth.oauth2_support import (
    TOKEN_KEYS,
    LocalService,
    OAuth,
    OAuthService,
    assert_error,
    claims_of,
    error_of,
    expect,
    issue_certs,
    local_service,
    oauth_section,
    served_service,
    wait_for,
)
from tests.builders import config_of
from tests.conftest import APP_SOURCE, free_config, module_config, run_cli, serving

CLIENT = ("web", "Web-Secret-9q")
ADA = ("ada", "Ada-Pw-7731")

# hashed passwords, as an application would keep them (cheap cost factors: tests, not storage)
ARGON_USER = ("hana", "Hana-Argon-Pw-51")
BCRYPT_USER = ("bert", "Bert-Bcrypt-Pw-62")
LONG_USER = ("lena", "L" * 72)  # exactly 72 bytes: the most bcrypt reads
ARGON_HASH = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash(ARGON_USER[1])
BCRYPT_HASH = bcrypt.hashpw(BCRYPT_USER[1].encode(), bcrypt.gensalt(rounds=4)).decode()
LONG_HASH = bcrypt.hashpw(LONG_USER[1].encode(), bcrypt.gensalt(rounds=4)).decode()

REFRESH_FORMS = {
    "R_DATE_PLUS": ("Date()+1", True),
    "R_MDY_FUTURE": ("12/31/2099", True),
    "R_MDY_PAST": ("01/01/2020", False),
    "R_ISO_FUTURE": ("2099-06-30T12:00:00+00:00", True),
    "R_ISO_DATE_FUTURE": ("2099-06-30", True),
    "R_ISO_PAST": ("2020-01-01T00:00:00Z", False),
}

CLIENTS_APP = f'''

import asyncio
import json as _json
from pathlib import Path as _Path

_HERE = _Path(__file__).resolve().parent


def single():
    """The single form of the original product's documentation."""
    return {{"client_id": "web", "client_secret": "Web-Secret-9q", "username": "ada",
             "password": "Ada-Pw-7731", "grant_type": "password", "access_expires": "1h",
             "refresh_expires": "Date()+1"}}


def arrays():
    """single() without its lifetimes, which come from the expires array."""
    data = {{
        **single(),
        "client": [{{"client_id": "mobile", "client_secret": "Mob-Secret-4x"}},
                   {{"Client_Id": "cli", "Client_Secret": "Cli-Secret-3z"}},
                   {{"client_id": "b64", "client_secret": "k+Z/9%2Fq r"}}],
        "users": [{{"username": "bob", "password": "Bob-Pw-2207"}},
                  {{"username": "cy", "password": "Cy-Pw-1188"}}],
        "expires": [{{"access_expires": "90s", "refresh_expires": "Date()+2"}}],
        "types": [{{"grant_type": "refresh_token"}}],
    }}
    del data["access_expires"], data["refresh_expires"]
    return data


def refresh_only_types():
    data = single()
    del data["grant_type"]
    data["types"] = [{{"grant_type": "refresh_token"}}]
    return data


def legacy(params):
    """The old model: fill the request's parameters in place, return nothing."""
    with (_HERE / "legacy.jsonl").open("a") as fh:
        fh.write(_json.dumps(sorted(params)) + "\\n")
    params.update(client_id="old", client_secret="Old-Secret-1a", username="ada",
                  password="Legacy-Pw-33", grant_type="password", access_expires=5000,
                  refresh_expires="Date()+1")


_LEGACY_USERS = {{"ada": "Lookup-Pw-55"}}


def legacy_lookup(params):
    """The old model as applications wrote it: look up the user the request names."""
    user = params.get("username")
    if user in _LEGACY_USERS:
        params["password"] = _LEGACY_USERS[user]
    params["access_expires"] = "1h"


def mixed_expires():
    """Each lifetime from the first entry that gives it: access from the single key, refresh
    from the first ``expires`` entry (a past date); the second entry is ignored (warned)."""
    data = single()
    del data["refresh_expires"]
    data["access_expires"] = "2h"
    data["expires"] = [{{"refresh_expires": "01/01/2020"}},
                       {{"access_expires": "90s", "refresh_expires": "Date()+9"}}]
    return data


async def async_params():
    await asyncio.sleep(0)
    return {{**single(), "password": "Async-Pw-44"}}


def hashed():
    return {{"client_id": "web", "client_secret": "Web-Secret-9q", "access_expires": 3600000,
             "refresh_expires": "Date()+1", "users": [
                 {{"username": "hana", "password": {ARGON_HASH!r}}},
                 {{"username": "bert", "password": {BCRYPT_HASH!r}}},
                 {{"username": "lena", "password": {LONG_HASH!r}}}]}}


@get("/whoami")
def whoami():
    return {{"user": rest.getAuthUser(), "scheme": rest.getCEntryPointAuthorizationScheme()}}


def _refresh_form(value):
    return {{**single(), "refresh_expires": value}}

'''
CLIENTS_APP += "".join(
    f"\n\ndef {name.lower()}():\n    return _refresh_form({value!r})\n"
    for name, (value, _ok) in REFRESH_FORMS.items()
)


def params_file(password: str) -> dict[str, Any]:
    hashed = [
        {"username": "hana", "password": ARGON_HASH},
        {"username": "bert", "password": BCRYPT_HASH},
    ]
    return {"client_id": "web", "client_secret": "Web-Secret-9q", "username": "ada",
            "password": password, "users": hashed, "access_expires": "15m",
            "refresh_expires": "Date()+1"}  # fmt: skip


MODULE = "tauth_oauth2_clients_app"  # the module's service runs in this process


def write_service(folder: Path, certs: dict[str, Path]) -> Path:
    m = MODULE
    (folder / "params.json").write_text(json.dumps(params_file("File-Pw-1111")))
    servers = {
        "REFRESH_ONLY": oauth_section(certs, onAuthparams=f"{m}.refresh_only_types"),
        "ASYNC": oauth_section(certs, onAuthparams=f"{m}.async_params"),
        "FILE": oauth_section(certs, onAuthparams="file:params.json"),
        "FILE_KEEP": oauth_section(certs, onAuthparams="file:keep.json"),
        "FILE_SAME": oauth_section(certs, onAuthparams="file:same.json"),
    }
    (folder / "keep.json").write_text(json.dumps(params_file("Keep-Pw-1111")))
    (folder / "same.json").write_text(json.dumps(params_file("Same-Pw-1111")))
    # the others' onAuthparams: the module's function of the section's name in lower case
    named = ("SINGLE", "ARRAYS", "LEGACY", "LEGACY_LOOKUP", "HASHED", "MIXED_EXPIRES")
    for name in (*named, *REFRESH_FORMS):
        servers[name] = oauth_section(certs, onAuthparams=f"{m}.{name.lower()}")
    return module_config(folder, m, servers=servers, app=APP_SOURCE + CLIENTS_APP)


def write_single(folder: Path, certs: dict[str, Path]) -> Path:
    """The ``SINGLE`` port alone, for ``fwrest serve``."""
    servers = {"SINGLE": oauth_section(certs, onAuthparams="app.single")}
    return free_config(folder, servers=servers, app=APP_SOURCE + CLIENTS_APP)


svc = local_service(write_service, "oauth2_clients")
# a real ``fwrest serve`` of the ``SINGLE`` port, over TLS, for the real clients
served = served_service(write_single, "oauth2_clients_served")


def form(username: str, password: str) -> dict[str, str]:
    """A password grant's form."""
    return {"grant_type": "password", "username": username, "password": password}


# -- real client libraries ----------------------------------------------------------------------


def test_authlib_requests_session_password_grant_call_and_refresh(served: OAuthService) -> None:
    port = served["SINGLE"]
    ca = str(served.certs["ca"])
    with AuthlibSession(client_id=CLIENT[0], client_secret=CLIENT[1]) as session:
        token = session.fetch_token(port.token_url, username=ADA[0], password=ADA[1], verify=ca)
        assert token["token_type"] == "Bearer" and token["expires_in"] == 3600
        first = session.get(port.base + "/whoami", verify=ca)
        assert first.status_code == 200 and first.json()["user"] == "ada"
        renewed = session.refresh_token(port.token_url, verify=ca)
        assert renewed["access_token"] != token["access_token"]
        assert renewed["refresh_token"] != token["refresh_token"]
        second = expect(session.get(port.base + "/whoami", verify=ca))
        assert second.request.headers["Authorization"] == f"Bearer {renewed['access_token']}"


def test_requests_oauthlib_legacy_application_client(served: OAuthService) -> None:
    port = served["SINGLE"]
    ca = str(served.certs["ca"])
    with RequestsOAuthSession(client=LegacyApplicationClient(client_id=CLIENT[0])) as session:
        token = session.fetch_token(token_url=port.token_url, username=ADA[0], password=ADA[1],
                                    client_id=CLIENT[0], client_secret=CLIENT[1], verify=ca)  # fmt: skip
        assert set(token) >= TOKEN_KEYS - {"scope"}
        response = session.get(port.base + "/whoami", verify=ca)
        assert response.status_code == 200 and response.json()["user"] == "ada"
        renewed = session.refresh_token(
            port.token_url, auth=requests.auth.HTTPBasicAuth(*CLIENT), verify=ca
        )
        assert renewed["access_token"] != token["access_token"]
        assert session.get(port.base + "/hello", verify=ca).status_code == 200


# -- onAuthparams forms -------------------------------------------------------------------------


def test_single_keys_of_the_original_documentation(svc: LocalService) -> None:
    """``grant_type: "password"`` as the original product writes it: the refresh grant works too."""
    port = svc["SINGLE"]
    tokens = port.tokens(*ADA)
    assert tokens["expires_in"] == 3600  # "1h"
    assert claims_of(svc, tokens["access_token"])["client_id"] == "web"
    expect(port.refresh(tokens["refresh_token"]))
    assert port.grant("bob", "Bob-Pw-2207").status_code == 400  # not a user of this port


@pytest.mark.parametrize(
    ("user", "password"), [("ada", "Ada-Pw-7731"), ("bob", "Bob-Pw-2207"), ("cy", "Cy-Pw-1188")]
)
def test_arrays_users_mixed_with_single_keys(svc: LocalService, user: str, password: str) -> None:
    port = svc["ARRAYS"]
    tokens = port.tokens(user, password)
    assert tokens["expires_in"] == 90  # "90s" from the expires array
    assert claims_of(svc, tokens["access_token"])["sub"] == user
    other = "Cy-Pw-1188" if user != "cy" else "Bob-Pw-2207"
    assert error_of(port.grant(user, other)) == "invalid_grant"  # passwords are per user


@pytest.mark.parametrize(
    ("client_id", "secret"),
    [("web", "Web-Secret-9q"), ("mobile", "Mob-Secret-4x"), ("cli", "Cli-Secret-3z")],
)
def test_arrays_clients_mixed_with_single_keys(
    svc: LocalService, client_id: str, secret: str
) -> None:
    port = svc["ARRAYS"]
    response = expect(port.post(form("bob", "Bob-Pw-2207"), auth=(client_id, secret)))
    assert claims_of(svc, response.json()["access_token"])["client_id"] == client_id
    crossed_secret = "Mob-Secret-4x" if client_id != "mobile" else "x"
    crossed = port.post(form("bob", "Bob-Pw-2207"), auth=(client_id, crossed_secret))
    assert_error(crossed, "invalid_client", 401)


def test_a_client_secret_in_the_basic_header_encoded_or_as_it_is(svc: LocalService) -> None:
    """RFC 6749 2.3.1 form-encodes them; Authlib, requests and httpx do not: both are taken."""
    port, secret = svc["ARRAYS"], "k+Z/9%2Fq r"
    for sent in (secret, quote_plus(secret)):  # httpx's auth sends it unencoded
        expect(port.post(form("bob", "Bob-Pw-2207"), auth=("b64", sent)))
    for wrong in ("k Z/9/q r", quote_plus("k+Z/9%2Fq  r")):
        assert_error(
            port.post(form("bob", "Bob-Pw-2207"), auth=("b64", wrong)), "invalid_client", 401
        )


def test_arrays_types_mixed_with_the_single_grant_type(svc: LocalService) -> None:
    """The single ``grant_type`` is one more entry of the ``types`` array."""
    port = svc["ARRAYS"]
    tokens = port.tokens("cy", "Cy-Pw-1188")
    renewed = expect(port.refresh(tokens["refresh_token"]))
    assert claims_of(svc, renewed.json()["access_token"])["sub"] == "cy"


def test_a_password_grant_not_in_types_is_unauthorized_client(svc: LocalService) -> None:
    assert_error(svc["REFRESH_ONLY"].grant(*ADA), "unauthorized_client")


def test_legacy_function_fills_the_request_dict_by_reference(svc: LocalService) -> None:
    port = svc["LEGACY"]
    calls = svc.folder / "legacy.jsonl"
    tokens = port.tokens("ada", "Legacy-Pw-33")
    assert tokens["expires_in"] == 5
    assert claims_of(svc, tokens["access_token"])["client_id"] == "old"
    assert error_of(port.grant("ada", "Ada-Pw-7731")) == "invalid_grant"
    assert port.post(form("ada", "Legacy-Pw-33"), auth=("old", "Old-Secret-1a")).status_code == 200
    assert port.post(form("ada", "Legacy-Pw-33"), auth=("old", "wrong")).status_code == 401
    seen = [json.loads(line) for line in calls.read_text().splitlines()]
    # the function received the request's parameters (the secrets kept back)
    assert ["grant_type", "username"] in seen, seen
    assert all("password" not in keys for keys in seen), seen


def test_legacy_function_that_looks_up_the_requested_user(svc: LocalService) -> None:
    port = svc["LEGACY_LOOKUP"]
    assert port.tokens("ada", "Lookup-Pw-55")["expires_in"] == 3600
    assert error_of(port.grant("ada", "wrong")) == "invalid_grant"
    # a user the function does not know: the same answer as a wrong password, not a 500
    unknown = expect(port.grant("zed", "Lookup-Pw-55"), 400)
    assert unknown.content == port.grant("ada", "wrong").content


@pytest.mark.parametrize("secret", ["", "anything"])
def test_legacy_function_does_not_allow_the_client_the_request_names(
    svc: LocalService, secret: str
) -> None:
    """The request's ``client_id`` handed to the legacy function and left there is not allowed."""
    port = svc["LEGACY_LOOKUP"]
    response = port.grant("ada", "Lookup-Pw-55", client_id="intruder", client_secret=secret)
    assert_error(response, "invalid_client", 401)
    expect(port.post(form("ada", "Lookup-Pw-55"), auth=("intruder", secret)), 401)


def test_async_on_auth_params(svc: LocalService) -> None:
    port = svc["ASYNC"]
    assert port.tokens("ada", "Async-Pw-44")["expires_in"] == 3600
    assert error_of(port.grant(*ADA)) == "invalid_grant"


def test_on_auth_params_from_a_json_file_reread_when_it_changes(svc: LocalService) -> None:
    port = svc["FILE"]
    tokens = port.tokens("ada", "File-Pw-1111")
    assert tokens["expires_in"] == 900  # "15m"
    pid = port.get("/hello", tokens["access_token"]).json()["pid"]
    assert port.tokens(*ARGON_USER)["expires_in"] == 900  # hashes kept in the file
    assert port.tokens(*BCRYPT_USER)["expires_in"] == 900
    path = svc.folder / "params.json"
    path.write_text(json.dumps(params_file("File-Pw-2222")))
    new = "the new password in params.json is accepted"
    took = wait_for(lambda: port.grant("ada", "File-Pw-2222").status_code == 200, 10, new)
    print(f"params.json change effective after {took:.3f} s")
    assert error_of(port.grant("ada", "File-Pw-1111")) == "invalid_grant"
    # the same process answered: no restart, and its tokens stay valid
    assert port.get("/hello", tokens["access_token"]).json()["pid"] == pid


def test_each_lifetime_comes_from_the_first_entry_that_gives_it(svc: LocalService) -> None:
    """Single "2h"; ``expires`` [{refresh "01/01/2020"}, {access "90s", refresh "Date()+9"}]: the
    token lives 2 h, its refresh token already expired (the first given, not the default)."""
    port = svc["MIXED_EXPIRES"]
    tokens = port.tokens(*ADA)
    assert tokens["expires_in"] == 7200
    response = expect(port.refresh(tokens["refresh_token"]), 400)
    assert "expired" in response.json()["error_description"]
    # the start's warnings, as `fwrest serve` logs them
    # (test_serve_logs_the_access_expires_warning_at_start) and `fwrest check` prints them
    log = "\n".join(prepare(svc.config).warnings)
    for key in ("access_expires", "refresh_expires"):
        assert f"[MIXED_EXPIRES] onAuthparams gives {key} more than once" in log, log
    assert "[MIXED_EXPIRES] onAuthparams refresh_expires '01/01/2020' is already past" in log
    assert "[ARRAYS] onAuthparams gives" not in log, log  # each once, in its expires array


def test_a_params_file_broken_while_serving_keeps_its_last_valid_content(svc: LocalService) -> None:
    """Half-written JSON, bad settings, no file: the last valid content stays, an error a state."""
    port = svc["FILE_KEEP"]
    path = svc.folder / "keep.json"
    assert port.tokens("ada", "Keep-Pw-1111")["expires_in"] == 900
    since = len(svc.log())
    for broken in ('{"client_id": "web",', '{"users": 5}', None):
        if broken is None:
            path.unlink()
        else:
            path.write_text(broken)
        for _ in range(2):
            response = port.grant("ada", "Keep-Pw-1111")
            assert response.status_code == 200, (broken, response.text)
    # the worker's lines leave at the end of its loop's turn, maybe after the answer
    wait_for(lambda: svc.log()[since:].count("token 200") == 6, 10, "the 6 access lines")
    lines = svc.log()[since:].splitlines()
    errors = [line for line in lines if "ERROR" in line and "[FILE_KEEP] onAuthparams" in line]
    print("\n".join(errors))
    assert len(errors) == 3, errors  # once per state, not per request
    assert all("last valid content stays in force" in line for line in errors)
    assert "not valid JSON" in errors[0] and "cannot be used" in errors[1]
    assert "cannot be read" in errors[2]
    path.write_text(json.dumps(params_file("Keep-Pw-2222")))  # corrected: read again at once
    assert port.tokens("ada", "Keep-Pw-2222")["expires_in"] == 900
    assert error_of(port.grant("ada", "Keep-Pw-1111")) == "invalid_grant"


def test_a_params_file_edited_to_two_spellings_of_a_user_keeps_its_last_valid_content(
    svc: LocalService,
) -> None:
    """``ada`` and ``ADA`` would share a throttle key (issue 34): refused, the last content kept."""
    port = svc["FILE_KEEP"]
    path = svc.folder / "keep.json"
    valid = json.loads(path.read_text())
    password = valid["password"]
    assert port.grant("ada", password).status_code == 200
    since = len(svc.log())
    clashing = {**valid, "users": [{"username": "ADA", "password": "Keep-Pw-Upper-3"}]}
    path.write_text(json.dumps(clashing))
    try:
        assert_error(port.grant("ADA", "Keep-Pw-Upper-3"), "invalid_grant")
        assert port.grant("ada", password).status_code == 200
        wait_for(lambda: "are one name" in svc.log()[since:], 10, "the file's error logged")
        assert "the user 'ADA' and the user 'ada' are one name" in svc.log()[since:]
    finally:
        path.write_text(json.dumps(valid))


def test_a_params_file_edited_to_a_placeholder_hash_keeps_its_last_valid_content(
    svc: LocalService,
) -> None:
    """A password written as the docs' ``$argon2id$...``: refused as the start refuses it, the
    last valid content kept (ada's password still logs in), the error naming the user."""
    port = svc["FILE_KEEP"]
    path = svc.folder / "keep.json"
    valid = json.loads(path.read_text())
    password = valid["password"]
    since = len(svc.log())
    path.write_text(json.dumps({**valid, "password": "$argon2id$..."}))
    try:
        assert port.grant("ada", password).status_code == 200
        wait_for(lambda: "is not a valid one" in svc.log()[since:], 10, "the file's error logged")
        logged = svc.log()[since:]
        assert "the user 'ada': its password begins as an argon2 hash" in logged
        assert "$argon2id$..." not in logged
    finally:
        path.write_text(json.dumps(valid))


def test_a_params_file_change_of_the_same_size_and_time_is_seen(svc: LocalService) -> None:
    """An edit within the file system's timestamp granularity, same size: still read again."""
    port = svc["FILE_SAME"]
    path = svc.folder / "same.json"
    assert port.tokens("ada", "Same-Pw-1111")["token_type"] == "Bearer"
    before = path.stat()
    path.write_text(json.dumps(params_file("Same-Pw-2222")))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert port.tokens("ada", "Same-Pw-2222")["token_type"] == "Bearer"
    assert error_of(port.grant("ada", "Same-Pw-1111")) == "invalid_grant"


def test_the_metadata_follows_an_edit_of_the_params_file(svc: LocalService) -> None:
    """RFC 8414 metadata (SPEC 12.2) of a ``file:`` port follows the file's grant types, scopes."""
    port = svc["FILE_SAME"]
    path = svc.folder / "same.json"
    before = path.read_text()
    meta = port.http.get("/rest/fw/oauth2/metadata").json()
    assert meta["grant_types_supported"] == ["password", "refresh_token"]
    assert meta["scopes_supported"] == ["default"]
    types = [{"grant_type": "password"}, {"grant_type": "client_credentials"}]
    edited = {**params_file("Same-Pw-2222"), "scopes": ["orders:read"], "types": types}
    try:
        path.write_text(json.dumps(edited))
        meta = port.http.get("/rest/fw/oauth2/metadata").json()
        assert meta["grant_types_supported"] == ["password", "client_credentials"]
        assert meta["scopes_supported"] == ["default", "orders:read"]
    finally:
        path.write_text(before)


@pytest.mark.parametrize(
    "user", [ARGON_USER, BCRYPT_USER, LONG_USER], ids=["argon2id", "bcrypt", "bcrypt-72"]
)
def test_hashed_passwords(svc: LocalService, user: tuple[str, str]) -> None:
    port = svc["HASHED"]
    assert port.tokens(*user)["token_type"] == "Bearer"
    assert_error(port.grant(user[0], user[1] + "!"), "invalid_grant")
    assert error_of(port.grant(user[0], user[1][:-1])) == "invalid_grant"


def test_the_hashes_are_what_the_test_claims() -> None:
    assert ARGON_HASH.startswith("$argon2id$")
    assert BCRYPT_HASH.startswith("$2b$") and LONG_HASH.startswith("$2b$")


@pytest.mark.parametrize("extra", ["x", "L" * 100, "é"])
def test_a_password_over_72_bytes_against_bcrypt_is_invalid_grant(
    svc: LocalService, extra: str
) -> None:
    """The first 72 bytes match the bcrypt hash; the rest must not be ignored, nor fail."""
    port = svc["HASHED"]
    assert_error(port.grant(LONG_USER[0], LONG_USER[1] + extra), "invalid_grant")
    assert_error(port.grant(BCRYPT_USER[0], "B" * 200), "invalid_grant")


def test_unknown_user_among_hashed_users_is_invalid_grant(svc: LocalService) -> None:
    port = svc["HASHED"]
    response = port.grant("nobody", "whatever")
    assert_error(response, "invalid_grant")
    assert response.content == port.grant(ARGON_USER[0], "whatever").content


@pytest.mark.parametrize("name", list(REFRESH_FORMS))
def test_refresh_expires_forms(svc: LocalService, name: str) -> None:
    """A past date issues refresh tokens expired at birth; logged once, naming no user or token."""
    value, works = REFRESH_FORMS[name]
    port = svc[name]
    tokens = port.tokens(*ADA)
    response = port.refresh(tokens["refresh_token"])
    print(f"refresh_expires {value!r}: {response.status_code}")
    warned = f"[{name}] onAuthparams refresh_expires {value!r} is already past: the refresh"
    if works:
        assert response.status_code == 200, response.text
        assert warned not in svc.log()
    else:
        assert_error(response, "invalid_grant")
        assert "expired" in response.json()["error_description"]
        again = port.tokens(*ADA)  # the password grant still works
        assert again["token_type"] == "Bearer"
        lines = [line for line in svc.log().splitlines() if warned in line]
        assert len(lines) == 1, lines  # two grants, one line
        assert "WARNING fwrest.auth" in lines[0]
        # the user as a word (the line's hex request id may hold the letters "ada")
        assert not re.search(rf"\b{ADA[0]}\b", lines[0]), lines[0]
        for secret in (tokens["refresh_token"], again["refresh_token"]):
            assert secret not in lines[0]


# -- fwrest check warns about an access_expires that reads like seconds -------------------------


def unique_module() -> str:
    """A module name of its own: ``check(real=False)`` imports the config's module here."""
    return f"tauth_check_{uuid.uuid4().hex[:12]}"


LIFETIME_APP = """

def lifetime():
    import json
    from pathlib import Path
    return json.loads((Path(__file__).parent / "params.json").read_text())
"""


def one_port(
    ca: trustme.CA, folder: Path, params: dict[str, Any], module: str | None = None, **auth: Any
) -> tuple[Path, dict[str, Path]]:
    """One oAuth2 port ``OAUTH`` (``auth`` in its ``Authorization``; default ``onAuthparams``
    ``file:params.json`` holding ``params``, also the module's ``lifetime()``); module ``app`` for
    ``fwrest serve``, ``module`` for ``check(real=False)``."""
    certs = issue_certs(ca, folder / "certs")
    (folder / "params.json").write_text(json.dumps(params))
    section = oauth_section(certs, **{"onAuthparams": "file:params.json", **auth})
    app = APP_SOURCE + LIFETIME_APP
    return config_of(folder, module, servers={"OAUTH": section}, app=app), certs


SECONDS = '3600 ms is 3.6 seconds; write 3600000 or "1h"'


@pytest.mark.parametrize(
    ("key", "value", "needle", "warned"),
    [("access_expires", 3600, SECONDS, True), ("access_expires", "3600", SECONDS, True),
     ("access_expires", 3600000, SECONDS, False), ("access_expires", "1h", SECONDS, False),
     ("access_expires", "2d", "over a day", True),
     ("access_expires", 86_400_001, "over a day", True),
     ("refresh_expires", "12/31/2099", "90 days", True),
     ("refresh_expires", "Date()+91", "90 days", True)],
)  # fmt: skip
def test_check_warns_about_a_lifetime_in_seconds_or_a_long_one(
    ca: trustme.CA, tmp_path: Path, key: str, value: Any, needle: str, warned: bool
) -> None:
    params = {**params_file("x"), key: value}
    config, _ = one_port(ca, tmp_path, params, unique_module(), allowGetToken=False)
    real = value in (3600, "2d")
    result = check(config, real=real)
    output = result.stdout + result.stderr
    print(output)
    assert result.returncode == 0, output
    assert (needle in output) is warned, output
    # the contrast: the lifetimes of params_file() itself draw no such warning
    (tmp_path / "params.json").write_text(json.dumps(params_file("x")))
    calm = check(config, real=real)
    assert needle not in calm.stdout + calm.stderr


def test_serve_logs_the_access_expires_warning_at_start(ca: trustme.CA, tmp_path: Path) -> None:
    config, certs = one_port(ca, tmp_path, {**params_file("x"), "access_expires": 3600})
    with serving(config) as proc, OAuth(proc, "OAUTH", certs) as port:
        text = proc.wait_log("3600 ms is 3.6 seconds")
        assert "WARNING" in next(line for line in text.splitlines() if "3.6 seconds" in line)
        assert port.tokens("ada", "x")["expires_in"] == 3  # taken as written: milliseconds


# -- lifetimes no token request could use stop the start -------------------------------------

BAD_LIFETIMES = {
    "access-abc": ("access_expires", "abc", "access_expires must be milliseconds"),
    "access-zero": ("access_expires", 0, "access_expires must be positive"),
    "access-negative": ("access_expires", -5, "access_expires must be positive"),
    "access-fraction": ("access_expires", 1.5, "access_expires must be milliseconds"),
    "access-bool": ("access_expires", True, "access_expires must be milliseconds"),
    "access-digits": ("access_expires", "9" * 5000, "access_expires must be milliseconds"),
    "access-huge": ("access_expires", 10**30, "more than a century"),
    "refresh-huge-ms": ("refresh_expires", 10**20, "out of range"),
    "refresh-date-plus-huge": ("refresh_expires", "Date()+99999999", "out of range"),
    "refresh-bad-date": ("refresh_expires", "02/30/2027", "is not a date"),
    "refresh-word": ("refresh_expires", "soon", "is not understood"),
    "refresh-bool": ("refresh_expires", False, "refresh_expires cannot be False"),
}

# the cases that run the real `fwrest check` (the others run its code in this process)
REAL_CHECKS = {("access-digits", "file"), ("refresh-bool", "function")}


@pytest.mark.parametrize("form", ["file", "function"])
@pytest.mark.parametrize("case", list(BAD_LIFETIMES))
def test_a_lifetime_no_token_request_could_use_stops_the_start(
    ca: trustme.CA, tmp_path: Path, case: str, form: str
) -> None:
    """Every token request would be a 500: ``fwrest check`` exits 2 (no traceback, overflows)."""
    key, value, needle = BAD_LIFETIMES[case]
    module = unique_module()
    source = "file:params.json" if form == "file" else f"{module}.lifetime"
    params = {**params_file("x"), key: value}
    config, _ = one_port(ca, tmp_path, params, module, onAuthparams=source, allowGetToken=False)
    result = check(config, real=(case, form) in REAL_CHECKS)
    print(result.stderr)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "[OAUTH] onAuthparams:" in result.stderr
    assert "gives a lifetime no token request could use" in result.stderr
    assert needle in result.stderr
    assert len(result.stderr) < 1000  # a 5000-digit value is not repeated whole


@pytest.mark.parametrize("form", ["file", "function"])
@pytest.mark.parametrize(
    ("who", "stored"),
    [("user", "$argon2id$..."), ("user", ARGON_HASH[:20]), ("client", "$2b$12$short")],
)
def test_a_password_that_is_no_whole_hash_stops_the_start(
    ca: trustme.CA, tmp_path: Path, form: str, who: str, stored: str
) -> None:
    """The docs' ``$argon2id$...`` placeholder (or a hash cut short) as a password: before,
    ``fwrest check`` and the start passed and every login of that user was invalid_grant.
    Now exit 2 naming the port and the user or client, never the value."""
    module = unique_module()
    source = "file:params.json" if form == "file" else f"{module}.lifetime"
    params = params_file("x")
    if who == "user":
        params["users"] = [*params["users"], {"username": "grace", "password": stored}]
        named = "the user 'grace': its password begins as"
    else:
        params["client_secret"] = stored
        named = "the client 'web': its client_secret begins as"
    config, _ = one_port(ca, tmp_path, params, module, onAuthparams=source, allowGetToken=False)
    result = check(config, real=(form, who) == ("file", "user"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "[OAUTH] onAuthparams:" in result.stderr, result.stderr
    assert named in result.stderr and "is not a valid one" in result.stderr, result.stderr
    assert stored not in result.stdout + result.stderr


def test_a_function_returning_unusable_settings_stops_the_start(
    ca: trustme.CA, tmp_path: Path
) -> None:
    """A user without a password: every token request would be a 500."""
    auth = {"onAuthparams": "app.lifetime", "allowGetToken": False}
    config, _ = one_port(ca, tmp_path, {"username": "ada"}, **auth)
    result = run_cli("check", str(config), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    cannot = "the function app.lifetime returned settings that cannot be used: each user needs"
    assert f"[OAUTH] onAuthparams: {cannot} username and password" in result.stderr


RAISING_APP = """

def raising(params):
    # the legacy form, failing with what it was handed (never a secret)
    raise ValueError(f"legacy onAuthparams failed with {params!r}")
"""


def test_a_raising_legacy_onauthparams_logs_its_traceback_with_rest_error_full(
    ca: trustme.CA, tmp_path: Path
) -> None:
    """``rest_error_full=1``: the function's traceback follows the error line, as a handler's
    does; the request's password and client secret (a short one too) are not in the log."""
    certs = issue_certs(ca, tmp_path / "certs")
    config = free_config(
        tmp_path,
        servers={"RAISING": oauth_section(certs, onAuthparams="app.raising")},
        app=APP_SOURCE + RAISING_APP,
        general={"rest_error_full": 1},
    )
    with serving(config) as proc:
        port = OAuth(proc, "RAISING", certs)
        try:
            answer = port.grant("ada", "Zq", client_id="web", client_secret="Canary-Secret-77")
        finally:
            port.close()
        assert answer.status_code == 500, answer.text
        text = proc.wait_log("ValueError: legacy onAuthparams failed with")
    assert "[RAISING] onAuthparams raised ValueError; answered 500" in text, text
    assert "Traceback (most recent call last)" in text, text
    assert 'raise ValueError(f"legacy onAuthparams failed with {params!r}")' in text, text
    assert "'username': 'ada'" in text, text  # what the function was handed
    assert "Zq" not in text and "Canary-Secret-77" not in text, text
