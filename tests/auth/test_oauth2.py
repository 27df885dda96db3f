"""OAuth2 Password Grant (SPEC 4, 4.2, 7) in process (module ``tauth_oauth2_app``, memory store),
seven ports: ``OAUTH`` (``params`` mixing single keys and arrays, ``public`` as
``onAuthNoCheckUri``), ``PWONLY`` (password only), ``SHORT`` (``access_expires`` 1s), ``NOGET``
(``allowGetToken`` false), ``CUSTOM`` (``onAuth`` ``token_check``), ``ALIAS`` (``"scheme":
"oAuth"``), ``LOCKED`` (``maxFailures`` 3). The log test runs ``fwrest serve``; one configuration
error runs the real command."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import pytest
import trustme
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.auth.conftest import check
from tests.auth.oauth2_support import (
    TOKEN_KEYS,
    LocalOAuth,
    LocalService,
    OAuth,
    OAuthPort,
    assert_error,
    assert_invalid_token,
    assert_missing_token,
    claims_of,
    encoded_forms,
    error_of,
    expect,
    fresh_claims,
    issue_certs,
    issuer_of,
    local_service,
    oauth_section,
    sign,
    signing_key,
    wait_for,
)
from tests.conftest import APP_SOURCE, free_config, module_config, serving

WEB = ("web", "Web-Secret-9q")
MOBILE = ("mobile", "Mob-Secret-4x")
ADA = ("ada", "Ada-Pw-7731")
BOB = ("bob", "Bob-Pw-2207")
# the password grant of ada, as a form or a query string
PASSWORD = {"grant_type": "password", "username": ADA[0], "password": ADA[1]}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}

OAUTH_APP = """

import json as _json
from pathlib import Path as _Path

_HERE = _Path(__file__).resolve().parent


def params():
    return {"client_id": "web", "client_secret": "Web-Secret-9q", "username": "ada",
            "password": "Ada-Pw-7731", "grant_type": "password", "access_expires": 7200000,
            "refresh_expires": "Date()+1", "users": [{"username": "bob", "password": "Bob-Pw-2207"}],
            "client": [{"client_id": "mobile", "client_secret": "Mob-Secret-4x"}],
            "types": [{"grant_type": "refresh_token"}]}


def params_password_only():
    return {**params(), "types": [{"grant_type": "password"}]}


def params_short():
    return {**params(), "access_expires": "1s"}


def public():
    return ["/public", "/items/:id", "/open/*", "/rest/prefixed", "/slash/"]


def token_check(token, path):
    with (_HERE / "token_check.jsonl").open("a") as fh:
        fh.write(_json.dumps({"token": token, "path": path}) + "\\n")
    return {"open-sesame": True, "truthy": "yes", "one": 1}.get(token, False)


@get("/public")
def public_page():
    return {"public": True}

@get("/prefixed")
def prefixed_page():
    return {"prefixed": True}

@get("/slash")
def slash_page():
    return {"slash": True}

@get("/open/a/b")
def open_page():
    return {"open": True}


@get("/whoami")
def whoami():
    return {"scheme": rest.getCEntryPointAuthorizationScheme(),
            "on_auth": rest.getCEntryPointAuthorizationOnAuth(),
            "has_callback": rest.getLEntryPointAuthorization(),
            "pool_scheme": rest.getThreadPoolAuthorizationScheme(), "user": rest.getAuthUser()}
"""


MODULE = "tauth_oauth2_app"  # the module's service runs in this process: a name of its own


def write_service(folder: Path, certs: dict[str, Path]) -> Path:
    m = MODULE
    servers = {
        "OAUTH": oauth_section(certs, onAuthparams=f"{m}.params", onAuthNoCheckUri=f"{m}.public"),
        "PWONLY": oauth_section(certs, onAuthparams=f"{m}.params_password_only"),
        "SHORT": oauth_section(certs, onAuthparams=f"{m}.params_short"),
        "NOGET": oauth_section(certs, onAuthparams=f"{m}.params", allowGetToken=False),
        "CUSTOM": oauth_section(certs, onAuthparams=f"{m}.params", onAuth=f"{m}.token_check"),
        "ALIAS": oauth_section(certs, onAuthparams=f"{m}.params", scheme="oAuth"),
        "LOCKED": oauth_section(certs, onAuthparams=f"{m}.params", maxFailures=3),
    }
    return module_config(folder, m, servers=servers, app=APP_SOURCE + OAUTH_APP)


svc = local_service(write_service, "oauth2")


@pytest.fixture
def oauth(svc: LocalService) -> OAuthPort:
    return svc["OAUTH"]


# -- the token route --------------------------------------------------------------------------


def assert_token_response(response: httpx.Response, expires_in: int = 7200) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == TOKEN_KEYS, body
    assert (body["scope"], body["token_type"]) == ("default", "Bearer"), body
    assert body["expires_in"] == expires_in, body
    assert isinstance(body["access_token"], str) and isinstance(body["refresh_token"], str)
    headers = response.headers
    assert (headers["cache-control"], headers["pragma"]) == ("no-store", "no-cache"), headers
    assert headers["content-type"].startswith("application/json")
    return body


def by_get(port: OAuthPort, **params: str) -> httpx.Response:
    """A grant by GET, its parameters in the query string."""
    return port.http.get(port.token_url, params=params)


def raw_post(port: OAuthPort, body: str, query: str = "", **headers: str) -> httpx.Response:
    """A POST of the token route with the body ``body`` as is (a form unless ``headers``)."""
    url = f"{port.token_url}?{query}" if query else port.token_url
    return port.http.post(url, content=body.encode(), headers=headers or FORM)


def test_password_grant_by_post_form_body(oauth: OAuthPort) -> None:
    body = assert_token_response(oauth.grant(*ADA))
    hello = oauth.get("/hello", body["access_token"])
    assert hello.status_code == 200 and hello.json()["hello"] == "world"


def test_password_grant_by_get_query_string(oauth: OAuthPort) -> None:
    body = assert_token_response(
        by_get(oauth, **{**PASSWORD, "username": BOB[0], "password": BOB[1]})
    )
    assert oauth.get("/whoami", body["access_token"]).json()["user"] == "bob"


def test_post_takes_parameters_from_the_query_string_and_the_body(oauth: OAuthPort) -> None:
    assert_token_response(oauth.http.post(oauth.token_url, params=PASSWORD))  # only the query
    mixed = oauth.http.post(
        oauth.token_url,
        params={"grant_type": "password"},
        data={"username": ADA[0], "password": ADA[1]},
    )
    assert_token_response(mixed)


@pytest.mark.parametrize(
    ("query", "body"),
    [
        ("grant_type=password", "grant_type=password&username=ada&password=Ada-Pw-7731"),
        ("", "grant_type=password&username=ada&username=ada&password=Ada-Pw-7731"),
        ("grant_type=password&grant_type=password&username=ada&password=Ada-Pw-7731", ""),
        ("username=ada", "grant_type=password&username=bob&password=Bob-Pw-2207"),
    ],
    ids=["query-and-body", "body-twice", "query-twice", "different-values"],
)
def test_a_parameter_given_twice_is_invalid_request(
    oauth: OAuthPort, query: str, body: str
) -> None:
    response = raw_post(oauth, body, query)
    assert_error(response, "invalid_request")
    assert response.json()["error_description"]
    assert response.headers["cache-control"] == "no-store"


def test_form_fields_are_capped(oauth: OAuthPort) -> None:
    long_value = oauth.grant(*ADA, pad="y" * 5000)  # 4 KiB per field
    assert_error(long_value, "invalid_request")
    many = oauth.grant(*ADA, **{f"f{i}": "1" for i in range(40)})  # 32 fields
    assert_error(many, "invalid_request")
    assert_token_response(oauth.grant(*ADA, pad="y" * 4000))  # under the caps


def as_client(port: OAuthPort, how: str, client_id: str, secret: str) -> httpx.Response:
    """Ada's password grant, client credentials by Basic ``header``, as ``params``, or ``none``."""
    if how == "header":
        return port.post(PASSWORD, auth=(client_id, secret))
    if how == "params":
        return port.grant(*ADA, client_id=client_id, client_secret=secret)
    return port.grant(*ADA)


@pytest.mark.parametrize(
    ("how", "client"),
    [("header", WEB), ("header", MOBILE), ("params", MOBILE), ("none", WEB)],
    ids=["basic-header-web", "basic-header-mobile", "as-parameters", "none-the-first-client"],
)
def test_client_credentials_name_the_tokens_client(
    svc: LocalService, oauth: OAuthPort, how: str, client: tuple[str, str]
) -> None:
    body = assert_token_response(as_client(oauth, how, *client))
    assert claims_of(svc, body["access_token"])["client_id"] == client[0]


# (a wrong secret by header or as parameters, an unknown client: the hostile corpus's tr-client-*)
@pytest.mark.parametrize(
    ("how", "client_id", "secret"),
    [("header", "nobody", "Web-Secret-9q"), ("params", "web", "")],
)
def test_a_wrong_client_is_401_invalid_client(
    oauth: OAuthPort, how: str, client_id: str, secret: str
) -> None:
    response = as_client(oauth, how, client_id, secret)
    assert_error(response, "invalid_client", 401)
    assert response.headers["www-authenticate"].startswith("Basic"), response.headers


NO_PASSWORD = {"grant_type": "password", "username": "ada"}
# token requests refused with an OAuth2 error (RFC 6749 5.2): the form, Basic client auth, the error
# (a missing username, password, grant or refresh token, PASSWORD, scope admin: the hostile corpus)
REFUSED = {
    "grant-device-code": ({**PASSWORD, "grant_type": "urn:ietf:params:oauth:grant-type:device_code"}, None, "unsupported_grant_type"),
    "grant-implicit": ({**PASSWORD, "grant_type": "implicit"}, None, "unsupported_grant_type"),
    # a grant fwrest knows (SPEC 16.1) that onAuthparams lists no types for: not allowed
    "code-not-in-types": ({"grant_type": "authorization_code", "code": "c"}, None, "unauthorized_client"),
    # a known grant (SPEC 12.4) this port's onAuthparams gives no types for: never allowed
    "client-credentials-not-in-types": ({"grant_type": "client_credentials"}, WEB, "unauthorized_client"),
    "scope-default-admin": ({**PASSWORD, "scope": "default admin"}, None, "invalid_scope"),
    "scope-DEFAULT": ({**PASSWORD, "scope": "DEFAULT"}, None, "invalid_scope"),
    "neither": ({"grant_type": "password"}, None, "invalid_request"),
    # RFC 6749 3.1: a parameter without a value counts as omitted (as `curl -d password=`)
    "blank-password": ({**NO_PASSWORD, "password": ""}, None, "invalid_request"),
}  # fmt: skip


@pytest.mark.parametrize(("form", "auth", "error"), REFUSED.values(), ids=list(REFUSED))
def test_a_wrong_token_request_is_refused(
    oauth: OAuthPort, form: dict[str, str], auth: tuple[str, str] | None, error: str
) -> None:
    assert_error(oauth.post(form, auth=auth), error)


def test_a_grant_not_listed_in_types_is_unauthorized_client(svc: LocalService) -> None:
    port = svc["PWONLY"]
    tokens = port.tokens(*ADA)  # password is listed
    assert_error(port.refresh(tokens["refresh_token"]), "unauthorized_client")
    # the same refresh on a port whose types list refresh_token works (contrast)
    other = svc["OAUTH"]
    assert other.refresh(other.tokens(*ADA)["refresh_token"]).status_code == 200


def test_a_parameter_without_a_value_counts_as_omitted(oauth: OAuthPort) -> None:
    # RFC 6749 3.1, as `curl -d scope=` sends it
    assert_token_response(oauth.grant(*ADA, scope=""))
    # a blank password counts as missing (REFUSED); given twice is still refused, blank or not
    assert_error(raw_post(oauth, urlencode(PASSWORD) + "&scope=&scope="), "invalid_request")


def test_wrong_password_and_unknown_user_get_the_same_answer(oauth: OAuthPort) -> None:
    timings: dict[str, float] = {}
    answers: dict[str, httpx.Response] = {}
    for label, user, password in (
        ("wrong-password", "ada", "not-her-password"),
        ("unknown-user", "mallory", "not-her-password"),
    ):
        started = time.perf_counter()
        answers[label] = oauth.grant(user, password)
        timings[label] = time.perf_counter() - started
    print("seconds per answer:", {k: round(v, 4) for k, v in timings.items()})
    wrong, unknown = answers["wrong-password"], answers["unknown-user"]
    assert wrong.status_code == unknown.status_code == 400
    assert error_of(wrong) == "invalid_grant"
    assert wrong.content == unknown.content
    # the user's own password is not a password of another user
    assert oauth.grant("bob", ADA[1]).content == wrong.content


@pytest.mark.parametrize("grant", ["password", "refresh_token"])
def test_allow_get_token_false_refuses_the_grant_over_get(svc: LocalService, grant: str) -> None:
    """A refresh token in the URL is as exposed as a password: refused, and not spent."""
    port = svc["NOGET"]
    refresh = assert_token_response(port.grant(*ADA))["refresh_token"]
    query = PASSWORD if grant == "password" else {"grant_type": grant, "refresh_token": refresh}
    response = by_get(port, **query)
    assert_error(response, "invalid_request")
    assert "POST" in response.json()["error_description"]
    assert_token_response(port.grant(*ADA))  # POST still works
    assert_token_response(port.refresh(refresh))  # still unspent: POST refreshes it once


TOKEN_ALLOW = "GET, OPTIONS, POST"  # HEAD is refused: it would run a grant for nothing


def test_head_on_the_token_route_is_405_and_spends_nothing(oauth: OAuthPort) -> None:
    refresh = oauth.tokens(*ADA)["refresh_token"]
    query = {"grant_type": "refresh_token", "refresh_token": refresh}
    response = expect(oauth.http.head(oauth.token_url, params=query), 405)
    assert response.headers["allow"] == TOKEN_ALLOW
    # the refresh token was not spent: it still refreshes once
    assert_token_response(oauth.refresh(refresh))


def test_the_token_route_names_one_allow_whatever_the_refused_method(oauth: OAuthPort) -> None:
    """Allow lists OPTIONS too, as OPTIONS does; HEAD, refused, is in neither."""
    for method in ("HEAD", "PUT", "DELETE", "PATCH"):
        refused = expect(oauth.http.request(method, oauth.token_url), 405)
        assert refused.headers["allow"] == TOKEN_ALLOW, method
    options = expect(oauth.http.options(oauth.token_url))
    assert options.headers["allow"] == TOKEN_ALLOW


def test_the_first_get_grant_logs_a_warning_that_post_is_safer(svc: LocalService) -> None:
    port = svc["OAUTH"]
    since = len(svc.log())
    for _ in range(2):
        assert by_get(port, **PASSWORD).status_code == 200

    def get_warnings() -> list[str]:
        needles = ("WARNING", "[OAUTH]", "GET", "POST")
        return [line for line in svc.log().splitlines() if all(n in line for n in needles)]

    def access_lines(text: str) -> list[str]:
        needles = ("fwrest.access", "GET /rest/fw/oauth2/token?grant_type=***&user")
        return [line for line in text.splitlines() if all(n in line for n in needles)]

    wait_for(lambda: bool(get_warnings()), 10, "the GET warning is logged")
    # the worker's lines leave at the end of its loop's turn, maybe after the answer
    wait_for(lambda: len(access_lines(svc.log()[since:])) == 2, 10, "both access lines")
    print(get_warnings())
    assert len(get_warnings()) == 1, svc.log()
    # the token route's query string is redacted whole in the access line (SPEC 4.2)
    lines = access_lines(svc.log())
    print(lines[-1])
    assert len(lines) >= 2
    for line in lines:
        assert "?grant_type=***&username=***&password=***" in line, line
    # and no access line of the module's service shows a value of the token route's query
    assert not re.search(r"oauth2/token\?\S*=(?!\*\*\*)", svc.log())


def test_the_access_token_is_a_signed_jwt(svc: LocalService, oauth: OAuthPort) -> None:
    first = assert_token_response(oauth.grant(*ADA))
    second = assert_token_response(oauth.grant(*BOB))
    header = jwt.get_unverified_header(first["access_token"])
    assert header["typ"] == "at+jwt" and header["alg"] == "HS256"
    claims = claims_of(svc, first["access_token"])
    assert {"sub", "iat", "exp", "jti", "client_id", "iss"} <= set(claims), claims
    assert claims["sub"] == "ada" and claims["client_id"] == "web" and claims["iss"]
    assert claims["exp"] - claims["iat"] == 7200
    assert abs(claims["iat"] - time.time()) < 60
    assert claims["jti"] != claims_of(svc, second["access_token"])["jti"]
    assert claims_of(svc, second["access_token"])["sub"] == "bob"
    # the refresh token is an opaque random string, not a JWT
    assert first["refresh_token"].count(".") == 0 and len(first["refresh_token"]) >= 43


def test_the_signing_key_file_is_private(svc: LocalService) -> None:
    path = svc.folder / ".fwrest" / "signing.key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(signing_key(svc.folder)) >= 32


# -- refresh rotation and family revocation ----------------------------------------------------


def test_refresh_rotates_and_a_replay_revokes_the_whole_family(oauth: OAuthPort) -> None:
    first = oauth.tokens(*ADA)
    bystander = oauth.tokens(*ADA)  # another family of the same user
    second_response = oauth.refresh(first["refresh_token"])
    second = assert_token_response(second_response)
    assert second["refresh_token"] != first["refresh_token"]
    assert second["access_token"] != first["access_token"]
    assert oauth.get("/hello", second["access_token"]).status_code == 200
    third = assert_token_response(oauth.refresh(second["refresh_token"]))

    replay = oauth.refresh(first["refresh_token"])  # spent: a thief or a confused client
    assert_error(replay, "invalid_grant")

    assert_error(oauth.refresh(third["refresh_token"]), "invalid_grant")

    family = [first["access_token"], second["access_token"], third["access_token"]]

    def all_refused() -> bool:
        return all(oauth.get("/hello", token).status_code == 401 for token in family)

    took = wait_for(all_refused, 15, "the family's access tokens are refused")
    # SPEC 7's 1 s is timed in the serial part (tests/faults/test_sqlite_refresh.py,
    # tests/e2e/test_hosts_state.py); here a hang guard (SPEC 9)
    print(f"family's access tokens refused {took:.3f} s after the replay")
    assert_invalid_token(oauth.get("/hello", third["access_token"]))
    # the other family is untouched
    assert oauth.get("/hello", bystander["access_token"]).status_code == 200
    assert oauth.refresh(bystander["refresh_token"]).status_code == 200


def test_a_refresh_keeps_the_tokens_own_client_and_a_refused_one_spends_nothing(
    svc: LocalService, oauth: OAuthPort
) -> None:
    """SPEC 7.1: credentials naming another client (or none, where the token's is not ``web``) are
    ``invalid_grant`` and spend nothing (the pair took the other ``client_id``, the token was
    spent)."""
    mobile = oauth.tokens(*ADA, client_id=MOBILE[0], client_secret=MOBILE[1])
    refused = {
        "another client (Basic header)": oauth.post(
            {"grant_type": "refresh_token", "refresh_token": mobile["refresh_token"]}, auth=WEB
        ),
        "another client (form)": oauth.refresh(
            mobile["refresh_token"], client_id=WEB[0], client_secret=WEB[1]
        ),
        "no credentials": oauth.refresh(mobile["refresh_token"]),
    }
    for how, response in refused.items():
        assert response.status_code == 400, (how, response.text)
        assert error_of(response) == "invalid_grant", (how, response.text)
        assert "another client" in response.json()["error_description"], response.text
    # none of them spent it: its own client refreshes it (no replay, the family lives)
    renewed = assert_token_response(
        oauth.refresh(mobile["refresh_token"], client_id=MOBILE[0], client_secret=MOBILE[1])
    )
    assert claims_of(svc, renewed["access_token"])["client_id"] == "mobile"
    assert oauth.get("/hello", renewed["access_token"]).status_code == 200
    assert oauth.get("/hello", mobile["access_token"]).status_code == 200  # not revoked
    print(f"refresh of a mobile token: {[r.status_code for r in refused.values()]}, then 200")
    # the first client's token (no credentials) is refused to another, refreshed by none or its own
    web = oauth.tokens(*ADA)
    wrong = oauth.refresh(web["refresh_token"], client_id=MOBILE[0], client_secret=MOBILE[1])
    assert (wrong.status_code, error_of(wrong)) == (400, "invalid_grant"), wrong.text
    again = assert_token_response(oauth.refresh(web["refresh_token"]))
    assert claims_of(svc, again["access_token"])["client_id"] == "web"
    assert_token_response(
        oauth.post(
            {"grant_type": "refresh_token", "refresh_token": again["refresh_token"]}, auth=WEB
        )
    )


def served_before_its_exp(port: LocalOAuth, token: str) -> None:
    """Served until ``exp`` (whole seconds: due within ms of issue on a busy machine)."""
    response = port.get("/hello", token)
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    assert response.status_code == 200 or time.time() >= exp, response.text


def test_an_expired_access_token_is_refused(svc: LocalService) -> None:
    port = svc["SHORT"]
    tokens = assert_token_response(port.grant(*ADA), expires_in=1)
    served_before_its_exp(port, tokens["access_token"])
    took = wait_for(
        lambda: port.get("/hello", tokens["access_token"]).status_code == 401,
        10,
        "the access token expires",
    )
    print(f"access token of 1 s refused after {took:.3f} s")
    response = port.get("/hello", tokens["access_token"])
    assert_invalid_token(response)
    assert "expired" in response.json()["detailedMessage"]
    # the refresh token still gives a new, working access token
    renewed = assert_token_response(port.refresh(tokens["refresh_token"]), expires_in=1)
    served_before_its_exp(port, renewed["access_token"])


# -- the bearer check --------------------------------------------------------------------------


def test_a_missing_token_is_401_with_the_bearer_challenge(oauth: OAuthPort) -> None:
    response = oauth.get("/hello")
    assert_missing_token(response)
    assert response.json()["detailedMessage"]


Claims = dict[str, Any]


def rs256_with_jwk(claims: Claims) -> str:
    """Algorithm confusion: an RSA token carrying its own public key as a key source."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(private.public_key()))
    return jwt.encode(claims, private, algorithm="RS256", headers={"typ": "at+jwt", "jwk": jwk})


def ago(claims: Claims, iat: int, exp: int) -> Claims:
    """``claims`` issued ``iat`` and expired ``exp`` seconds ago."""
    return {**claims, "iat": int(time.time()) - iat, "exp": int(time.time()) - exp}


# each forgery of a real token (claims: fresh ones of its issuer, key: the service's); the
# others (tampered, alg none, another key, typ, crit, an embedded jwk, ...): the hostile
# corpus's tok-* cases, on fwrest serve
FORGERIES: dict[str, Callable[[Claims, bytes, str], str]] = {
    "expired-real-key": lambda claims, key, real: sign(ago(claims, 7200, 3600), key),
    # SPEC 7: the leeway is at most 60 s (a faked clock: the token says when it expired)
    "expired-61s-real-key": lambda claims, key, real: sign(ago(claims, 600, 61), key),
    "rs256-with-jwk": lambda claims, key, real: rs256_with_jwk(claims),
    # claims that fwrest never writes, in a token signed with its key: 401, not 500
    "family-not-a-string-real-key": lambda c, key, real: sign({**c, "fam": ["a", "list"]}, key),
    "exp-beyond-a-float-real-key": lambda claims, key, real: sign({**claims, "exp": 10**400}, key),
}


def forged(kind: str, svc: LocalService, real: str) -> str:
    # the issuer of the real token: each forgery is refused for its own fault only
    claims = fresh_claims(iss=jwt.decode(real, options={"verify_signature": False})["iss"])
    return FORGERIES[kind](claims, signing_key(svc.folder), real)


def test_a_token_forged_with_the_real_key_and_right_header_passes(
    svc: LocalService, oauth: OAuthPort
) -> None:
    """The contrast that makes the refusals below meaningful: the forging helpers work."""
    token = sign(fresh_claims("carol", iss=issuer_of(oauth)), signing_key(svc.folder))
    response = oauth.get("/whoami", token)
    assert (response.status_code, response.json()["user"]) == (200, "carol"), response.text


# SPEC 12.2: without "issuer" each host derives https://{HostName}:{Port}{location}; a derived iss
# is compared by scheme and path only
ISSUERS_OF_THE_SERVICE = (
    "https://10.0.0.7:8443/rest",  # another host of the service, its own address and port
    "https://api-2.example.test/rest",
    "https://[fd00::7]:9443/rest",
)
ISSUERS_OF_NO_ONE = (
    "http://127.0.0.1:8443/rest",  # another scheme
    "https://10.0.0.7:8443/other",  # another location path
    "https://10.0.0.7:8443/rest/",
    "https://10.0.0.7:8443/rest/x",
    "https://10.0.0.7:8443",  # the port's root: no location of this port is "/"
    "https://ada@10.0.0.7:8443/rest",  # user info
    "https://10.0.0.7:8443/rest?x=1",
    "https://10.0.0.7:8443/rest#x",
    "https:///rest",  # no host
    "/rest",
    "",
)


@pytest.mark.parametrize("iss", ISSUERS_OF_THE_SERVICE)
def test_a_derived_issuer_of_another_host_of_the_service_is_accepted(
    svc: LocalService, oauth: OAuthPort, iss: str
) -> None:
    assert issuer_of(oauth) != iss
    token = sign(fresh_claims("carol", iss=iss), signing_key(svc.folder))
    response = oauth.get("/whoami", token)
    assert (response.status_code, response.json()["user"]) == (200, "carol"), response.text


@pytest.mark.parametrize("iss", ISSUERS_OF_NO_ONE)
def test_an_issuer_of_another_scheme_or_path_is_refused(
    svc: LocalService, oauth: OAuthPort, iss: str
) -> None:
    token = sign(fresh_claims("carol", iss=iss), signing_key(svc.folder))
    response = oauth.get("/whoami", token)
    assert_invalid_token(response)
    assert "another issuer" in response.json()["detailedMessage"]


@pytest.mark.parametrize("kind", FORGERIES)
def test_invalid_tokens_are_401_invalid_token(
    svc: LocalService, oauth: OAuthPort, kind: str
) -> None:
    real = oauth.tokens(*ADA)["access_token"]
    token = forged(kind, svc, real)
    assert token != real
    assert_invalid_token(oauth.get("/hello", token))


def test_an_unknown_path_without_a_token_is_401_not_404(oauth: OAuthPort) -> None:
    assert_missing_token(oauth.get("/no/such/route"))
    assert_missing_token(oauth.get("/fw/no/such/native/route"))
    token = oauth.tokens(*ADA)["access_token"]
    assert oauth.get("/no/such/route", token).status_code == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/fw/oauth2/token"),
        ("GET", "/fw/oauth2/token"),
        ("GET", "/fw/oauth2/token/"),
        ("GET", "/x/../fw/oauth2/token"),
        ("GET", "/fw/rest/config"),
        ("POST", "/fw/rest/config"),
        ("GET", "/fw/healthcheck/ok"),
    ],
)
def test_a_native_path_outside_every_location_is_401_not_404(
    oauth: OAuthPort, method: str, path: str
) -> None:
    """SPEC 7.1: the token route exists under each location only; outside every location its path is
    401 without a token (it was 404: the exemption applied to an absent route)."""
    form = PASSWORD
    data = form if method == "POST" else None
    response = oauth.http.request(method, path, data=data)  # the client's origin, then path
    assert_missing_token(response)
    token = oauth.tokens(*ADA)["access_token"]
    authorized = oauth.http.request(
        method, path, data=data, headers={"Authorization": f"Bearer {token}"}
    )
    assert authorized.status_code == 404, authorized.text  # then the router speaks
    assert_token_response(oauth.post(form))  # the location's own token route is open


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/public", 200),  # literal
        ("/public/", 200),  # one trailing slash ignored
        ("/public?token=abc&x=/hello", 200),  # query ignored
        ("/Public", 401),  # case-sensitive
        ("/PUBLIC", 401),
        ("/public/more", 401),  # literal means literal
        ("/publicity", 401),
        ("/items/7", 200),  # :param segment
        ("/items/some-thing", 200),
        ("/items/7/extra", 401),
        ("/items", 401),
        ("/open/a/b", 200),  # trailing *
        ("/open/a/missing", 404),  # exempt, so routing runs: 404, not 401
        ("/opened", 401),
        ("/prefixed", 200),  # listed with the location prefix
        ("/slash", 200),  # listed with a trailing slash
        ("/slash/", 200),
        ("/hello", 401),  # not listed
        ("/hello?x=/public", 401),  # a query cannot make a path public
    ],
)
def test_on_auth_no_check_uri(oauth: OAuthPort, path: str, status: int) -> None:
    response = oauth.get(path)
    assert response.status_code == status, (path, response.text)
    if status == 401:
        assert_missing_token(response)


def test_the_token_route_is_never_protected(svc: LocalService) -> None:
    """A port with no ``onAuthNoCheckUri`` still answers its token route without a token."""
    port = svc["PWONLY"]
    assert_missing_token(port.get("/hello"))
    assert_token_response(port.grant(*ADA))


def test_a_named_on_auth_replaces_the_native_check(svc: LocalService) -> None:
    port = svc["CUSTOM"]
    calls = svc.folder / "token_check.jsonl"
    before = len(calls.read_text().splitlines()) if calls.exists() else 0
    assert port.get("/hello", "open-sesame").status_code == 200
    for refused in ("truthy", "one", "nope"):
        response = port.get("/hello", refused)
        assert response.status_code == 401, (refused, response.text)
        assert 'error="invalid_token"' in response.headers["www-authenticate"]
    # a genuine, valid access token of this port is not enough: the named function decides
    real = assert_token_response(port.grant(*ADA))["access_token"]
    assert port.get("/hello", real).status_code == 401
    assert_missing_token(port.get("/hello"))  # no token: the function is not called
    seen = [json.loads(line) for line in calls.read_text().splitlines()[before:]]
    assert [c["token"] for c in seen] == ["open-sesame", "truthy", "one", "nope", real]
    assert {c["path"] for c in seen} == {"/rest/hello"}


# what the REST object says on a port (the user's token, or CUSTOM's token_check's), in part
REST_OBJECT = {
    "OAUTH": (BOB, {"scheme": "oAuth2", "pool_scheme": "oAuth2", "user": "bob", "on_auth": ""}),
    "ALIAS": (ADA, {"scheme": "oAuth2", "user": "ada"}),  # "scheme": "oAuth", the alias
    "CUSTOM": (
        None,
        {"scheme": "oAuth2", "on_auth": f"{MODULE}.token_check", "has_callback": True},
    ),
}


@pytest.mark.parametrize("name", REST_OBJECT)
def test_rest_object_on_an_oauth2_port(svc: LocalService, name: str) -> None:
    port, (user, expected) = svc[name], REST_OBJECT[name]
    token = "open-sesame" if user is None else port.tokens(*user)["access_token"]
    info = port.get("/whoami", token).json()
    assert {key: info[key] for key in expected} == expected, info
    assert all(type(info[key]) is type(value) for key, value in expected.items()), info
    assert_missing_token(port.get("/whoami"))


def test_a_token_of_one_port_is_refused_on_another_port_of_the_service(svc: LocalService) -> None:
    """One signing key (SPEC 4.2), ``aud`` per section (SPEC 7.1): signature yes, audience no."""
    token = svc["ALIAS"].tokens(*ADA)["access_token"]
    assert svc["ALIAS"].get("/hello", token).status_code == 200
    assert_invalid_token(svc["OAUTH"].get("/hello", token))
    claims = jwt.decode(token, options={"verify_signature": False})
    resigned = sign({**claims, "aud": "OAUTH"}, signing_key(svc.folder))
    assert svc["OAUTH"].get("/hello", resigned).status_code == 200


# -- configuration errors (fwrest check, exit 2) ------------------------------------------------


def _broken(folder: Path, certs: dict[str, Path], change: str) -> Path:
    module = f"tauth_oauth2_check_{change.replace('-', '_')}"  # checked in this process too
    section = oauth_section(certs, onAuthparams=f"{module}.params")
    auth = section["FwData"]["Authorization"]
    if change == "no-tls":
        del section["SslCertificate"], section["SslCertificateKey"]
    elif change == "no-onauthparams":
        del auth["onAuthparams"]
    elif change == "missing-function":
        auth["onAuthparams"] = f"{module}.no_such_params"
    elif change == "missing-file":
        auth["onAuthparams"] = "file:no-such-params.json"
    return module_config(folder, module, servers={"OAUTH": section}, app=APP_SOURCE + OAUTH_APP)


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        ("no-tls", ("TLS", "OAUTH", "SslCertificate")),
        ("no-onauthparams", ("onAuthparams", "OAUTH")),
        ("missing-function", ("no_such_params", "onAuthparams")),
        ("missing-file", ("no-such-params.json", "onAuthparams")),
    ],
)
def test_config_errors_abort_check(
    ca: trustme.CA, tmp_path: Path, change: str, needles: tuple[str, ...]
) -> None:
    config = _broken(tmp_path, issue_certs(ca, tmp_path / "certs"), change)
    result = check(config, real=change == "no-tls")
    print(result.stdout, result.stderr)
    assert result.returncode == 2, (result.stdout, result.stderr)
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def test_a_valid_oauth2_config_passes_check(ca: trustme.CA, tmp_path: Path) -> None:
    """The contrast of the errors above."""
    config = _broken(tmp_path, issue_certs(ca, tmp_path / "certs"), "none")
    result = check(config, real=True)
    assert result.returncode == 0, result.stderr
    assert "oAuth2" in result.stdout


# -- brute force -------------------------------------------------------------------------------


def test_brute_force_locks_the_user_out(svc: LocalService) -> None:
    port = svc["LOCKED"]  # maxFailures 3
    since = len(svc.log())
    for _ in range(3):
        assert_error(port.grant(ADA[0], "guess"), "invalid_grant")
    locked = expect(port.grant(ADA[0], "guess"), 429)
    retry_after = int(locked.headers["retry-after"])
    print(f"Retry-After: {retry_after} s")
    assert 1 <= retry_after <= 300
    # RFC 6749 5.1, 5.2 as every answer of the token route: no-store, an OAuth error (and the
    # fields the 429 carried before)
    assert locked.headers["cache-control"] == "no-store", locked.headers
    assert locked.headers["pragma"] == "no-cache", locked.headers
    assert locked.headers["content-type"] == "application/json", locked.headers
    assert locked.json() == {
        "code": 429,
        "detailedMessage": "too many failed attempts",
        "message": "Too Many Requests",
        "error": "invalid_grant",
        "error_description": "too many failed attempts",
    }
    correct = port.grant(*ADA)  # the right password during the lock-out: the same answer
    assert correct.status_code == 429, correct.text
    assert "retry-after" in correct.headers
    assert (correct.content, correct.headers["cache-control"]) == (locked.content, "no-store")
    assert port.grant(ADA[0], "guess").status_code == 429
    # the worker's lines leave at the end of its loop's turn, maybe after the answer
    wait_for(lambda: svc.log()[since:].count("token 429") == 3, 10, "the 429s' access lines")
    text = svc.log()[since:]  # this test's lines
    warnings = [line for line in text.splitlines() if "WARNING" in line and "429" in line]
    print(warnings)
    assert len(warnings) == 1, text


# -- secrets never reach the logs ---------------------------------------------------------------


def test_logs_never_show_passwords_secrets_or_tokens(ca: trustme.CA, tmp_path: Path) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    password, client_secret = "Ad@ pw/7731&=x+y%", "Web Secret/9q&=?"
    secret_app = OAUTH_APP.replace(ADA[1], password).replace(WEB[1], client_secret)
    wrong_password = "Wr0ng pw/&=%zz"
    section = oauth_section(certs, onAuthparams="app.params", onAuthNoCheckUri="app.public")
    config = free_config(
        tmp_path,
        servers={"OAUTH": section},
        app=APP_SOURCE + secret_app,
        # level 5 logs headers and bodies; cut long enough that token answers appear whole
        general={"rest_log_level": 5, "rest_log_stringsize": 4000},
    )
    issued: list[str] = []
    with serving(config) as proc, OAuth(proc, "OAUTH", certs) as port:
        # POST with the client secret in the body, then by Basic header
        first = port.tokens(ADA[0], password, client_id="web", client_secret=client_secret)
        second = port.post({**PASSWORD, "password": password}, auth=("web", client_secret)).json()
        # GET with the password in the query string
        third = by_get(port, **{**PASSWORD, "password": password}).json()
        assert port.grant("ada", wrong_password).status_code == 400
        assert by_get(port, **{**PASSWORD, "password": wrong_password}).status_code == 400
        renewed = port.refresh(first["refresh_token"]).json()
        for tokens in (first, second, third, renewed):
            issued += [tokens["access_token"], tokens["refresh_token"]]
            assert port.get("/hello", tokens["access_token"]).status_code == 200
        assert port.get("/hello", first["access_token"] + "x").status_code == 401
        assert port.get("/public", second["access_token"]).status_code == 200
        assert port.get(f"/public?access_token={third['access_token']}").status_code == 200
        assert port.refresh(first["refresh_token"]).status_code == 400  # a replay, logged
        assert port.get("/boom", second["access_token"]).status_code == 500
        proc.wait_log("/rest/boom")
    text = proc.log() + proc.file_log()
    assert "fwrest.access" in text and "/rest/fw/oauth2/token" in text  # the log is not empty
    # level 5 logs bodies, but never the token route's (they carry passwords and tokens)
    assert "DEBUG" in text and "(not logged: token route)" in text
    secrets = [password, client_secret, wrong_password, *issued]
    for token in issued:
        if token.count(".") == 2:  # a JWT: its claims and signature parts too
            secrets += token.split(".")[1:]
        else:
            secrets.append(token[:16])
    leaked = [form for secret in secrets for form in encoded_forms(secret) if form in text]
    assert not leaked, f"leaked into the log: {leaked}\n{text}"
