"""``/fw/rest/docs`` (SPEC 14.2): Swagger UI from shipped files over the port's ``openapi.json``, a
native route like the others (scheme, listing, ``disable``, ``public``); in a browser:
test_docs_browser.py."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from importlib import resources

import pytest
import trustme

from fwrest.native.docs import DOCS_FILES, SWAGGER_UI_VERSION
from fwrest.testing import Client
from tests.conftest import ROOT, local_port
from tests.docs.blocks import example
from tests.native.support import auth_service, basic, in_process_ports, oauth2_port

ADA = basic("ada", "Ada-Pw-1")
PAGE = "/fw/rest/docs"
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PORTS = ("HTTP_PLAIN", "HTTP_BASIC", "HTTP_OFF", "HTTP_NO_DOCUMENT", "HTTPS_OAUTH")


@pytest.fixture(scope="module")
def clients(
    tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA
) -> Iterator[dict[str, Client]]:
    tmp = tmp_path_factory.mktemp("docs_page")
    server = local_port()
    config = auth_service(
        tmp,
        "docs",
        servers={
            "HTTP_PLAIN": server,
            "HTTP_BASIC": {
                **server,
                "FwData": {"Authorization": {"scheme": "basic", "OnAuth": "docs_auth.check"}},
            },
            "HTTP_OFF": {**server, "FwData": {"NativeRoutes": {"disable": ["rest/docs"]}}},
            "HTTP_NO_DOCUMENT": {
                **server,
                "FwData": {"NativeRoutes": {"disable": ["/fw/rest/openapi.json"]}},
            },
            # a browser has no bearer token to load the page and the document with
            "HTTPS_OAUTH": oauth2_port(
                tmp, ca, "docs_auth.params", **json.loads(example("operations-docs-public").text)
            ),
        },
    )
    with in_process_ports(config, PORTS) as clients:
        yield clients


def linked(page: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', page)


def test_the_page_links_only_files_of_its_own_route_and_the_document(
    clients: dict[str, Client],
) -> None:
    r = clients["HTTP_PLAIN"].get(PAGE)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.headers["content-security-policy"] == POLICY
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["cache-control"] == "no-cache"
    urls = linked(r.text)
    assert "/rest/fw/rest/openapi.json" in urls
    assert 'data-spec="/rest/fw/rest/openapi.json"' in r.text
    assets = [u for u in urls if u != "/rest/fw/rest/openapi.json"]
    assert {u.split("?")[0].rsplit("/", 1)[1] for u in assets} == {
        "favicon-32x32.png",
        "swagger-ui.css",
        "LICENSE",
        "swagger-ui-bundle.js",
        "fwrest-docs.js",
    }
    assert all(u.startswith("/rest/fw/rest/docs/") for u in assets), assets
    assert "http:" not in r.text and "https:" not in r.text and "//" not in r.text
    assert f"Swagger UI {SWAGGER_UI_VERSION}" in r.text


@pytest.mark.parametrize(
    ("name", "media_type", "starts"),
    [
        ("swagger-ui-bundle.js", "text/javascript; charset=utf-8", b""),
        ("fwrest-docs.js", "text/javascript; charset=utf-8", b"// fwrest's docs page"),
        ("swagger-ui.css", "text/css; charset=utf-8", b".swagger-ui"),
        ("favicon-32x32.png", "image/png", b"\x89PNG"),
        ("LICENSE", "text/plain; charset=utf-8", b""),
    ],
)
def test_each_file_has_its_type_a_tag_and_a_long_cache(
    clients: dict[str, Client], name: str, media_type: str, starts: bytes
) -> None:
    client = clients["HTTP_PLAIN"]
    r = client.get(f"{PAGE}/{name}")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == media_type
    assert r.content.startswith(starts)
    assert len(r.content) > 100
    assert r.headers["cache-control"] == "private, max-age=31536000, immutable"
    etag = r.headers["etag"]
    assert re.fullmatch(r'"[0-9a-f]{16}"', etag)
    # the page links the file with its tag: a new version is a new URL
    assert f"{PAGE}/{name}?v={etag.strip(chr(34))}" in client.get(PAGE).text
    again = client.get(f"{PAGE}/{name}", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag


def test_the_bundle_is_swagger_ui_with_its_licence(clients: dict[str, Client]) -> None:
    client = clients["HTTP_PLAIN"]
    bundle = client.get(f"{PAGE}/swagger-ui-bundle.js").content
    assert len(bundle) > 1_000_000
    assert b"SwaggerUIBundle" in bundle
    assert b"Apache License" in client.get(f"{PAGE}/LICENSE").content
    # the other licence files ship in the package, without a route
    folder = resources.files("fwrest.native") / "swagger_ui"
    assert b"SmartBear" in (folder / "NOTICE").read_bytes()
    assert b"MIT" in (folder / "swagger-ui-bundle.js.LICENSE.txt").read_bytes()


@pytest.mark.parametrize(
    "name", ["nothing.js", "NOTICE", "docs.py", "__init__.py", "SOURCE.md", "favicon-16x16.png"]
)
def test_no_other_file_is_served(clients: dict[str, Client], name: str) -> None:
    r = clients["HTTP_PLAIN"].get(f"{PAGE}/{name}")
    assert r.status_code == 404, r.text


def test_head_answers_the_page_without_a_body(clients: dict[str, Client]) -> None:
    r = clients["HTTP_PLAIN"].head(f"{PAGE}/swagger-ui.css")
    assert r.status_code == 200
    assert r.content == b""
    assert r.headers["content-type"] == "text/css; charset=utf-8"


def test_the_page_and_its_files_are_behind_the_ports_scheme(clients: dict[str, Client]) -> None:
    client = clients["HTTP_BASIC"]
    for path in (PAGE, f"{PAGE}/swagger-ui-bundle.js"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers=basic("ada", "wrong")).status_code == 403
        assert client.get(path, headers=ADA).status_code == 200


def test_a_location_under_another_path_links_its_own_files(clients: dict[str, Client]) -> None:
    r = clients["HTTP_PLAIN"].get(PAGE.replace("/fw/", "/fw/./"))  # the path as normalised
    assert r.status_code == 200
    assert 'data-spec="/rest/fw/rest/openapi.json"' in r.text
    # a trailing slash is the same page, with the same absolute links
    assert clients["HTTP_PLAIN"].get(PAGE + "/").text == r.text


def test_disable_takes_the_page_and_its_files_away(clients: dict[str, Client]) -> None:
    client = clients["HTTP_OFF"]
    assert client.get(PAGE).status_code == 404
    assert client.get(f"{PAGE}/swagger-ui-bundle.js").status_code == 404
    listed = {e["endpoint"] for e in client.get("/fw/rest/list/service").json()}
    assert "/fw/rest/list/service" in listed
    assert not any(e.startswith(PAGE) for e in listed)
    assert not any(
        p.startswith("/rest" + PAGE) for p in client.get("/fw/rest/openapi.json").json()["paths"]
    )


def test_disabling_the_document_takes_the_page_away_too(clients: dict[str, Client]) -> None:
    """The page only shows the document: without it, it answers as a disabled route does."""
    client = clients["HTTP_NO_DOCUMENT"]
    assert client.get("/fw/rest/openapi.json").status_code == 404
    assert client.get(PAGE).status_code == 404
    assert client.get(f"{PAGE}/fwrest-docs.js").status_code == 404
    listed = {e["endpoint"] for e in client.get("/fw/rest/list/service").json()}
    assert "/fw/rest/list/service" in listed
    assert not any(e.startswith(PAGE) or e == "/fw/rest/openapi.json" for e in listed)


def test_the_listing_and_the_document_show_the_page(clients: dict[str, Client]) -> None:
    entries = {e["endpoint"]: e for e in clients["HTTP_PLAIN"].get("/fw/rest/list/service").json()}
    page = entries[PAGE]
    assert (page["type"], page["source"]) == ("fw", "native")
    assert page["methods"][0]["function"] == "fwrest.native.docs.docs_page"
    files = sorted(e for e in entries if e.startswith(PAGE + "/"))
    assert files == sorted(f"{PAGE}/{name}" for name in DOCS_FILES)
    assert all(
        entries[e]["methods"][0]["function"] == "fwrest.native.docs.docs_asset" for e in files
    )
    paths = clients["HTTP_PLAIN"].get("/fw/rest/openapi.json").json()["paths"]
    assert "get" in paths["/rest/fw/rest/docs"]
    assert "get" in paths["/rest/fw/rest/docs/swagger-ui-bundle.js"]


def test_an_oauth2_port_can_open_the_page_and_authorize_as_swagger_ui_does(
    clients: dict[str, Client],
) -> None:
    """Public, page and document load without a token, declare the password flow, and the token
    route takes Swagger UI's "Authorize" post (client credentials in header or body)."""
    client = clients["HTTPS_OAUTH"]
    for path in (PAGE, *(f"{PAGE}/{name}" for name in DOCS_FILES)):
        assert client.get(path).status_code == 200, path  # no token
    doc = client.get("/fw/rest/openapi.json").json()
    flow = doc["components"]["securitySchemes"]["oauth2"]["flows"]["password"]
    assert flow["tokenUrl"] == "/rest/fw/oauth2/token"
    assert "default" in flow["scopes"]
    form = dict(grant_type="password", scope="default", username="ada", password="Ada-Pw-7731")
    header = base64.b64encode(b"web:Web-Secret-9q").decode()
    url = flow["tokenUrl"].removeprefix("/rest")  # under the client's base URL
    answers = [
        client.post(url, data=form, headers={"Authorization": f"Basic {header}"}),
        client.post(url, data={**form, "client_id": "web", "client_secret": "Web-Secret-9q"}),
    ]
    # no client: in the body, fine; Swagger UI's default (an empty client in the header) not
    # (docs/operations.md says pick the body)
    answers.append(client.post(url, data=form))
    empty = client.post(url, data=form, headers={"Authorization": "Basic Og=="})
    assert empty.status_code == 401
    assert empty.json()["error"] == "invalid_client"
    for answer in answers:
        assert answer.status_code == 200, answer.text
        token = answer.json()["access_token"]
        listed = client.get("/fw/rest/list/service", headers={"Authorization": f"Bearer {token}"})
        assert listed.status_code == 200
    # the rest of the port stays behind its scheme
    assert client.get("/fw/rest/list/service").status_code == 401


def test_the_wheel_ships_every_file_the_page_serves() -> None:
    """``pyproject.toml``'s package data covers them (else the page is a 500)."""
    import fnmatch
    import tomllib

    from fwrest.native import docs

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["fwrest"]
    folder = ROOT / "src" / "fwrest" / "native" / "swagger_ui"
    for name in docs._TYPES:
        assert (folder / name).is_file(), name
        where = f"native/swagger_ui/{name}"
        assert any(fnmatch.fnmatch(where, p) for p in patterns), (where, patterns)
