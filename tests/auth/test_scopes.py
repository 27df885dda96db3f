"""Scopes and the client credentials grant (SPEC 12.4): a request's ``scope`` within its user's and
client's ``scopes`` plus ``default``, a refresh keeping the family's (narrowed, never widened),
routes requiring scopes (403 ``insufficient_scope``; ignored with a start warning on a Basic port or
a named ``onAuth``). In process (module ``tauth_scopes_app``, memory store); real clients
(requests-oauthlib's ``BackendApplicationClient``, Authlib) over TLS on ``fwrest serve`` of
docs/authorization.md's scopes example, whose own example runs as written."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from argon2 import PasswordHasher
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.requests_client import OAuth2Session as AuthlibSession
from oauthlib.oauth2 import BackendApplicationClient
from requests_oauthlib import OAuth2Session as RequestsOAuthSession

from fwrest import get
from fwrest.auth.oauth2.params import OAuthError as AuthOAuthError
from fwrest.auth.oauth2.params import ParamsError, legacy_view, normalise
from fwrest.auth.oauth2.scopes import allowed_scopes, requested
from fwrest.repository.decorators import RouteError, registered
from fwrest.server import prepare
from fwrest.testing import Client
from tests.auth.oauth2_support import (
    LocalService,
    OAuthPort,
    OAuthService,
    assert_error,
    claims_of,
    error_of,
    expect,
    local_service,
    oauth_section,
    served_service,
)
from tests.conftest import APP_SOURCE, free_config, local_port, module_config
from tests.docs.blocks import example, substitute
from tests.docs.test_examples import close_all, run_python

WEB = ("web", "Web-Secret-9q")  # orders:read orders:write reports
AS_WEB = {"client_id": WEB[0], "client_secret": WEB[1]}  # its credentials as form fields
SVC = ("svc", "Svc-Secret-5k")  # orders:read introspect
PLAIN = ("plain", "Plain-Secret-2m")  # no scopes: default only
ADA = ("ada", "Ada-Pw-7731")  # orders:read orders:write admin
BOB = ("bob", "Bob-Pw-2207")  # no scopes
BASIC_USER = ("u", "Basic-Pw-1")
# the authorization guide's example service (docs/authorization.md, Scopes)
SHOP_WEB = ("shop-web", "web-secret")
REPORTING = ("reporting", "report-secret")
GRACE = ("grace", "hopper")
CHEAP_ARGON = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1)

SCOPES_APP = '''

def params():
    return {
        "client": [
            {"client_id": "web", "client_secret": "Web-Secret-9q",
             "scopes": ["orders:read", "orders:write", "reports"]},
            {"client_id": "svc", "client_secret": "Svc-Secret-5k",
             "scopes": ["orders:read", "introspect"]},
            {"client_id": "plain", "client_secret": "Plain-Secret-2m"},
        ],
        "users": [
            {"username": "ada", "password": "Ada-Pw-7731",
             "scopes": ["orders:read", "orders:write", "admin"]},
            {"username": "bob", "password": "Bob-Pw-2207"},
        ],
        "types": [{"grant_type": "password"}, {"grant_type": "refresh_token"},
                  {"grant_type": "client_credentials"}],
        "access_expires": "1h",
        "refresh_expires": "Date()+1",
    }


def params_no_cc():
    data = params()
    data["types"] = [{"grant_type": "password"}]
    return data


def params_single():
    """The single keys with a top-level scopes: the single user's and client's."""
    return {"client_id": "web", "client_secret": "Web-Secret-9q", "username": "ada",
            "password": "Ada-Pw-7731", "scopes": ["orders:read"]}


_CALLS = []


@get("/orders", scopes=["orders:read"])
def list_orders():
    _CALLS.append("list")
    return {"user": rest.getAuthUser(), "scopes": rest.getAuthScopes()}


@post("/orders", scopes=["orders:read", "orders:write"])
async def add_order():
    _CALLS.append("add")
    return {"added": True}


def report():
    _CALLS.append("report")
    return {"report": True}


def calls():
    return list(_CALLS)


def basic_check(user, password):
    return (user, password) == ("u", "Basic-Pw-1")


def any_token(token, path):
    return True
'''

MODULE = "tauth_scopes_app"


def write_service(folder: Path, certs: dict[str, Path]) -> Path:
    m = MODULE
    basic = {"scheme": "basic", "OnAuth": f"{m}.basic_check", "maxFailures": 1_000_000}
    urns = {"/reports": {"GET": {"Function": f"{m}.report", "Scopes": ["reports"]}}}
    servers = {
        "SCOPED": {**oauth_section(certs, onAuthparams=f"{m}.params"), "LoadURNs": urns},
        "NO_CC": oauth_section(certs, onAuthparams=f"{m}.params_no_cc"),
        "SINGLE": oauth_section(certs, onAuthparams=f"{m}.params_single"),
        "CUSTOM": oauth_section(certs, onAuthparams=f"{m}.params", onAuth=f"{m}.any_token"),
        "NO_META": oauth_section(certs, onAuthparams=f"{m}.params"),
        "BASIC": local_port(LoadURNs=urns, FwData={"Authorization": basic}),
    }
    servers["NO_META"]["FwData"]["NativeRoutes"] = {"disable": ["oauth2/metadata"]}
    return module_config(folder, m, servers=servers, app=APP_SOURCE + SCOPES_APP)


def write_guide(folder: Path, certs: dict[str, Path]) -> Path:
    """The guide's scopes example (hash made) as module ``orders``, on port ``SCOPED``."""
    block = example("authorization-scopes")
    assert block.text.startswith("# app/orders.py\n")
    (folder / "orders.py").write_text(
        # cheap cost factors: tests, not storage
        substitute(block, {"$argon2id$...": CHEAP_ARGON.hash(GRACE[1])})
    )
    servers = {"SCOPED": oauth_section(certs, onAuthparams="orders.params")}
    config = free_config(folder, servers=servers)
    text = config.read_text().replace('"Repository": "app"', '"Repository": "app, orders"')
    config.write_text(text)
    return config


svc = local_service(write_service, "scopes")
served = served_service(write_guide, "scopes_served")


@pytest.fixture
def port(svc: LocalService) -> OAuthPort:
    return svc["SCOPED"]


def calls(port: OAuthPort) -> list[str]:
    """What the routes' functions recorded (the module is this process's)."""
    import tauth_scopes_app  # type: ignore[import-not-found]  # written by the fixture

    return list(tauth_scopes_app.calls())


def challenge_of(response: httpx.Response | requests.Response) -> dict[str, str | None]:
    """A Bearer challenge's parameters, parsed by requests' own header parser."""
    scheme, _, rest = response.headers["www-authenticate"].partition(" ")
    assert scheme == "Bearer", response.headers
    return requests.utils.parse_dict_header(rest)


def assert_insufficient(response: httpx.Response | requests.Response, scope: str) -> None:
    assert response.status_code == 403, response.text
    assert challenge_of(response) == {"error": "insufficient_scope", "scope": scope}
    body = response.json()
    assert body["code"] == 403 and body["message"] == "Forbidden", body
    assert scope in body["detailedMessage"], body


def assert_invalid_scope(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    assert error_of(response) == "invalid_scope", response.text
    assert "access_token" not in response.text
    assert response.headers["cache-control"] == "no-store"


# -- the password grant with scope --------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "client", "scope", "granted"),
    [
        # no scope: default, whatever the entries allow
        (ADA, WEB, None, "default"),
        # both list scopes: what both allow, in the request's order, each once
        (ADA, WEB, "orders:write orders:read orders:write", "orders:write orders:read"),
        (ADA, WEB, "default orders:read", "default orders:read"),
        # only the user lists scopes (the client plain lists none)
        (ADA, PLAIN, "admin", "admin"),
        # only the client lists scopes
        (BOB, WEB, "reports", "reports"),
        # neither: default only
        (BOB, PLAIN, "default", "default"),
    ],
)
def test_a_password_grant_gets_the_scopes_it_asks_for_within_its_entries(
    svc: LocalService,
    port: OAuthPort,
    user: tuple[str, str],
    client: tuple[str, str],
    scope: str | None,
    granted: str,
) -> None:
    extra = {} if scope is None else {"scope": scope}
    answer = port.tokens(*user, client_id=client[0], client_secret=client[1], **extra)
    assert answer["scope"] == granted
    claims = claims_of(svc, answer["access_token"])
    assert claims["scope"] == granted and claims["sub"] == user[0]
    assert claims["client_id"] == client[0]


def _password(user: tuple[str, str], client: tuple[str, str], scope: str) -> dict[str, str]:
    names = ("username", "password", "client_id", "client_secret")
    return {
        "grant_type": "password",
        "scope": scope,
        **dict(zip(names, user + client, strict=True)),
    }


def _cc(scope: str) -> dict[str, str]:
    return {"grant_type": "client_credentials", "scope": scope}


# grants of a scope the entries do not allow (a form, a client's Basic auth)
NOT_ALLOWED = {
    "user-not-client": (_password(ADA, WEB, "admin"), None),  # the user's, not the client's
    "client-not-user": (_password(ADA, WEB, "reports"), None),  # the client's, not the user's
    "one-unknown": (_password(ADA, WEB, "orders:read unknown"), None),  # spoils the request
    "another-clients": (_password(ADA, PLAIN, "reports"), None),
    "neither-lists": (_password(BOB, PLAIN, "orders:read"), None),
    "case-sensitive": (_password(ADA, WEB, "ORDERS:READ"), None),  # RFC 6749 3.3
    # client credentials: the client entry's scopes
    "cc-write": (_cc("orders:write"), SVC),
    "cc-plain": (_cc("orders:read"), PLAIN),
    "cc-admin": (_cc("orders:read admin"), SVC),
}


@pytest.mark.parametrize(("form", "auth"), NOT_ALLOWED.values(), ids=list(NOT_ALLOWED))
def test_a_scope_the_entries_do_not_allow_is_invalid_scope(
    port: OAuthPort, form: dict[str, str], auth: tuple[str, str] | None
) -> None:
    assert_invalid_scope(port.post(form, auth=auth))


def test_without_client_credentials_the_first_clients_scopes_apply(port: OAuthPort) -> None:
    # the request is issued for the first client (web): ada may then have what both allow
    assert port.tokens(*ADA, scope="orders:write")["scope"] == "orders:write"
    assert_invalid_scope(port.grant(*ADA, scope="admin"))


@pytest.mark.parametrize(
    "scope",
    [
        "a" * 4096,  # 4 KiB: within the 4 KiB field cap, over the scope's 1 KiB
        "orders:read " * 100,  # 1.2 KiB of a scope that would be allowed
        "orders:read\r\nX-Injected: 1",
        "orders:read\x00",
        "orders:read\tdefault",
        "\x1b[31mdefault",
        'orders:read" error="x',
        "orders\\read",
        "ordérs:read",
    ],
    ids=["4KiB", "long-allowed", "crlf", "nul", "tab", "escape", "quote", "backslash", "non-ascii"],
)
def test_a_hostile_scope_is_invalid_scope(svc: LocalService, port: OAuthPort, scope: str) -> None:
    assert_invalid_scope(port.grant(*ADA, **AS_WEB, scope=scope))
    assert "\x1b" not in svc.log() and "X-Injected: 1\n" not in svc.log()


# other refusals of a grant with scope: the port, the form, its client's Basic auth, the error
REFUSED = {
    # a wrong password with an unknown scope is the wrong password: no scope told without it
    "scope-after-password": ("SCOPED", {"grant_type": "password", "username": ADA[0],
                             "password": "not-her-password", "scope": "admin"}, None, "invalid_grant"),
    # the token route's 4 KiB cap on any field (SPEC 7) comes first
    "field-cap": ("SCOPED", {"grant_type": "password", "username": ADA[0], "password": ADA[1],
                  "scope": "a" * 4097}, None, "invalid_request"),
    "cc-not-in-types": ("NO_CC", {"grant_type": "client_credentials"}, SVC, "unauthorized_client"),
    # no refresh token for client credentials: ignored with the grant, a made-up one invalid_grant
    "cc-no-refresh": ("SCOPED", {"grant_type": "refresh_token", "refresh_token": "made-up-refresh-token",
                      "client_id": SVC[0], "client_secret": SVC[1]}, None, "invalid_grant"),
}  # fmt: skip


@pytest.mark.parametrize(("port", "form", "auth", "error"), REFUSED.values(), ids=list(REFUSED))
def test_a_grant_is_refused_with_its_error(
    svc: LocalService, port: str, form: dict[str, str], auth: tuple[str, str] | None, error: str
) -> None:
    assert_error(svc[port].post(form, auth=auth), error)


def test_the_single_keys_with_a_top_level_scopes(svc: LocalService) -> None:
    port = svc["SINGLE"]
    assert port.tokens(*ADA, scope="orders:read")["scope"] == "orders:read"
    assert_invalid_scope(port.grant(*ADA, scope="orders:write"))


# -- refresh keeps the family's scopes -----------------------------------------------------------


def test_a_refresh_keeps_the_familys_scopes(svc: LocalService, port: OAuthPort) -> None:
    first = port.tokens(*ADA, **AS_WEB, scope="orders:read")
    body = expect(port.refresh(first["refresh_token"], **AS_WEB)).json()
    assert body["scope"] == "orders:read"
    assert claims_of(svc, body["access_token"])["scope"] == "orders:read"
    # and again, from the new refresh token
    again = port.refresh(body["refresh_token"], **AS_WEB).json()
    assert again["scope"] == "orders:read"


def test_a_refresh_may_narrow_but_never_widen(svc: LocalService, port: OAuthPort) -> None:
    first = port.tokens(*ADA, **AS_WEB, scope="orders:read orders:write")
    assert_invalid_scope(port.refresh(first["refresh_token"], **AS_WEB, scope="orders:read admin"))
    # the refused refresh spent nothing: the same token, narrowed, works at once
    narrow = expect(port.refresh(first["refresh_token"], **AS_WEB, scope="orders:read"))
    assert narrow.json()["scope"] == "orders:read"
    assert claims_of(svc, narrow.json()["access_token"])["scope"] == "orders:read"
    # the family keeps both: the next refresh without scope has them again
    later = port.refresh(narrow.json()["refresh_token"], **AS_WEB)
    assert later.json()["scope"] == "orders:read orders:write"
    # default is always allowed (SPEC 12.4), though the family was granted without it
    plain = expect(port.refresh(later.json()["refresh_token"], **AS_WEB, scope="default"))
    assert plain.json()["scope"] == "default"
    assert claims_of(svc, plain.json()["access_token"])["scope"] == "default"
    assert port.refresh(plain.json()["refresh_token"], **AS_WEB).json()["scope"] == (
        "orders:read orders:write"
    )


def test_a_password_grant_without_scope_makes_a_default_family(port: OAuthPort) -> None:
    first = port.tokens(*ADA, **AS_WEB)
    assert_invalid_scope(port.refresh(first["refresh_token"], **AS_WEB, scope="orders:read"))


# -- routes that require scopes -----------------------------------------------------------------


def test_a_route_answers_a_token_with_its_scopes(port: OAuthPort) -> None:
    token = port.tokens(*ADA, **AS_WEB, scope="orders:read")
    response = expect(port.get("/orders", token["access_token"]))
    assert response.json() == {"user": "ada", "scopes": ["orders:read"]}


def test_a_token_without_the_routes_scopes_gets_403_insufficient_scope(port: OAuthPort) -> None:
    before = calls(port)
    default = port.tokens(*ADA, **AS_WEB)["access_token"]
    assert_insufficient(port.get("/orders", default), "orders:read")
    reader = port.tokens(*ADA, **AS_WEB, scope="orders:read")
    # every scope of the route is needed (an async def route too)
    response = port.http.post(
        port.base + "/orders", headers={"Authorization": f"Bearer {reader['access_token']}"}
    )
    assert_insufficient(response, "orders:read orders:write")
    assert calls(port) == before  # no function ran
    # a LoadURNs route's Scopes
    assert_insufficient(port.get("/reports", default), "reports")
    # a route without scopes takes any valid token
    assert port.get("/hello", default).status_code == 200


def test_a_token_with_every_scope_reaches_each_route(port: OAuthPort) -> None:
    both = port.tokens(*BOB, **AS_WEB, scope="orders:read orders:write reports")["access_token"]
    headers = {"Authorization": f"Bearer {both}"}
    assert port.http.post(port.base + "/orders", headers=headers).json() == {"added": True}
    assert port.get("/reports", both).json() == {"report": True}


def test_without_a_token_a_scoped_route_is_still_401(port: OAuthPort) -> None:
    expect(port.get("/orders"), 401)  # authorization first: no token, no scope talk


def test_a_named_on_auth_gives_no_scopes_so_scoped_routes_refuse(svc: LocalService) -> None:
    port = svc["CUSTOM"]
    assert port.get("/hello", "anything").status_code == 200
    assert_insufficient(port.get("/orders", "anything"), "orders:read")


def test_a_basic_port_ignores_route_scopes(svc: LocalService) -> None:
    with Client(svc.config, server="BASIC") as basic:
        response = expect(basic.get("/rest/orders", auth=BASIC_USER))
        assert response.json() == {"user": "u", "scopes": []}
        assert basic.get("/rest/reports", auth=BASIC_USER).json() == {"report": True}


def test_the_start_warns_where_route_scopes_cannot_be_checked(svc: LocalService) -> None:
    warnings = prepare(svc.config).warnings
    basic = [w for w in warnings if w.startswith("[BASIC]") and "scopes" in w]
    assert basic == [
        "[BASIC] route scopes are ignored on a Basic port: GET /rest/orders, "
        "GET /rest/reports, POST /rest/orders"
    ]
    # (the warning about svc's introspect, which bob may get, is test_client_names.py's)
    routes = [w for w in warnings if "scopes" in w and "'introspect'" not in w]
    custom = [w for w in routes if w.startswith("[CUSTOM]")]
    assert len(custom) == 1 and "403 insufficient_scope" in custom[0], custom
    assert not [w for w in routes if w.startswith("[SCOPED]")]


# -- list/service and OpenAPI --------------------------------------------------------------------


def test_the_listing_shows_a_routes_scopes(port: OAuthPort) -> None:
    token = port.tokens(*ADA)["access_token"]
    listing = port.get("/fw/rest/list/service", token).json()
    by_path = {e["endpoint"]: e for e in listing}
    methods = {m["method"]: m for m in by_path["/orders"]["methods"]}
    assert methods["GET"]["scopes"] == ["orders:read"]
    assert methods["POST"]["scopes"] == ["orders:read", "orders:write"]
    assert by_path["/reports"]["methods"][0]["scopes"] == ["reports"]
    assert "scopes" not in by_path["/hello"]["methods"][0]


def test_the_openapi_document_shows_a_routes_scopes(port: OAuthPort) -> None:
    token = port.tokens(*ADA)["access_token"]
    doc = port.get("/fw/rest/openapi.json", token).json()
    flow = doc["components"]["securitySchemes"]["oauth2"]["flows"]["password"]
    assert set(flow["scopes"]) == {"default", "orders:read", "orders:write", "reports"}
    paths = doc["paths"]
    assert paths["/rest/orders"]["get"]["security"] == [{"oauth2": ["orders:read"]}]
    assert paths["/rest/orders"]["post"]["security"] == [
        {"oauth2": ["orders:read", "orders:write"]}
    ]
    assert paths["/rest/reports"]["get"]["security"] == [{"oauth2": ["reports"]}]
    assert "security" not in paths["/rest/hello"]["get"]  # the document's default applies
    assert doc["security"] == [{"oauth2": []}]  # /hello takes any valid token: no scope


def test_a_basic_ports_listing_shows_no_scopes(svc: LocalService) -> None:
    with Client(svc.config, server="BASIC") as basic:
        listing = basic.get("/rest/fw/rest/list/service", auth=BASIC_USER).json()
        assert not any("scopes" in m for e in listing for m in e["methods"])


# -- client credentials ------------------------------------------------------------------------


def test_client_credentials_issue_an_access_token_only(svc: LocalService, port: OAuthPort) -> None:
    response = port.post({"grant_type": "client_credentials", "scope": "orders:read"}, auth=SVC)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"access_token", "scope", "token_type", "expires_in"}
    assert body["scope"] == "orders:read" and body["token_type"] == "Bearer"
    assert response.headers["cache-control"] == "no-store"
    claims = claims_of(svc, body["access_token"])
    assert claims["sub"] == "svc" and claims["client_id"] == "svc"
    assert claims["scope"] == "orders:read"
    # the client's own token: the application sees client:<id>, never a user's name
    assert port.get("/orders", body["access_token"]).json()["user"] == "client:svc"


def test_client_credentials_by_form_fields_and_default_scope(port: OAuthPort) -> None:
    response = port.post(
        {"grant_type": "client_credentials", "client_id": PLAIN[0], "client_secret": PLAIN[1]}
    )
    assert response.status_code == 200, response.text
    assert response.json()["scope"] == "default"


def test_client_credentials_need_client_authentication(port: OAuthPort) -> None:
    # no credentials: no first client stands in (RFC 6749 4.4.2)
    response = assert_error(port.post({"grant_type": "client_credentials"}), "invalid_client", 401)
    assert response.headers["www-authenticate"].startswith("Basic")
    wrong = port.post({"grant_type": "client_credentials"}, auth=(SVC[0], "not-its-secret"))
    assert wrong.status_code == 401 and error_of(wrong) == "invalid_client"


# -- real client libraries over TLS ------------------------------------------------------------


def test_requests_oauthlib_backend_application_client(served: OAuthService) -> None:
    port = served["SCOPED"]
    ca = str(served.certs["ca"])
    client = BackendApplicationClient(client_id=REPORTING[0], scope=["orders:read"])
    with RequestsOAuthSession(client=client) as session:
        token = session.fetch_token(
            token_url=port.token_url, client_id=REPORTING[0], client_secret=REPORTING[1], verify=ca
        )
        assert token["scope"] == ["orders:read"] and "refresh_token" not in token
        orders = expect(session.get(port.base + "/orders", verify=ca))
        assert orders.json() == {"for": "client:reporting", "scopes": ["orders:read"]}
        # a route this client's token lacks a scope for: RFC 6750's answer, parsed
        assert_insufficient(session.post(port.base + "/orders", verify=ca), "orders:write")


def test_the_guides_client_credentials_example(served: OAuthService) -> None:
    block = example("authorization-client-credentials")
    real = served.proc.url("SCOPED").split("//", 1)[1].split("/", 1)[0]
    text = block.text.replace("127.0.0.1:8443", real)
    assert text.count(real) == 2
    shutil.copy(served.certs["ca"], served.folder / "ca.pem")
    namespace, answer = run_python(block, text, served.folder)
    try:
        assert answer == {"for": "client:reporting", "scopes": ["orders:read"]}
    finally:
        close_all(namespace)


def test_authlib_password_grant_with_scope_and_refresh(served: OAuthService) -> None:
    port = served["SCOPED"]
    ca = str(served.certs["ca"])
    with AuthlibSession(*SHOP_WEB, scope="orders:read orders:write") as session:
        token = session.fetch_token(port.token_url, username=GRACE[0], password=GRACE[1], verify=ca)
        assert token["scope"] == "orders:read orders:write"
        added = session.post(port.base + "/orders", verify=ca)
        assert added.status_code == 200 and added.json() == {"added": True}
        renewed = session.refresh_token(port.token_url, verify=ca)
        assert renewed["scope"] == "orders:read orders:write"
        mine = {"for": "grace", "scopes": ["orders:read", "orders:write"]}
        assert session.get(port.base + "/orders", verify=ca).json() == mine
    # a scope grace has but the client shop-web does not: the library reports invalid_scope
    with AuthlibSession(*SHOP_WEB, scope="refunds") as session:
        with pytest.raises(OAuthError) as refused:
            session.fetch_token(port.token_url, username=GRACE[0], password=GRACE[1], verify=ca)
        assert refused.value.error == "invalid_scope"
    # reporting's token cannot write, whoever asks
    with AuthlibSession(*REPORTING, scope="orders:read") as session:
        session.fetch_token(port.token_url, username=GRACE[0], password=GRACE[1], verify=ca)
        assert_insufficient(session.post(port.base + "/orders", verify=ca), "orders:write")


# -- units: onAuthparams' scopes, the scope parameter, routes ----------------------------------


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"scopes": "orders:read"}, "must be a list"),
        ({"scopes": [""]}, "is not a scope name"),
        ({"scopes": ["orders read"]}, "is not a scope name"),
        ({"scopes": ['a"b']}, "is not a scope name"),
        ({"scopes": ["a\\b"]}, "is not a scope name"),
        ({"scopes": ["x\n"]}, "is not a scope name"),
        ({"scopes": ["é"]}, "is not a scope name"),
        ({"scopes": [1]}, "is not a scope name"),
        ({"scopes": ["a" * 129]}, "is not a scope name"),
        ({"scopes": [f"s{i}" for i in range(65)]}, "more than 64"),
    ],
)
def test_unusable_scopes_in_on_auth_params_are_refused(entry: dict[str, Any], why: str) -> None:
    for data in (
        {"users": [{"username": "ada", "password": "pw", **entry}]},
        {"client": [{"client_id": "web", "client_secret": "s", **entry}]},
        {"username": "ada", "password": "pw", **entry},  # top-level: the single entries'
    ):
        with pytest.raises(ParamsError, match=why):
            normalise(data)


def test_on_auth_params_scopes_by_user_and_client() -> None:
    params = normalise({
        "client_id": "web", "client_secret": "s", "username": "ada", "password": "pw",
        "Scopes": ["orders:read"],  # keys are case-insensitive
        "users": [{"username": "bob", "password": "pw", "SCOPES": ["b", "b", "a"]},
                  {"username": "ada", "password": "other", "scopes": ["ignored"]}],
        "client": [{"client_id": "cli", "client_secret": "s"}],
    })  # fmt: skip
    # the first entry of a name decides; repeats are dropped; an entry without none
    assert params.user_scopes == {"ada": ("orders:read",), "bob": ("b", "a")}
    assert params.client_scopes == {"web": ("orders:read",)}
    assert allowed_scopes(params, "web", "bob") == {"default"}  # nothing both allow
    assert allowed_scopes(params, "cli", "bob") == {"default", "a", "b"}
    assert allowed_scopes(params, "cli", None) == {"default"}
    assert allowed_scopes(params, "web", None) == {"default", "orders:read"}
    with pytest.raises(ParamsError, match="top-level scopes"):
        normalise({"users": [{"username": "ada", "password": "pw"}], "scopes": ["a"]})


def test_a_legacy_on_auth_params_never_sees_a_requested_scopes() -> None:
    request = {"grant_type": "password", "username": "ada", "scopes": "x", "scope": "a b"}
    assert legacy_view(request) == {"grant_type": "password", "username": "ada", "scope": "a b"}


@pytest.mark.parametrize(
    ("param", "asked"),
    [(None, ("default",)), ("a", ("a",)), ("b a b", ("b", "a")), ("  a  ", ("a",)),
     ("   ", ("default",)), ("x" * 1024, ("x" * 1024,))],
)  # fmt: skip
def test_the_scope_parameter(param: str | None, asked: tuple[str, ...]) -> None:
    assert requested(param) == asked


@pytest.mark.parametrize("param", ["x" * 1025, "a\tb", "a\x7f", 'a"', "a\\b", "é", "a\r\nb"])
def test_a_malformed_scope_parameter(param: str) -> None:
    with pytest.raises(AuthOAuthError) as refused:
        requested(param)
    assert refused.value.error == "invalid_scope" and refused.value.status == 400


def test_a_route_decorator_refuses_unusable_scopes() -> None:
    with pytest.raises(RouteError, match="is not a scope name"):
        get("/x", scopes=["a b"])
    with pytest.raises(RouteError, match="must be a list"):
        get("/x", scopes="orders:read")  # type: ignore[arg-type]  # the mistake under test


def test_a_route_carries_its_scopes(port: OAuthPort) -> None:
    assert port.get("/hello", port.tokens(*ADA)["access_token"]).status_code == 200
    ours = {e.function: e.scopes for e in registered() if e.module == MODULE}
    assert ours[f"{MODULE}.add_order"] == ("orders:read", "orders:write")
    assert ours[f"{MODULE}.list_orders"] == ("orders:read",)
    scoped = {f"{MODULE}.add_order", f"{MODULE}.list_orders"}
    assert ours[f"{MODULE}.hello"] == ()  # APP_SOURCE's routes require none
    assert all(not scopes for name, scopes in ours.items() if name not in scoped)


def test_a_route_without_scopes_keeps_its_bare_call(port: OAuthPort) -> None:
    token = port.tokens(*ADA)["access_token"]
    assert port.get("/hello", token).status_code == 200  # the worker runs
    app = port.http._runtime.app  # type: ignore[attr-defined]  # the in-process worker's port
    calls_of = {
        (method, pattern): handler.invoke.__qualname__
        for loc in app.plan.locations
        for method, pattern, handler in loc.router.routes()
    }
    assert calls_of[("GET", "/orders")].startswith("requiring.")
    assert calls_of[("GET", "/reports")].startswith("requiring.")
    assert not calls_of[("GET", "/hello")].startswith("requiring.")
    others = [q for k, q in calls_of.items() if k[1] not in ("/orders", "/reports")]
    assert not any(q.startswith("requiring.") for q in others)


def test_the_metadata_lists_what_onauthparams_allows(svc: LocalService) -> None:
    """RFC 8414 (SPEC 12.2) of a function ``onAuthparams``: its types and scopes, well-known too."""
    scoped = svc["SCOPED"].http.get("/rest/fw/oauth2/metadata").json()
    assert scoped["grant_types_supported"] == ["password", "refresh_token", "client_credentials"]
    every = ["default", "orders:read", "orders:write", "admin", "reports", "introspect"]
    assert scoped["scopes_supported"] == every
    known = svc["SCOPED"].http.get("/.well-known/oauth-authorization-server/rest")
    assert known.status_code == 200 and known.json() == scoped
    no_cc = svc["NO_CC"].http.get("/rest/fw/oauth2/metadata").json()
    assert no_cc["grant_types_supported"] == ["password"]
    single = svc["SINGLE"].http.get("/rest/fw/oauth2/metadata").json()
    assert single["grant_types_supported"] == ["password", "refresh_token"]
    assert single["scopes_supported"] == ["default", "orders:read"]
    # NativeRoutes disabling oauth2/metadata takes the well-known path away with the route
    no_meta = svc["NO_META"]
    assert no_meta.http.get("/rest/fw/oauth2/metadata").status_code == 404
    assert no_meta.http.get("/.well-known/oauth-authorization-server/rest").status_code == 401
