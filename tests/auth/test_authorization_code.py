"""The code grant with PKCE (SPEC 16.1) in process; real clients: tests/e2e/test_code_flow.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from openapi_spec_validator import validate

from tests.auth.conftest import fwrest_cli
from tests.auth.oauth2_support import (
    LocalOAuth,
    LocalService,
    assert_error,
    claims_of,
    error_of,
    expect,
    fresh_claims,
    issuer_of,
    local_service,
    oauth_section,
    sign,
    signing_key,
)
from tests.conftest import APP_SOURCE, module_config

MODULE = "tauth_authorization_code_app"
AUTHORIZE = "/fw/oauth2/authorize"
WELL_KNOWN_AS = "/.well-known/oauth-authorization-server"
SPA_CB = "https://app.example.com/cb"
WEB_CB = "https://web.example.com/cb"
WEB_SECRET = "Web-Secret-4k9"
ADA_PW = "Ada-Pw-7731"
SLASH_ISS = "https://auth.example.com/rest/"  # a configured issuer with a trailing slash

APP = (
    APP_SOURCE
    + f"""

CLIENTS = [
    {{"client_id": "spa", "public": True, "scopes": ["orders:read"],
      "redirect_uris": ["{SPA_CB}", "https://app.example.com/other", "http://127.0.0.1/cb",
                        "http://[::1]/cb"]}},
    {{"client_id": "web", "client_secret": "{WEB_SECRET}", "redirect_uris": ["{WEB_CB}"]}},
    {{"client_id": "bare", "client_secret": "Bare-Secret-1"}},
]
USERS = [
    {{"username": "ada", "password": "{ADA_PW}", "scopes": ["orders:read"]}},
    {{"username": "bob", "password": "Bob-Pw-2291"}},
]


def params():
    grants = ["authorization_code", "refresh_token", "password", "client_credentials"]
    return {{"client": CLIENTS, "users": USERS, "access_expires": "10m",
             "types": [{{"grant_type": grant}} for grant in grants]}}


def code_only():
    grants = ["authorization_code", "refresh_token"]
    return {{"client": CLIENTS, "users": USERS,
             "types": [{{"grant_type": grant}} for grant in grants]}}


def no_code():
    return {{"client": CLIENTS, "users": USERS, "types": [{{"grant_type": "password"}}]}}


def web_first():
    return {{**params(), "client": CLIENTS[1:] + CLIENTS[:1]}}
"""
)


def write_service(folder: Path, certs: dict[str, Path]) -> Path:
    (folder / "login.html").write_text(
        "<html><head><style>p{color:red}</style></head><body><h1>ACME {{client}}</h1>"
        "<p>{{scopes}}</p><p id=e>{{error}}</p>{{form}}</body></html>"
    )
    without_authorize = oauth_section(certs, onAuthparams=f"{MODULE}.params")
    without_authorize["FwData"]["NativeRoutes"] = {"disable": ["oauth2/authorize"]}
    # the brief's port: no password grant, so its document is public (no token to read it)
    code_only = oauth_section(certs, onAuthparams=f"{MODULE}.code_only")
    code_only["FwData"]["NativeRoutes"] = {"public": ["rest/openapi.json"]}
    params = f"{MODULE}.params"
    servers = {
        "CODE": oauth_section(certs, onAuthparams=params),
        "LIMITED": oauth_section(certs, onAuthparams=params, maxFailures=3),
        "NOCODE": oauth_section(certs, onAuthparams=f"{MODULE}.no_code"),
        "BRANDED": oauth_section(certs, onAuthparams=params, loginPage="file:login.html"),
        "NOAUTHORIZE": without_authorize,
        "WEBFIRST": oauth_section(certs, onAuthparams=f"{MODULE}.web_first"),
        "SLASH": oauth_section(certs, onAuthparams=params, issuer=SLASH_ISS),
        "CODEONLY": code_only,
    }
    return module_config(folder, MODULE, servers=servers, app=APP, general={"rest_log_level": 5})


svc = local_service(write_service, "authcode")


@pytest.fixture
def code(svc: LocalService) -> LocalOAuth:
    return svc["CODE"]


def pkce_s256(verifier: str) -> str:
    """RFC 7636 4.2's S256, as a client computes it."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    return verifier, pkce_s256(verifier)


def authorize_params(challenge: str, **extra: Any) -> dict[str, Any]:
    out = {"response_type": "code", "client_id": "spa", "redirect_uri": SPA_CB,
           "code_challenge": challenge, "code_challenge_method": "S256",
           "state": "st-" + secrets.token_hex(4), **extra}  # fmt: skip
    # "-": leave the parameter out; a list: the parameter given once per value
    return {k: v for k, v in out.items() if v != "-"}


def page(port: LocalOAuth, params: dict[str, Any]) -> httpx.Response:
    return port.http.get(port.base + AUTHORIZE, params=params)


def ask(port: LocalOAuth, **extra: Any) -> tuple[str, dict[str, Any], httpx.Response]:
    """The authorize route asked with a new PKCE pair: its verifier, the parameters, the answer."""
    verifier, challenge = pkce()
    params = authorize_params(challenge, **extra)
    return verifier, params, page(port, params)


def form_fields(response: httpx.Response) -> dict[str, str]:
    """The hidden fields of the login page's form, as a browser would post them."""
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', response.text)
    import html

    return {name: html.unescape(value) for name, value in fields}


def post_form(
    port: LocalOAuth, fields: dict[str, str], username: str = "ada", password: str = ADA_PW
) -> httpx.Response:
    data = {**fields, "username": username, "password": password}
    return port.http.post(port.base + AUTHORIZE, data=data)


def redirected(response: httpx.Response) -> tuple[str, dict[str, str]]:
    """(where to, the query's values) of a 302."""
    assert response.status_code == 302, (response.status_code, response.text[:300])
    location = response.headers["location"]
    parts = urlsplit(location)
    values = {k: v[0] for k, v in parse_qs(parts.query).items()}
    return location.split("?", 1)[0], values


def login_code(
    port: LocalOAuth, **extra: str
) -> tuple[str, str, dict[str, str]]:  # (code, verifier, the authorize params)
    verifier, params, shown = ask(port, **extra)
    assert shown.status_code == 200, shown.text
    _to, values = redirected(post_form(port, form_fields(shown)))
    return values["code"], verifier, params


def exchange(port: LocalOAuth, value: str, verifier: str, **extra: str) -> httpx.Response:
    data = {"grant_type": "authorization_code", "code": value, "redirect_uri": SPA_CB,
            "code_verifier": verifier, "client_id": "spa", **extra}  # fmt: skip
    return port.post({k: v for k, v in data.items() if v != "-"})


# -- the whole flow ---------------------------------------------------------------------------


def test_a_public_client_logs_in_and_redeems_its_code(svc: LocalService, code: LocalOAuth) -> None:
    verifier, params, shown = ask(code, scope="orders:read")
    assert shown.status_code == 200
    assert shown.headers["content-type"].startswith("text/html")
    assert "spa" in shown.text and "orders:read" in shown.text
    to, values = redirected(post_form(code, form_fields(shown)))
    assert to == SPA_CB
    assert values["state"] == params["state"]
    assert values["iss"] == issuer_of(code)  # RFC 9207
    assert len(base64.urlsafe_b64decode(values["code"] + "==")) >= 16  # 128 bits at least
    answer = expect(exchange(code, values["code"], verifier))
    tokens = answer.json()
    assert tokens["scope"] == "orders:read" and tokens["refresh_token"]
    assert answer.headers["cache-control"] == "no-store"
    claims = claims_of(svc, tokens["access_token"])
    assert (claims["sub"], claims["client_id"]) == ("ada", "spa")
    assert code.get("/hello", token=tokens["access_token"]).status_code == 200
    expect(code.refresh(tokens["refresh_token"], client_id="spa"))


def test_a_confidential_client_authenticates_at_the_token_route(code: LocalOAuth) -> None:
    verifier, _params, shown = ask(code, client_id="web", redirect_uri="-")  # its only redirect
    to, values = redirected(post_form(code, form_fields(shown)))
    assert to == WEB_CB
    base = {"grant_type": "authorization_code", "code": values["code"], "code_verifier": verifier}
    # client_id alone is not enough for a confidential client (SPEC 16.1)
    assert_error(code.post({**base, "client_id": "web"}), "invalid_client", 401)
    # redirect_uri may be left out at the token route: the authorize request had none
    value, verifier2, _params = login_code(code, client_id="web", redirect_uri="-")
    ok = code.post(
        {"grant_type": "authorization_code", "code": value, "code_verifier": verifier2},
        auth=("web", WEB_SECRET),
    )
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("port", ["CODE", "WEBFIRST"])  # spa, web the first client
def test_a_confidential_client_authenticates_to_refresh_its_code_grant_tokens(
    svc: LocalService, port: str
) -> None:
    """RFC 6749 6: a confidential client authenticates to refresh, so no first client stands
    in for the code grant's (SPEC 4.2's rule stays the password grant's, for the original
    product's clients); refused unspent. A review saw a stolen refresh token of the first
    client refreshed without any credentials."""
    on = svc[port]
    value, verifier, _ = login_code(on, client_id="web", redirect_uri="-")
    form = {"grant_type": "authorization_code", "code": value, "code_verifier": verifier}
    refresh = expect(on.post(form, auth=("web", WEB_SECRET))).json()["refresh_token"]
    assert_error(on.refresh(refresh), "invalid_client", 401)
    assert_error(on.refresh(refresh, client_id="web"), "invalid_client", 401)
    form = {"grant_type": "refresh_token", "refresh_token": refresh}
    current = expect(on.post(form, auth=("web", WEB_SECRET))).json()["refresh_token"]
    # the spent token presented without credentials: refused before it counts as a replay
    # (a review saw it revoke the family: whoever held an old token logged the user out)
    assert_error(on.refresh(refresh), "invalid_client", 401)
    expect(on.post({**form, "refresh_token": current}, auth=("web", WEB_SECRET)))
    if port == "WEBFIRST":  # the password grant's family: the first client without credentials
        legacy = on.tokens("bob", "Bob-Pw-2291")["refresh_token"]
        expect(on.refresh(legacy))


def test_a_loopback_redirect_matches_any_port(code: LocalOAuth) -> None:
    verifier, challenge = pkce()
    native = "http://127.0.0.1:53219/cb"
    shown = expect(page(code, authorize_params(challenge, redirect_uri=native)))
    # the form may send the browser back to the app's port
    assert "form-action 'self' http://127.0.0.1:53219;" in shown.headers["content-security-policy"]
    to, values = redirected(post_form(code, form_fields(shown)))
    assert to == native
    expect(exchange(code, values["code"], verifier, redirect_uri=native))
    # another host on loopback's port is not the registered redirect
    expect(page(code, authorize_params(challenge, redirect_uri="http://127.0.0.2:53219/cb")), 400)


# -- the authorize route's refusals -----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"client_id": "-"}, "names no client"),
        ({"client_id": "nobody"}, "client this service does not know"),
        ({"redirect_uri": "https://evil.example/cb"}, "not one the client registered"),
        ({"redirect_uri": SPA_CB + "/"}, "not one the client registered"),
        ({"redirect_uri": "-"}, "has not exactly one"),  # spa has three
        ({"client_id": "bare", "redirect_uri": "-"}, "has no redirect URI"),
        # given twice, even with one value: no redirect can be trusted (RFC 6749 4.1.2.1)
        ({"client_id": ["spa", "spa"]}, "the parameter &#x27;client_id&#x27; is given more"),
        ({"redirect_uri": [SPA_CB, "https://evil.example/cb"]}, "&#x27;redirect_uri&#x27;"),
        ({"redirect_uri": [SPA_CB, SPA_CB], "state": ["a", "b"]}, "&#x27;redirect_uri&#x27;"),
    ],
)
def test_an_untrustworthy_redirect_is_a_400_page_never_a_redirect(
    code: LocalOAuth, change: dict[str, str], needle: str
) -> None:
    response = expect(ask(code, **change)[2], 400)
    assert "location" not in response.headers
    assert response.headers["content-type"].startswith("text/html")
    assert needle in response.text
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


@pytest.mark.parametrize(
    ("port", "change", "error"),
    [
        ("CODE", {"code_challenge": "-"}, "invalid_request"),
        ("CODE", {"code_challenge_method": "-"}, "invalid_request"),  # RFC 7636 4.3: plain
        ("CODE", {"code_challenge_method": "plain"}, "invalid_request"),
        ("CODE", {"code_challenge_method": "S512"}, "invalid_request"),
        ("CODE", {"code_challenge": "short"}, "invalid_request"),
        # longer than an S256 challenge can be (43): a code it gave could never be redeemed
        ("CODE", {"code_challenge": "a" * 44}, "invalid_request"),
        ("CODE", {"code_challenge": "a" * 128}, "invalid_request"),
        ("CODE", {"code_challenge": "a" * 42 + "."}, "invalid_request"),
        ("CODE", {"response_type": "token"}, "unsupported_response_type"),
        ("CODE", {"response_type": "-"}, "invalid_request"),
        ("CODE", {"scope": "admin"}, "invalid_scope"),
        ("CODE", {"scope": 'bad"scope'}, "invalid_scope"),
        ("NOCODE", {}, "unauthorized_client"),
    ],
)
def test_other_errors_redirect_with_error_state_and_iss(
    svc: LocalService, port: str, change: dict[str, str], error: str
) -> None:
    client = svc[port]
    _verifier, params, answer = ask(client, **change)
    to, values = redirected(answer)
    assert to == SPA_CB
    assert values["error"] == error
    assert values["state"] == params["state"]
    assert values["iss"] == issuer_of(client)
    assert "code" not in values


@pytest.mark.parametrize(
    "name",
    ["state", "scope", "code_challenge", "code_challenge_method", "response_type", "foo"],
)
def test_a_parameter_given_twice_is_invalid_request_by_redirect(
    code: LocalOAuth, name: str
) -> None:
    """RFC 6749 4.1.2.1: a repeated parameter is invalid_request by redirect once client_id and
    redirect_uri are good; fwrest's own posted form gets the 400 page, no password checked."""
    _verifier, challenge = pkce()
    params = authorize_params(challenge, scope="orders:read")
    first = params.get(name, "x")
    params[name] = [first, first if name == "scope" else "other"]  # even one value twice
    to, values = redirected(page(code, params))
    assert to == SPA_CB
    assert values["error"] == "invalid_request"
    assert values["error_description"] == f"the parameter {name!r} is given more than once"
    assert values["iss"] == issuer_of(code)
    assert "code" not in values
    if name == "state":
        assert "state" not in values  # neither of the two is the client's for sure
    else:
        assert values["state"] == params["state"]
    several = {**params, "state": ["a", "b"], "foo": ["1", "2"]}
    _to, values = redirected(page(code, several))
    assert values["error"] == "invalid_request" and "state" not in values
    assert "'state'" in values["error_description"] and "'foo'" in values["error_description"]
    # the login form posted with the field twice: the 400 page
    fields = form_fields(expect(ask(code)[2]))
    posted = {**fields, "username": "ada", "password": ADA_PW}
    posted[name] = [posted.get(name, "x"), "other"]
    refused = expect(code.http.post(code.base + AUTHORIZE, data=posted), 400)
    assert "location" not in refused.headers
    assert f"the parameter &#x27;{name}&#x27; is given more than once" in refused.text


def test_the_scopes_of_a_client_without_its_own_are_the_users(code: LocalOAuth) -> None:
    """web lists none: ada gets orders:read; bob is refused by redirect after login (SPEC 12.4)."""
    for user, password, granted in (("ada", ADA_PW, True), ("bob", "Bob-Pw-2291", False)):
        asked = {"client_id": "web", "redirect_uri": WEB_CB, "scope": "orders:read"}
        verifier, params, shown = ask(code, **asked)
        assert shown.status_code == 200, shown.text
        to, values = redirected(post_form(code, form_fields(shown), user, password))
        assert to == WEB_CB
        if not granted:
            assert values["error"] == "invalid_scope" and values["state"] == params["state"]
            continue
        redeem = {
            "grant_type": "authorization_code",
            "code": values["code"],
            "redirect_uri": WEB_CB,
        }
        answer = code.post({**redeem, "code_verifier": verifier}, auth=("web", WEB_SECRET))
        assert answer.json()["scope"] == "orders:read", answer.text


# -- the login page ---------------------------------------------------------------------------


def test_the_login_page_is_self_contained_and_not_cached(code: LocalOAuth) -> None:
    response = expect(ask(code, state='<script>alert("x")</script>')[2])
    headers = response.headers
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "script-src" not in csp and "unsafe-inline" not in csp
    assert "form-action 'self' https://app.example.com;" in csp
    # an IPv6 loopback, which no host-source can name: its scheme and port on any host
    shown = expect(ask(code, redirect_uri="http://[::1]:5173/cb")[2])
    assert "form-action 'self' http://*:5173;" in shown.headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    assert headers["cache-control"] == "no-store"
    text = response.text
    assert "<script" not in text  # the state is escaped
    assert "&lt;script&gt;" in text
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)  # no outside asset
    assert 'name="username"' in text and 'type="password"' in text
    # the only style is the page's own block, allowed by its hash
    style = re.search(r"<style>(.*?)</style>", text, re.DOTALL)
    assert style is not None
    digest = base64.b64encode(hashlib.sha256(style.group(1).encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in csp


def test_the_users_template_is_filled_with_escaped_values(svc: LocalService) -> None:
    branded = svc["BRANDED"]
    verifier, _params, shown = ask(branded, scope="orders:read")
    assert shown.status_code == 200
    assert "<h1>ACME spa</h1>" in shown.text and "<p>orders:read</p>" in shown.text
    digest = base64.b64encode(hashlib.sha256(b"p{color:red}").digest()).decode()
    assert f"'sha256-{digest}'" in shown.headers["content-security-policy"]
    wrong = expect(post_form(branded, form_fields(shown), password="nope"))
    assert "<p id=e>Invalid username or password.</p>" in wrong.text
    _to, values = redirected(post_form(branded, form_fields(wrong)))
    assert exchange(branded, values["code"], verifier).status_code == 200


@pytest.mark.parametrize("port", ["CODE", "BRANDED"])
def test_the_form_posts_to_the_routes_absolute_path_wherever_the_page_was_served(
    svc: LocalService, port: str
) -> None:
    """The page at ``.../authorize/`` (the router ignores the slash), fwrest's own and the
    template's ``{{form}}``: its form posts to ``/rest/fw/oauth2/authorize``, not to the
    relative ``authorize`` (``.../authorize/authorize``, a 401)."""
    served = svc[port]
    verifier, challenge = pkce()
    shown = served.http.get(served.base + AUTHORIZE + "/", params=authorize_params(challenge))
    assert shown.status_code == 200, shown.text
    action = re.search(r'<form method="post" action="([^"]*)">', shown.text)
    assert action is not None and action.group(1) == "/rest" + AUTHORIZE, shown.text
    data = {**form_fields(shown), "username": "ada", "password": ADA_PW}
    _to, values = redirected(served.http.post(urljoin(str(shown.url), action.group(1)), data=data))
    assert exchange(served, values["code"], verifier).status_code == 200


def test_a_wrong_password_and_an_unknown_user_get_the_same_page(code: LocalOAuth) -> None:
    fields = form_fields(ask(code)[2])
    wrong = post_form(code, fields, "bob", "not-his")
    unknown = post_form(code, fields, "nobody", "not-his")
    assert wrong.status_code == unknown.status_code == 200
    message = "Invalid username or password."
    assert message in wrong.text and message in unknown.text
    # the pages differ only by the user name refilled and the form's token
    strip = re.compile(r'value="[^"]*"')
    assert strip.sub("", wrong.text) == strip.sub("", unknown.text)


def test_the_login_form_is_read_from_the_body_alone(svc: LocalService, code: LocalOAuth) -> None:
    """SPEC 16.1: user and password are fields of the posted form; in the query string they
    sign nobody in (a review saw a 302 with a code), nor do hidden fields moved there."""
    fields = form_fields(ask(code)[2])
    in_query = code.http.post(
        code.base + AUTHORIZE, params={"username": "ada", "password": ADA_PW}, data=fields
    )
    assert in_query.status_code == 200 and "location" not in in_query.headers
    assert "Enter your user name and password." in in_query.text
    form_in_query = code.http.post(
        code.base + AUTHORIZE, params=fields, data={"username": "ada", "password": ADA_PW}
    )
    assert form_in_query.status_code == 400 and "location" not in form_in_query.headers
    assert ADA_PW not in svc.log()
    redirected(post_form(code, fields))  # the same form, posted as a browser does


@pytest.mark.parametrize(
    "forge", ["missing", "another request's", "tampered state", "expired", "garbage"]
)
def test_a_form_without_its_own_csrf_token_is_refused_before_any_password(
    svc: LocalService, forge: str
) -> None:
    port = svc["CODE"]
    _verifier, challenge = pkce()
    fields = form_fields(page(port, authorize_params(challenge)))
    if forge == "missing":
        del fields["fw_csrf"]
    elif forge == "another request's":
        other = form_fields(page(port, authorize_params(challenge)))  # another state
        fields["fw_csrf"] = other["fw_csrf"]
    elif forge == "tampered state":
        fields["state"] = "changed"
    elif forge == "expired":
        authorizer = _authorizer(port)
        fields["fw_csrf"] = authorizer.form_token(fields, int(time.time()) - 601)
    else:
        fields["fw_csrf"] = "1." + "A" * 43
    before = svc.log().count("login refused")
    response = expect(post_form(port, fields, "bob", "wrong-password"), 400)
    assert "stale or was not made for this request" in response.text
    assert "location" not in response.headers
    assert svc.log().count("login refused") == before  # no password was checked


def _authorizer(port: LocalOAuth) -> Any:
    """The port's Authorizer (to make a token of the past: the only way to age one)."""
    from fwrest.auth.oauth2.authorize import Authorizer

    app = port.http._transport._runtime.open()  # type: ignore[attr-defined]
    found = app.token_service.authorizer
    assert isinstance(found, Authorizer)
    return found


def test_the_login_page_and_the_password_grant_share_one_budget(svc: LocalService) -> None:
    """maxFailures 3: two wrong passwords on the page and one at the token route lock both out."""
    code = svc["LIMITED"]
    fields = form_fields(ask(code)[2])
    user = "budget-" + secrets.token_hex(3)
    for _ in range(2):
        assert post_form(code, fields, user, "wrong").status_code == 200
    assert code.grant(user, "wrong").json()["error"] == "invalid_grant"
    locked = expect(post_form(code, fields, user, "wrong"), 429)
    assert int(locked.headers["retry-after"]) > 0
    assert "Too many failed sign-ins" in locked.text
    assert code.grant(user, "wrong").status_code == 429
    # the warning names both ways in: the lock-out's failures came from the page too
    wanted = f"3 failed sign-ins (password grant or login page) within 300 s for user {user!r}"
    assert wanted in svc.log(), svc.log()[-2000:]


# -- the token route --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "status", "error"),
    [
        ({"code_verifier": "x" * 43}, 400, "invalid_grant"),
        ({"code_verifier": "short"}, 400, "invalid_grant"),
        ({"code_verifier": "-"}, 400, "invalid_request"),
        ({"redirect_uri": "https://app.example.com/other"}, 400, "invalid_grant"),
        ({"redirect_uri": "-"}, 400, "invalid_grant"),  # the authorize request carried one
        ({"code": "not-a-code"}, 400, "invalid_grant"),
        ({"client_id": "web", "client_secret": WEB_SECRET}, 400, "invalid_grant"),
        ({"client_id": "-"}, 401, "invalid_client"),
    ],
)
def test_a_code_redeemed_wrongly_is_refused(
    code: LocalOAuth, change: dict[str, str], status: int, error: str
) -> None:
    value, verifier, _params = login_code(code)
    answer = exchange(code, value, verifier, **change)
    assert (answer.status_code, answer.json()["error"]) == (status, error), answer.text


def test_an_expired_code_is_invalid_grant(svc: LocalService, code: LocalOAuth) -> None:
    from fwrest.auth.oauth2.grants import authorization_code

    ttl = authorization_code.CODE_TTL_S
    authorization_code.CODE_TTL_S = 0.2  # the authorize module reads it from here
    try:
        import fwrest.auth.oauth2.authorize as authorize

        authorize.CODE_TTL_S = 0.2
        value, verifier, _params = login_code(code)
    finally:
        authorization_code.CODE_TTL_S = ttl
        authorize.CODE_TTL_S = ttl
    time.sleep(0.3)
    answer = exchange(code, value, verifier)
    expired = {"error": "invalid_grant", "error_description": "the authorization code has expired"}
    assert answer.json() == expired


def test_a_code_redeemed_twice_revokes_what_the_first_issued(
    svc: LocalService, code: LocalOAuth
) -> None:
    value, verifier, _params = login_code(code)
    tokens = expect(exchange(code, value, verifier)).json()
    assert code.get("/hello", token=tokens["access_token"]).status_code == 200
    second = exchange(code, value, verifier)
    assert second.json()["error"] == "invalid_grant"
    assert "already used" in second.json()["error_description"]
    # every token of the first redemption is revoked (the worker's cache at once)
    assert code.get("/hello", token=tokens["access_token"]).status_code == 401
    assert error_of(code.refresh(tokens["refresh_token"], client_id="spa")) == "invalid_grant"


def test_a_public_client_cannot_use_client_credentials(code: LocalOAuth) -> None:
    answer = code.post({"grant_type": "client_credentials", "client_id": "spa"})
    assert (answer.status_code, answer.json()["error"]) == (400, "unauthorized_client")


def test_a_public_client_revokes_its_tokens_but_cannot_introspect(code: LocalOAuth) -> None:
    value, verifier, _params = login_code(code)
    tokens = exchange(code, value, verifier).json()
    form = {"token": tokens["access_token"], "client_id": "spa"}
    introspect = code.http.post(code.base + "/fw/oauth2/introspect", data=form)
    assert (introspect.status_code, introspect.json()["error"]) == (401, "invalid_client")
    # revocation at logout: client_id alone names a public client (RFC 7009 2.1)
    revoked = code.http.post(
        code.base + "/fw/oauth2/revoke", data={"token": tokens["refresh_token"], "client_id": "spa"}
    )
    assert revoked.status_code == 200
    assert error_of(code.refresh(tokens["refresh_token"], client_id="spa")) == "invalid_grant"


# -- metadata, audit, log ---------------------------------------------------------------------


def test_the_metadata_names_the_authorization_endpoint(svc: LocalService) -> None:
    doc = svc["CODE"].http.get("/rest/fw/oauth2/metadata").json()
    assert doc["authorization_endpoint"] == doc["issuer"] + AUTHORIZE
    assert doc["response_types_supported"] == ["code"]
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert doc["authorization_response_iss_parameter_supported"] is True
    assert "authorization_code" in doc["grant_types_supported"]
    assert "none" in doc["token_endpoint_auth_methods_supported"]
    plain = svc["NOCODE"].http.get("/rest/fw/oauth2/metadata").json()
    assert plain["response_types_supported"] == []
    assert "authorization_endpoint" not in plain
    # the public client spa gets tokens with client_id alone there too (password grant)
    assert plain["token_endpoint_auth_methods_supported"] == [
        "client_secret_basic",
        "client_secret_post",
        "none",
    ]
    assert svc["NOCODE"].tokens("ada", ADA_PW, client_id="spa")["access_token"]


def test_a_configured_issuer_with_a_trailing_slash_is_kept_as_written(svc: LocalService) -> None:
    """SPEC 12.2: iss equals the configured issuer exactly, its trailing slash too (RFC 8414
    3.3): the metadata, the redirect's iss (RFC 9207) and the tokens; the endpoints are under
    it without a doubled slash, the well-known path RFC 8414 3.1's (as fwrest.verify builds
    it). A review saw the slash dropped: fwrest.verify's Verifier refused the metadata."""
    from fwrest.verify import Verifier

    port = svc["SLASH"]
    doc = expect(port.http.get(port.base + "/fw/oauth2/metadata")).json()
    assert doc["issuer"] == SLASH_ISS
    assert doc["token_endpoint"] == SLASH_ISS + "fw/oauth2/token"
    assert doc["authorization_endpoint"] == SLASH_ISS.rstrip("/") + AUTHORIZE
    well_known = urlsplit(Verifier(SLASH_ISS)._core.metadata_url).path
    assert well_known == "/.well-known/oauth-authorization-server/rest"
    assert expect(port.http.get(well_known)).json() == doc
    verifier, _params, shown = ask(port)
    _to, values = redirected(post_form(port, form_fields(shown)))
    assert values["iss"] == SLASH_ISS
    access = expect(exchange(port, values["code"], verifier)).json()["access_token"]
    assert claims_of(svc, access)["iss"] == SLASH_ISS
    assert port.get("/hello", token=access).status_code == 200
    # what 0.1.0 wrote (the slash dropped) stays the service's across an upgrade; another
    # path does not
    for iss, status in [(SLASH_ISS.rstrip("/"), 200), (SLASH_ISS + "x", 401)]:
        token = sign(fresh_claims("ada", aud="SLASH", iss=iss), signing_key(svc.folder))
        assert port.get("/hello", token=token).status_code == status, iss


def test_the_openapi_document_declares_the_form_the_token_services_routes_take(
    code: LocalOAuth,
) -> None:
    """SPEC 14.2: POST token, revoke, introspect and authorize take a form only (JSON is 400):
    the document declares that type alone, with the fields, and authorize's 302."""
    from fwrest.auth.oauth2.authorize import CSRF_FIELD

    access = code.tokens("ada", ADA_PW)["access_token"]
    doc = expect(code.get("/fw/rest/openapi.json", token=access)).json()
    form = "application/x-www-form-urlencoded"
    for route, field in [
        ("token", "grant_type"),
        ("revoke", "token"),
        ("introspect", "token"),
        ("authorize", CSRF_FIELD),
    ]:
        body = doc["paths"][f"/rest/fw/oauth2/{route}"]["post"]["requestBody"]
        assert list(body["content"]) == [form], (route, body)
        assert field in body["content"][form]["schema"]["required"], route
        # what it declares is what it takes: JSON, which it no longer declares, is refused
        as_json = code.http.post(code.base + f"/fw/oauth2/{route}", json={field: "x"})
        assert as_json.status_code == 400, (route, as_json.text)
    authorize = doc["paths"]["/rest" + AUTHORIZE]
    assert "302" in authorize["post"]["responses"] and "302" in authorize["get"]["responses"]
    fields = authorize["post"]["requestBody"]["content"][form]["schema"]["properties"]
    assert {"username", "password", "client_id", "code_challenge"} <= set(fields)
    token = doc["paths"]["/rest/fw/oauth2/token"]["post"]["requestBody"]["content"][form]
    assert {"code_verifier", "refresh_token", "resource"} <= set(token["schema"]["properties"])


def test_a_disabled_authorize_route_is_not_in_the_metadata(svc: LocalService) -> None:
    port = svc["NOAUTHORIZE"]
    assert page(port, {"client_id": "x"}).status_code == 404
    doc = port.http.get("/rest/fw/oauth2/metadata").json()
    assert "authorization_endpoint" not in doc
    assert doc["response_types_supported"] == []
    # nor is the grant it needs (RFC 8414 2: a listed code grant requires the endpoint)
    grants = ["password", "refresh_token", "client_credentials"]
    assert doc["grant_types_supported"] == grants
    assert port.http.get(WELL_KNOWN_AS + "/rest").json() == doc
    # (its validate() as a whole refuses SPEC 12.2's empty response_types_supported)
    AuthorizationServerMetadata(doc).validate_authorization_endpoint()
    # the port that serves the route lists both
    served = svc["CODE"].http.get("/rest/fw/oauth2/metadata").json()
    assert served["grant_types_supported"] == [*grants, "authorization_code"]
    AuthorizationServerMetadata(served).validate()


def _flows(port: LocalOAuth, token: str | None) -> dict[str, Any]:
    doc = expect(port.get("/fw/rest/openapi.json", token)).json()
    validate(doc)
    flows: dict[str, Any] = doc["components"]["securitySchemes"]["oauth2"]["flows"]
    return flows


def test_the_openapi_document_declares_the_flows_of_the_grants_offered(
    svc: LocalService, code: LocalOAuth
) -> None:
    """OpenAPI 3.1 OAuth Flows Object: one flow per grant the port's metadata lists."""
    token_url, authorize_url = "/rest/fw/oauth2/token", "/rest" + AUTHORIZE
    flows = _flows(code, code.tokens("ada", ADA_PW)["access_token"])
    assert list(flows) == ["authorizationCode", "password", "clientCredentials"]
    assert flows["authorizationCode"]["authorizationUrl"] == authorize_url
    for name in ("authorizationCode", "password"):
        assert flows[name]["tokenUrl"] == flows[name]["refreshUrl"] == token_url
    assert "refreshUrl" not in flows["clientCredentials"]  # RFC 6749 4.4.3: none issued
    assert all("default" in flow["scopes"] for flow in flows.values())
    # authorization_code and refresh_token only: no password flow (that grant is refused)
    only = svc["CODEONLY"]
    assert _flows(only, None) == {
        "authorizationCode": {
            "authorizationUrl": authorize_url,
            "tokenUrl": token_url,
            "refreshUrl": token_url,
            "scopes": flows["authorizationCode"]["scopes"],
        }
    }
    refused = only.grant("ada", ADA_PW)
    assert (refused.status_code, error_of(refused)) == (400, "unauthorized_client")
    # the authorize route disabled: no code flow; the password grant alone: no refreshUrl
    without = svc["NOAUTHORIZE"]
    assert list(_flows(without, without.tokens("ada", ADA_PW)["access_token"])) == [
        "password",
        "clientCredentials",
    ]
    no_code = svc["NOCODE"]
    password = _flows(no_code, no_code.tokens("ada", ADA_PW)["access_token"])
    assert list(password) == ["password"] and "refreshUrl" not in password["password"]
    # fwrest openapi writes the same flows (onAuthparams called as fwrest check calls it)
    out = svc.folder / "codeonly.json"
    done = fwrest_cli("openapi", str(svc.config), "--server", "CODEONLY", "-o", str(out),
                      real=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())["components"]["securitySchemes"]["oauth2"]["flows"]
    assert written == _flows(only, None)


def test_logins_failures_and_replays_are_audited_and_no_secret_is_logged(
    svc: LocalService, code: LocalOAuth
) -> None:
    verifier, _params, shown = ask(code)
    fields = form_fields(shown)
    post_form(code, fields, "ada", "Wrong-Pw-55")
    _to, values = redirected(post_form(code, fields))
    exchange(code, values["code"], verifier)
    exchange(code, values["code"], verifier)
    log = svc.log()
    for secret in (ADA_PW, "Wrong-Pw-55", values["code"], verifier, fields["fw_csrf"]):
        assert secret not in log, secret
    audit = expect(code.get("/fw/rest/audit", token=code.tokens("ada", ADA_PW)["access_token"]))
    events = {e["event"]: e for e in reversed(audit.json())}
    assert (events["login"]["actor"], events["login"]["details"]) == ("ada", {"client_id": "spa"})
    assert events["login.failure"]["actor"] == events["code.replay"]["actor"] == "ada"
    assert events["code.replay"]["details"]["client_id"] == "spa"
