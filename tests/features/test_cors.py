"""CORS (SPEC 10.1) in process: preflights granted and refused (every row), headers on every other
answer to an allowed origin (errors too), on no native route but the token route, the start errors.
In a browser, on ``fwrest serve``: test_cors_browser.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from fwrest import ConfigError
from fwrest.testing import Client
from tests.auth.oauth2_support import TOKEN, oauth_section
from tests.conftest import issue_certs, local_port, module_config
from tests.docs.blocks import ini_example

APP = """
from fwrest import Response, get, post, put, rest

@get("/hello")
def hello():
    return {"message": "hi"}

@post("/items")
async def add():
    return {"added": rest.getBodyRequest()}

@put("/items/:id")
async def change(id):
    return {"id": id}

@get("/boom")
def boom():
    raise RuntimeError("kaboom")

@get("/own-cors")
def own_cors():
    rest.setKeyHeaderResponse("Access-Control-Allow-Origin", "*")
    rest.setKeyHeaderResponse("Access-Control-Allow-Credentials", "false")
    return {"own": True}

@get("/varied")
def varied():
    return Response({"v": 1}, headers={"Vary": "Accept-Language"})

def check(user, password):
    return (user, password) == ("ada", "Ada-Pw-1")

def params():
    return {"client_id": "web", "client_secret": "Web-Secret-9q",
            "users": [{"username": "ada", "password": "Ada-Pw-1"}],
            "types": [{"grant_type": "password"}]}
"""

WEB = "https://app.example.com"
CORS = {"AllowOrigins": f"{WEB}, https://*.example.org", "AllowCredentials": 1,
        "ExposeHeaders": "X-Total-Count, X-Page"}  # fmt: skip


def _service(tmp_path: Path, module: str, cors: dict[str, Any], **extra: Any) -> Path:
    basic = {"scheme": "basic", "OnAuth": f"{module}.check", "maxFailures": 2}
    sections = {
        "HTTP_BASIC": local_port(Locations="ROOT, PLAIN", FwData={"Authorization": basic}),
        "HTTP_OPEN": local_port(),
        **extra.pop("servers", {}),
    }
    locations = {
        "ROOT": {"CORS": "CORS_WEB"}, "PLAIN": {"Path": "/plain", "ThreadPool": "POOL"},
        "CORS_WEB": cors, **extra.pop("sections", {}),
    }  # fmt: skip
    return module_config(tmp_path, module, app=APP, servers=sections, extra=locations)  # fmt: skip


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _service(tmp_path_factory.mktemp("cors"), "cors_app_main", CORS)


@pytest.fixture(scope="module")
def basic(config: Path) -> Iterator[Client]:
    with Client(config, server="HTTP_BASIC") as client:
        yield client


@pytest.fixture(scope="module")
def open_port(config: Path) -> Iterator[Client]:
    with Client(config, server="HTTP_OPEN") as client:
        yield client


def preflight(
    client: Client, path: str, method: str, origin: str = WEB, headers: str | None = None
) -> httpx.Response:
    asked = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers is not None:
        asked["Access-Control-Request-Headers"] = headers
    return client.options(path, headers=asked)


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


def test_a_preflight_is_granted_before_authorization(basic: Client) -> None:
    response = preflight(basic, "/rest/hello", "GET", headers="authorization")
    assert response.status_code == 204, response.text
    assert response.content == b""
    assert cors_headers(response) == {
        "access-control-allow-origin": WEB,
        "access-control-allow-methods": "GET, HEAD",  # the route's methods
        "access-control-allow-headers": "Authorization, Content-Type",
        "access-control-max-age": "600",
        "access-control-allow-credentials": "true",
    }
    assert response.headers["vary"] == "Origin"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "www-authenticate" not in response.headers  # no guard ran


def test_a_preflight_for_a_json_post_with_credentials(basic: Client) -> None:
    response = preflight(basic, "/rest/items", "POST", headers="content-type, Authorization")
    assert response.status_code == 204
    assert response.headers["access-control-allow-methods"] == "POST"


def test_a_pattern_origin_is_echoed(basic: Client) -> None:
    response = preflight(basic, "/rest/items/7", "PUT", origin="https://a.b.example.org")
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "https://a.b.example.org"


@pytest.mark.parametrize(
    ("path", "method", "origin", "asked", "why"),
    [
        ("/rest/hello", "GET", "https://evil.example.net", None, "the origin is not allowed"),
        ("/rest/hello", "GET", "https://example.org", None, "the origin is not allowed"),
        ("/rest/hello", "GET", "http://a.example.org", None, "the origin is not allowed"),
        ("/rest/hello", "GET", "https://a.example.org:8443", None, "the origin is not allowed"),
        ("/rest/hello", "GET", "https://app.example.com.evil.net", None, "not allowed"),
        ("/rest/hello", "GET", "null", None, "the origin is not allowed"),
        ("/rest/hello", "DELETE", WEB, None, "no route takes DELETE here"),
        ("/rest/nowhere", "GET", WEB, None, "no route takes GET here"),
        ("/rest/hello", "GET", WEB, "x-secret", "the header x-secret is not allowed"),
        ("/rest/hello", "GET", WEB, "authorization, cookie", "the header cookie"),
        ("/rest/fw/rest/config", "POST", WEB, None, "this route is not open to other origins"),
        ("/rest/fw/rest/config", "GET", WEB, None, "this route is not open to other origins"),
        ("/rest/fw/rest/usage/time/reset", "POST", WEB, None, "not open to other origins"),
    ],
)
def test_a_preflight_refused_is_403_without_cors_headers(
    basic: Client, path: str, method: str, origin: str, asked: str | None, why: str
) -> None:
    response = preflight(basic, path, method, origin=origin, headers=asked)
    assert response.status_code == 403, response.text
    assert response.json()["code"] == 403
    assert why in response.json()["detailedMessage"]
    assert cors_headers(response) == {}
    # it depends on the Origin as a granted one does: a cache must keep them apart
    assert response.headers["vary"] == "Origin"


def test_allow_methods_narrows_what_a_preflight_grants(tmp_path: Path) -> None:
    config = _service(tmp_path, "cors_app_methods", {"AllowOrigins": WEB, "AllowMethods": "GET"})
    with Client(config, server="HTTP_OPEN") as client:
        granted = preflight(client, "/rest/hello", "GET")
        assert granted.status_code == 204
        assert granted.headers["access-control-allow-methods"] == "GET"
        assert "access-control-allow-credentials" not in granted.headers
        refused = preflight(client, "/rest/items", "POST")
        assert refused.status_code == 403
        assert "POST is not an allowed method" in refused.json()["detailedMessage"]


def test_a_method_allow_methods_lists_is_granted_where_no_route_takes_it(tmp_path: Path) -> None:
    """SPEC 10.1: allowed origin, method and headers give 204, then the request's 404 or 405 with
    CORS headers the front-end can read (a Basic front-end's fetches are all preflighted); never for
    a native route closed to other origins, nor a method AllowMethods leaves out."""
    cors = {"AllowOrigins": WEB, "AllowMethods": "GET, POST, PUT, DELETE"}
    config = _service(tmp_path, "cors_app_listed", cors)
    with Client(config, server="HTTP_OPEN") as client:
        for path, method, status in (("/rest/hello", "DELETE", 405), ("/rest/nowhere", "GET", 404)):
            granted = preflight(client, path, method, headers="authorization")
            assert granted.status_code == 204, (path, granted.text)
            assert granted.headers["access-control-allow-methods"] == "GET, POST, PUT, DELETE"
            answer = client.request(method, path, headers={"Origin": WEB})
            assert answer.status_code == status
            assert answer.headers["access-control-allow-origin"] == WEB
        for path, method in (("/rest/fw/rest/config", "PUT"), ("/rest/hello", "PATCH")):
            assert preflight(client, path, method).status_code == 403, path


def test_a_read_of_the_static_files_is_granted(tmp_path: Path) -> None:
    """SPEC 10.1, 10.3: where no route has the path, a GET or HEAD goes to the location's
    RootPath, so its preflight is granted (a Basic front-end preflights every fetch) on any
    path there, a file or not (docs/decisions.md): the read then gets the file or its 404 with
    the CORS headers. Other methods, a path a route has, a header not allowed: refused."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("<p>front</p>")
    files = {"ROOT": {"CORS": "CORS_WEB", "RootPath": str(www), "DefaultPage": "index.html"}}
    config = _service(tmp_path, "cors_app_files", CORS, sections=files)
    ada = ("ada", "Ada-Pw-1")
    with Client(config, server="HTTP_BASIC") as client:
        for path in ("/rest/index.html", "/rest/", "/rest/docs/missing.txt", "/rest/.hidden"):
            for method in ("GET", "HEAD"):
                granted = preflight(client, path, method, headers="authorization")
                assert granted.status_code == 204, (path, method, granted.text)
                assert cors_headers(granted) == {
                    "access-control-allow-origin": WEB,
                    "access-control-allow-methods": "GET, HEAD",
                    "access-control-allow-headers": "Authorization, Content-Type",
                    "access-control-max-age": "600",
                    "access-control-allow-credentials": "true",
                }
                assert granted.headers["vary"] == "Origin"
        for path, status in (("/rest/index.html", 200), ("/rest/", 200), ("/rest/no.txt", 404)):
            answer = client.get(path, headers={"Origin": WEB}, auth=ada)
            assert answer.status_code == status, path
            _assert_cors(answer)
        assert client.get("/rest/index.html", headers={"Origin": WEB}).status_code == 401
        for path, method, asked, why in (
            ("/rest/index.html", "PUT", None, "no route takes PUT here"),
            ("/rest/index.html", "GET", "x-secret", "the header x-secret is not allowed"),
            ("/rest/items", "GET", None, "no route takes GET here"),  # a route's path: 405
            ("/rest/fw/rest/config", "GET", None, "this route is not open to other origins"),
        ):
            refused = preflight(client, path, method, headers=asked)
            assert refused.status_code == 403, (path, refused.text)
            assert why in refused.json()["detailedMessage"]
            assert cors_headers(refused) == {}
        refused = preflight(client, "/rest/index.html", "GET", origin="https://evil.example.net")
        assert refused.status_code == 403
    # AllowMethods, when given, says which methods a preflight may grant, files too
    only_post = {"AllowOrigins": WEB, "AllowMethods": "POST"}
    (tmp_path / "post").mkdir()
    config = _service(tmp_path / "post", "cors_app_files_post", only_post, sections=files)
    with Client(config, server="HTTP_BASIC") as client:
        refused = preflight(client, "/rest/index.html", "GET")
        assert refused.status_code == 403
        assert "GET is not an allowed method" in refused.json()["detailedMessage"]


def test_a_plain_options_is_what_it_was(basic: Client, open_port: Client) -> None:
    # no Access-Control-Request-Method: no preflight, the route's methods (RFC 9110 9.3.7)
    assert basic.options("/rest/hello", headers={"Origin": WEB}).status_code == 401
    answer = open_port.options("/rest/hello", headers={"Origin": WEB})
    assert answer.status_code == 200
    assert answer.headers["allow"] == "GET, HEAD, OPTIONS"


def test_a_preflight_outside_a_cors_location_is_a_plain_options(basic: Client) -> None:
    response = preflight(basic, "/plain/hello", "GET")
    assert response.status_code == 401
    assert cors_headers(response) == {}


def _assert_cors(response: httpx.Response, origin: str = WEB) -> None:
    assert cors_headers(response) == {
        "access-control-allow-origin": origin, "access-control-allow-credentials": "true",
        "access-control-expose-headers": "X-Total-Count, X-Page",
    }  # fmt: skip
    assert "Origin" in response.headers["vary"]


@pytest.mark.parametrize(
    ("method", "path", "auth", "status"),
    [("GET", "/rest/hello", True, 200), ("GET", "/rest/hello", False, 401),
     ("GET", "/rest/nowhere", True, 404), ("GET", "/rest/boom", True, 500),
     ("DELETE", "/rest/hello", True, 405),
     ("GET", "/rest/own-cors", True, 200)],  # a handler's own: replaced, never beside
)  # fmt: skip
def test_every_answer_to_an_allowed_origin_carries_the_headers(
    basic: Client, method: str, path: str, auth: bool, status: int
) -> None:
    ada = ("ada", "Ada-Pw-1") if auth else None
    answer = basic.request(method, path, headers={"Origin": WEB}, auth=ada)
    assert answer.status_code == status
    _assert_cors(answer)


def test_a_refusal_before_the_pipeline_carries_them_in_process_too(open_port: Client) -> None:
    # the in-process client refuses as the engine does (415 of a coded body): the same headers
    coded = {"Origin": WEB, "Content-Encoding": "gzip"}
    answer = open_port.post("/rest/items", headers=coded, content=b"zz")
    assert answer.status_code == 415
    _assert_cors(answer)
    head = open_port.request("HEAD", "/rest/items", headers=coded, content=b"zz")
    assert head.status_code == 415
    assert head.content == b""
    assert head.headers["content-length"] == answer.headers["content-length"]
    _assert_cors(head)


def test_forbidden_and_locked_out_answers_carry_them_too(tmp_path: Path) -> None:
    config = _service(tmp_path, "cors_app_lockout", CORS)
    with Client(config, server="HTTP_BASIC", client_address="192.0.2.9") as client:
        codes = []
        for _ in range(3):
            answer = client.get("/rest/hello", headers={"Origin": WEB}, auth=("ada", "wrong"))
            codes.append(answer.status_code)
            _assert_cors(answer)
        assert codes == [403, 403, 429]


@pytest.mark.parametrize(
    "origin", [f"{WEB}:443", "HTTPS://App.Example.com:443", "https://a.example.org:443"]
)
def test_an_origin_with_its_default_port_is_allowed_and_echoed_as_sent(
    basic: Client, origin: str
) -> None:
    # compared without the default port (docs/decisions.md); the Origin echoed as sent
    answer = basic.get("/rest/hello", headers={"Origin": origin}, auth=("ada", "Ada-Pw-1"))
    assert answer.status_code == 200
    _assert_cors(answer, origin)
    granted = preflight(basic, "/rest/hello", "GET", origin=origin)
    assert granted.status_code == 204, granted.text
    assert granted.headers["access-control-allow-origin"] == origin
    # another port, or the default port of another scheme, is another origin
    for other in (f"{WEB}:8443", f"{WEB}:80", "http://app.example.com:443", f"{WEB}:0443"):
        answer = basic.get("/rest/hello", headers={"Origin": other}, auth=("ada", "Ada-Pw-1"))
        assert answer.status_code == 200
        assert cors_headers(answer) == {}, other
        assert preflight(basic, "/rest/hello", "GET", origin=other).status_code == 403


def test_the_vary_of_the_application_is_kept(open_port: Client) -> None:
    response = open_port.get("/rest/varied", headers={"Origin": WEB})
    assert response.headers["vary"] == "Accept-Language, Origin"


def test_no_headers_for_another_origin_or_none(basic: Client) -> None:
    ada = ("ada", "Ada-Pw-1")
    other = basic.get("/rest/hello", headers={"Origin": "https://evil.example.net"}, auth=ada)
    assert other.status_code == 200
    assert cors_headers(other) == {}
    none = basic.get("/rest/hello", auth=ada)
    assert cors_headers(none) == {}
    # the answer depends on Origin all the same: a shared cache must keep them apart
    assert other.headers["vary"] == "Origin"
    assert none.headers["vary"] == "Origin"
    refused = basic.get("/rest/hello", headers={"Origin": "https://evil.example.net"})
    assert refused.status_code == 401
    assert refused.headers["vary"] == "Origin"


def test_vary_joins_the_answers_own(basic: Client) -> None:
    # the application's own Vary keeps its names; Origin joins them
    ada = ("ada", "Ada-Pw-1")
    answer = basic.get("/rest/varied", auth=ada)
    assert answer.status_code == 200
    assert answer.headers["vary"] == "Accept-Language, Origin"


def test_native_routes_other_than_the_token_route_never_send_them(basic: Client) -> None:
    ada = ("ada", "Ada-Pw-1")
    for path in ("/rest/fw/rest/config", "/rest/fw/rest/list/service"):
        answer = basic.get(path, headers={"Origin": WEB}, auth=ada)
        assert answer.status_code == 200, path
        assert cors_headers(answer) == {}, path
        refused = basic.get(path, headers={"Origin": WEB})
        assert refused.status_code == 401
        assert cors_headers(refused) == {}, path


def test_the_token_route_is_open_to_an_allowed_origin(tmp_path: Path, ca: trustme.CA) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    section = oauth_section(certs, onAuthparams="cors_app_token.params")
    config = _service(tmp_path, "cors_app_token", CORS, servers={"HTTPS_OAUTH": section})
    with Client(config, server="HTTPS_OAUTH") as client:
        asked = preflight(client, f"/rest{TOKEN}", "POST", headers="content-type")
        assert asked.status_code == 204, asked.text
        assert asked.headers["access-control-allow-origin"] == WEB
        assert "POST" in asked.headers["access-control-allow-methods"]
        web = {"client_id": "web", "client_secret": "Web-Secret-9q"}
        ada = {"grant_type": "password", "username": "ada", "password": "Ada-Pw-1"}
        grant = client.post(f"/rest{TOKEN}", headers={"Origin": WEB}, data={**ada, **web})
        assert grant.status_code == 200, grant.text
        _assert_cors(grant)
        token = grant.json()["access_token"]
        bearer = {"Origin": WEB, "Authorization": f"Bearer {token}"}
        hello = client.get("/rest/hello", headers=bearer)
        assert hello.status_code == 200
        _assert_cors(hello)
        # revocation too (browsers revoke at logout, RFC 7009 5); introspection not
        revoke = f"/rest{TOKEN.replace('/token', '/revoke')}"
        assert preflight(client, revoke, "POST", headers="content-type").status_code == 204
        origin = {"Origin": WEB}
        revoked = client.post(revoke, headers=origin, data={"token": token, "client_id": "web"})
        assert revoked.status_code == 401, revoked.text  # no secret: a wrong client
        revoked = client.post(revoke, headers=origin, data={"token": token, **web})
        assert revoked.status_code == 200, revoked.text
        _assert_cors(revoked)
        introspect_path = f"/rest{TOKEN.replace('/token', '/introspect')}"
        introspect = client.post(introspect_path, headers=origin, data={"token": token, **web})
        assert introspect.json() == {"active": False}  # revoked
        assert cors_headers(introspect) == {}
        # the RFC 8414 path too, where an SPA discovers endpoints (SPEC 16.1; it lacked them)
        well_known = "/.well-known/oauth-authorization-server/rest"
        asked = preflight(client, well_known, "GET")
        assert asked.status_code == 204, asked.text
        assert asked.headers["access-control-allow-methods"] == "GET, HEAD"
        refused = preflight(client, well_known, "POST")
        assert (refused.status_code, refused.headers["vary"]) == (403, "Origin")
        assert (
            preflight(client, well_known, "GET", origin="https://evil.example.net").status_code
            == 403
        )
        document = client.get(well_known, headers=origin)
        assert document.json()["token_endpoint"].endswith(f"/rest{TOKEN}")
        _assert_cors(document)
        assert "access-control-allow-origin" not in client.get(well_known).headers


@pytest.mark.parametrize(
    ("cors", "message"),
    [
        ({"AllowOrigins": "*", "AllowCredentials": 1},
         "[CORS_WEB] AllowOrigins: AllowOrigins=* cannot be used with AllowCredentials=1"),
        ({"AllowOrigins": "https://app.example.com/"},
         "[CORS_WEB] AllowOrigins: 'https://app.example.com/' is not an origin"),
        ({"AllowOrigins": "app.example.com"}, "'app.example.com' is not an origin"),
        ({"AllowOrigins": "ftp://app.example.com"}, "'ftp://app.example.com' is not an origin"),
        ({"AllowOrigins": "https://*"},
         "[CORS_WEB] AllowOrigins: 'https://*' allows every site (a wildcard over the whole"),
        ({"AllowOrigins": "http://*:8080"}, "'http://*:8080' allows every site"),
        # a wildcard right over a top-level domain: the whole web there, credentials or not
        ({"AllowOrigins": f"{WEB}, https://*.com", "AllowCredentials": 1},
         "[CORS_WEB] AllowOrigins: 'https://*.com' allows every site under the top-level "
         "domain 'com'"),
        ({"AllowOrigins": "https://*.co"}, "'https://*.co' allows every site under"),
        ({"AllowOrigins": "https://*.COM.:8443"}, "under the top-level domain 'com'"),
        ({"AllowOrigins": "https://a.*.com"}, "'https://a.*.com' is not an origin"),
        ({"AllowOrigins": "https://u@app.example.com"}, "is not an origin"),
        ({"AllowOrigins": WEB, "Origins": WEB}, "[CORS_WEB] Origins: unknown key"),
        ({"AllowCredentials": 1}, "[CORS_WEB]: the required key AllowOrigins is missing"),
        ({"AllowOrigins": WEB, "MaxAge": 86401}, "[CORS_WEB] MaxAge"),
        ({"AllowOrigins": WEB, "AllowCredentials": 2}, "[CORS_WEB] AllowCredentials"),
        ({"AllowOrigins": ""}, "[CORS_WEB] AllowOrigins: the required key AllowOrigins is empty"),
        ({"AllowOrigins": " , "}, "[CORS_WEB] AllowOrigins: the required key AllowOrigins is empty"),
        ({"AllowOrigins": WEB, "AllowHeaders": "X Bad"},
         "[CORS_WEB] AllowHeaders: 'X Bad' is not a header name"),
        ({"AllowOrigins": WEB, "AllowHeaders": "Content-Type, X-Ok:"},
         "[CORS_WEB] AllowHeaders: 'X-Ok:' is not a header name"),
        ({"AllowOrigins": WEB, "ExposeHeaders": "X:Bad"},
         "[CORS_WEB] ExposeHeaders: 'X:Bad' is not a header name"),
        ({"AllowOrigins": WEB, "ExposeHeaders": "X-Total-Count, Bad\u00e9"}, "'Bad\u00e9' is not"),
        ({"AllowOrigins": WEB, "AllowMethods": "GET, FOO BAR"},
         "[CORS_WEB] AllowMethods: 'FOO BAR' is not a method"),
        ({"AllowOrigins": WEB, "AllowMethods": "GET; POST"}, "'GET; POST' is not a method"),
    ],
)  # fmt: skip
def test_a_bad_cors_section_stops_the_start(
    tmp_path: Path, cors: dict[str, Any], message: str
) -> None:
    config = _service(tmp_path, "cors_app_bad", cors)
    with pytest.raises(ConfigError) as caught:
        Client(config)
    assert message in str(caught.value)


def test_a_wildcard_under_a_domain_or_localhost_is_kept(tmp_path: Path) -> None:
    """The forms SPEC 10.1 allows still start and match: ``*.domain`` of two labels or more,
    with a port, ``*.localhost`` (the user's own machine)."""
    origins = "https://*.example.com, https://*.eu.example.com:8443, http://*.localhost:3000"
    config = _service(
        tmp_path, "cors_app_wide_ok", {"AllowOrigins": origins, "AllowCredentials": 1}
    )
    with Client(config, server="HTTP_OPEN") as client:
        for origin in ("https://a.example.com", "https://x.eu.example.com:8443",
                       "http://app.localhost:3000"):  # fmt: skip
            assert preflight(client, "/rest/hello", "GET", origin=origin).status_code == 204
        assert preflight(client, "/rest/hello", "GET", origin="https://evil.com").status_code == 403


def test_a_cors_key_naming_no_section_stops_the_start(tmp_path: Path) -> None:
    config = _service(tmp_path, "cors_app_missing", CORS, sections={"ROOT": {"CORS": "NOPE"}})
    with pytest.raises(ConfigError, match=r"\[ROOT\] CORS: names \[NOPE\]"):
        Client(config)


def test_the_guides_cors_example(tmp_path: Path) -> None:
    """docs/locations.md's CORS section, on a location of a real configuration."""
    sections = ini_example("locations-cors", inline_comments=True)
    location = sections.pop("HTTP_ROOT")
    location["ThreadPool"] = "POOL"
    servers = {"HTTP_REST": local_port(Locations="HTTP_ROOT")}
    extra = {"HTTP_ROOT": location, **sections}
    config = module_config(tmp_path, "cors_app_guide", app=APP, servers=servers, extra=extra)
    with Client(config) as client:
        for origin in (WEB, "https://eu.example.com"):
            granted = preflight(client, "/rest/hello", "GET", origin=origin)
            assert granted.status_code == 204
            assert granted.headers["access-control-allow-credentials"] == "true"
        answer = client.get("/rest/hello", headers={"Origin": WEB})
        assert answer.headers["access-control-expose-headers"] == "X-Total-Count"
        other = preflight(client, "/rest/hello", "GET", origin="https://example.com")
        assert other.status_code == 403
