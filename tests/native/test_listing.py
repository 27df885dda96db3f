"""``list/service``, ``openapi.json`` and ``fwrest routes/openapi`` (SPEC 5), in process (modules
``listing_app``, ``listing_auth``). ``HTTP_REST``: open, ``/rest`` and ``/other``, a ``LoadURNs``
route, ``healthcheck/datetime`` hidden, ``vendor/environment`` disabled; ``HTTP_PLAIN``: no
``NativeRoutes``; ``HTTP_BASIC``; ``HTTPS_OAUTH``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from openapi_spec_validator import validate

from fwrest.testing import Client
from tests.builders import own_ports
from tests.conftest import APP_SOURCE, local_port, run_cli
from tests.native.support import (
    NATIVE,
    NATIVE_PATHS,
    auth_service,
    basic,
    in_process_ports,
    oauth2_port,
)

APP = (
    APP_SOURCE
    + '''

def mapped(x):
    """Reached through LoadURNs only."""
    return {"mapped": x}
'''
)


ADA = basic("ada", "Ada-Pw-1")
HIDDEN, DISABLED = "/fw/healthcheck/datetime", "/vendor/environment"
ENTRY_KEYS = ["doc", "endpoint", "methods", "paths", "public", "source", "type"]
NAMES = ("HTTP_REST", "HTTP_PLAIN", "HTTP_BASIC", "HTTPS_OAUTH", "HTTPS_HIDING")
AUTH = "listing_auth.check"


@dataclass
class Service:
    """The configuration and a client per port (``/rest``), each numbered as if bound."""

    config: Path
    clients: dict[str, Client]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("listing")
    mapped = {"GET": {"Function": "listing_app.mapped", "Description": "mapped"}}
    native = {"hide": ["healthcheck/datetime"], "disable": ["vendor/environment"]}
    servers = {
        "HTTP_REST": local_port(
            Locations="ROOT, OTHER",
            LoadURNs={"/mapped/:x": mapped},
            FwData={"NativeRoutes": native},
        ),
        "HTTP_PLAIN": local_port(),
        "HTTP_BASIC": local_port(FwData={"Authorization": {"scheme": "basic", "OnAuth": AUTH}}),
        "HTTPS_OAUTH": oauth2_port(tmp, ca, "listing_auth.params"),
        # the discovery documents at the root: one hidden, one disabled, by their route names
        "HTTPS_HIDING": oauth2_port(
            tmp,
            ca,
            "listing_auth.params",
            NativeRoutes={"hide": ["oauth2/metadata"], "disable": ["oauth2/resource"]},
        ),
    }
    other = {"OTHER": {"Path": "/other", "ThreadPool": "POOL"}}
    config = auth_service(tmp, "listing", servers=own_ports(servers), extra=other, app=APP)
    with in_process_ports(config, NAMES) as clients:
        yield Service(config, clients)


@pytest.fixture(scope="module")
def clients(service: Service) -> dict[str, Client]:
    """Server section -> its in-process client."""
    return service.clients


def listing(clients: dict[str, Client], name: str = "HTTP_REST", **kw: Any) -> list[dict[str, Any]]:
    r = clients[name].get("/fw/rest/list/service", **kw)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    body: list[dict[str, Any]] = r.json()
    assert isinstance(body, list)
    return body


def by_endpoint(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["endpoint"]: e for e in entries}


def bearer_of(client: Client) -> dict[str, str]:
    """An ``Authorization`` header with a token of ada's from the oAuth2 port ``client``."""
    r = client.post(
        "/fw/oauth2/token",
        data={"grant_type": "password", "username": "ada", "password": "Ada-Pw-7731"},
    )
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


@pytest.fixture(scope="module")
def bearer(clients: dict[str, Client]) -> dict[str, str]:
    return bearer_of(clients["HTTPS_OAUTH"])


# -- list/service --------------------------------------------------------------------------------


def test_list_service_is_sorted_one_entry_per_path_in_the_documented_shape(
    clients: dict[str, Client],
) -> None:
    entries = listing(clients)
    endpoints = [e["endpoint"] for e in entries]
    print(endpoints)
    assert endpoints == sorted(endpoints)
    assert len(endpoints) == len(set(endpoints))
    for entry in entries:
        assert sorted(entry) == ENTRY_KEYS, entry
        assert entry["type"] in ("fw", "default")
        assert entry["doc"] in ("true", "false")
        assert entry["source"] in ("annotation", "mapping", "native")
        assert isinstance(entry["public"], bool)
        # endpoint is relative to the location; paths are full, one per location
        assert not entry["endpoint"].startswith(("/rest/", "/other/")), entry
        assert entry["paths"] == sorted(
            ["/other" + entry["endpoint"], "/rest" + entry["endpoint"]]
        ), entry
        methods = [m["method"] for m in entry["methods"]]
        assert methods == sorted(methods), entry
        for method in entry["methods"]:
            assert sorted(method) == ["description", "function", "method"], method
        assert entry["doc"] == (
            "true" if any(m["description"] for m in entry["methods"]) else "false"
        )


def test_list_service_entries_of_annotations_mappings_and_native_routes(
    clients: dict[str, Client],
) -> None:
    entries = by_endpoint(listing(clients))
    assert entries["/hello"] == {
        "endpoint": "/hello",
        "type": "default",
        "doc": "true",
        "source": "annotation",
        "paths": ["/other/hello", "/rest/hello"],
        "public": True,  # an open port
        "methods": [
            {"method": "GET", "description": "says hello", "function": "listing_app.hello"}
        ],
    }
    items = entries["/items/:id"]
    assert (items["doc"], items["source"], items["type"]) == ("false", "annotation", "default")
    assert items["methods"][0]["function"] == "listing_app.item"
    assert not items["methods"][0]["description"]
    assert entries["/echo"]["methods"][0]["method"] == "POST"
    mapped = entries["/mapped/:x"]
    assert mapped["source"] == "mapping"
    assert mapped["type"] == "default"
    assert mapped["doc"] == "true"
    assert mapped["methods"] == [
        {"method": "GET", "description": "mapped", "function": "listing_app.mapped"}
    ]
    config = entries["/fw/rest/config"]
    assert (config["type"], config["source"]) == ("fw", "native")
    assert [m["method"] for m in config["methods"]] == ["GET", "POST"]
    assert all(m["function"].startswith("fwrest.") for m in config["methods"])
    assert config["doc"] == "true"
    # the mapped route answers where the listing says
    assert clients["HTTP_REST"].get("/mapped/7").json() == {"mapped": "7"}
    other = f"http://127.0.0.1:{clients['HTTP_REST'].base_url.port}/other/mapped/8"
    assert clients["HTTP_REST"].get(other).json() == {"mapped": "8"}


def test_every_native_route_lists_itself(clients: dict[str, Client]) -> None:
    plain = by_endpoint(listing(clients, "HTTP_PLAIN"))
    for _name, method, path in NATIVE:
        assert path in plain, path
        assert method in [m["method"] for m in plain[path]["methods"]], (method, path)
        assert (plain[path]["type"], plain[path]["source"]) == ("fw", "native")
    assert "/fw/oauth2/token" not in plain  # only on oAuth2 ports


def test_hide_leaves_a_route_out_of_the_list_but_it_still_answers(
    clients: dict[str, Client],
) -> None:
    assert HIDDEN not in by_endpoint(listing(clients))
    assert HIDDEN in by_endpoint(listing(clients, "HTTP_PLAIN"))  # only where it is hidden
    r = clients["HTTP_REST"].get(HIDDEN)
    assert r.status_code == 200, r.text


def test_disable_gives_404_and_leaves_the_route_out(clients: dict[str, Client]) -> None:
    assert DISABLED not in by_endpoint(listing(clients))
    r = clients["HTTP_REST"].get(DISABLED)
    assert r.status_code == 404
    assert r.json() == {"code": 404, "detailedMessage": "", "message": "Not Found"}
    assert clients["HTTP_PLAIN"].get(DISABLED).status_code == 200
    assert DISABLED in by_endpoint(listing(clients, "HTTP_PLAIN"))


def test_public_flag_follows_the_port_scheme(
    clients: dict[str, Client], bearer: dict[str, str]
) -> None:
    basic_entries = by_endpoint(listing(clients, "HTTP_BASIC", headers=ADA))
    assert basic_entries["/hello"]["public"] is False
    assert basic_entries["/fw/healthcheck"]["public"] is False
    oauth = by_endpoint(listing(clients, "HTTPS_OAUTH", headers=bearer))
    token = oauth["/fw/oauth2/token"]
    assert token["public"] is True  # the token route is never protected
    assert [m["method"] for m in token["methods"]] == ["GET", "POST"]
    assert (token["type"], token["source"]) == ("fw", "native")
    assert oauth["/hello"]["public"] is False


def root(client: Client, path: str) -> str:
    """``path`` at the root of the client's port (its base URL is its location's)."""
    url = client.base_url
    return f"{url.scheme}://{url.host}:{url.port}{path}"


METADATA = "/.well-known/oauth-authorization-server/rest"  # RFC 8414, at the port's root
RESOURCE = "/.well-known/oauth-protected-resource/rest"  # RFC 9728


def test_the_well_known_documents_list_themselves_as_native_routes(
    clients: dict[str, Client], bearer: dict[str, str]
) -> None:
    """SPEC 5: every native route lists itself; the RFC 8414 and RFC 9728 documents an
    oAuth2 port answers at its root too, under the names of their /fw/oauth2/ twins."""
    oauth = by_endpoint(listing(clients, "HTTPS_OAUTH", headers=bearer))
    twins = {METADATA: "/fw/oauth2/metadata", RESOURCE: "/fw/oauth2/resource"}
    for path, twin in twins.items():
        entry = oauth[path]
        assert (entry["type"], entry["source"], entry["public"]) == ("fw", "native", True)
        assert entry["paths"] == [path] and entry["doc"] == "true"
        ((method,),) = [[m["method"] for m in entry["methods"]]]
        assert method == "GET"
        # the function of the twin, which serves the same document
        assert entry["methods"][0]["function"] == oauth[twin]["methods"][0]["function"]
        # at the port's root, without a token: never behind the scheme
        answer = clients["HTTPS_OAUTH"].get(root(clients["HTTPS_OAUTH"], path))
        assert answer.status_code == 200, (path, answer.text)
        assert answer.json() == clients["HTTPS_OAUTH"].get(twin).json()
    # none on a port without oAuth2
    assert not [e for e in listing(clients, "HTTP_PLAIN") if ".well-known" in e["endpoint"]]
    # hide (oauth2/metadata): left out, still answers; disable (oauth2/resource): both gone
    hiding_port = clients["HTTPS_HIDING"]
    hiding = by_endpoint(listing(clients, "HTTPS_HIDING", headers=bearer_of(hiding_port)))
    assert METADATA not in hiding and "/fw/oauth2/metadata" not in hiding
    assert hiding_port.get(root(hiding_port, METADATA)).status_code == 200
    assert RESOURCE not in hiding and "/fw/oauth2/resource" not in hiding
    assert hiding_port.get(root(hiding_port, RESOURCE)).status_code == 401  # a path as any other
    # the OpenAPI document lists them, open
    doc = clients["HTTPS_OAUTH"].get("/fw/rest/openapi.json", headers=bearer).json()
    assert doc["paths"][METADATA]["get"]["security"] == []
    assert RESOURCE in doc["paths"]


def test_fwrest_routes_lists_every_native_route(service: Service) -> None:
    config = service.config
    done = run_cli("routes", str(config))
    assert done.returncode == 0, done.stderr
    rows = set()
    for line in done.stdout.splitlines()[1:]:
        method, url, _function, source = line.split()
        rows.add((method, url.split("/", 3)[3], source))
    for _name, method, path in NATIVE:
        # HTTP_PLAIN and HTTP_BASIC serve every native route under /rest
        assert (method, "rest" + path, "native") in rows, (method, path)
    assert ("POST", "rest/fw/oauth2/token", "native") in rows
    assert ("GET", "rest/fw/oauth2/token", "native") in rows
    assert ("GET", "rest/mapped/:x", "mapping") in rows
    assert ("GET", "rest/hello", "annotation") in rows
    # an oAuth2 port's discovery documents at its root (HTTPS_HIDING disables one)
    assert ("GET", METADATA.lstrip("/"), "native") in rows
    assert ("GET", RESOURCE.lstrip("/"), "native") in rows
    port = service.clients["HTTPS_HIDING"].base_url.port
    resources = [line for line in done.stdout.splitlines() if "oauth-protected-resource" in line]
    assert len(resources) == 1 and f":{port}/" not in resources[0], resources


# -- OpenAPI ------------------------------------------------------------------------------------


def check_openapi(doc: dict[str, Any]) -> None:
    validate(doc)  # raises on an invalid document
    assert doc["openapi"].startswith("3.1")
    item = doc["paths"]["/rest/items/{id}"]["get"]
    assert item["parameters"] == [
        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
    ]
    order = doc["paths"]["/rest/users/{uid}/orders/{oid}"]["get"]
    assert [(p["name"], p["in"]) for p in order["parameters"]] == [("uid", "path"), ("oid", "path")]
    assert doc["paths"]["/rest/hello"]["get"]["summary"] == "says hello"
    assert "post" in doc["paths"]["/rest/echo"]
    assert not any(":" in path for path in doc["paths"])
    for path in NATIVE_PATHS:
        assert "/rest" + path in doc["paths"], path


def test_openapi_of_an_open_port_validates(clients: dict[str, Client]) -> None:
    r = clients["HTTP_PLAIN"].get("/fw/rest/openapi.json")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    check_openapi(doc)
    assert "security" not in doc
    assert doc["servers"] == [{"url": f"http://127.0.0.1:{clients['HTTP_PLAIN'].base_url.port}"}]


def test_openapi_of_a_basic_port_has_the_http_basic_scheme(clients: dict[str, Client]) -> None:
    assert clients["HTTP_BASIC"].get("/fw/rest/openapi.json").status_code == 401
    r = clients["HTTP_BASIC"].get("/fw/rest/openapi.json", headers=ADA)
    assert r.status_code == 200
    doc = r.json()
    check_openapi(doc)
    schemes = doc["components"]["securitySchemes"]
    assert list(schemes.values()) == [{"type": "http", "scheme": "basic"}]
    assert doc["security"] == [{next(iter(schemes)): []}]


def test_openapi_of_an_oauth2_port_has_the_password_flow(
    clients: dict[str, Client], bearer: dict[str, str]
) -> None:
    r = clients["HTTPS_OAUTH"].get("/fw/rest/openapi.json", headers=bearer)
    assert r.status_code == 200, r.text
    doc = r.json()
    check_openapi(doc)
    ((name, scheme),) = doc["components"]["securitySchemes"].items()
    assert scheme["type"] == "oauth2"
    assert scheme["flows"]["password"]["tokenUrl"].endswith("/fw/oauth2/token")
    assert doc["security"] == [{name: []}]  # a route without scopes takes any valid token
    assert doc["servers"][0]["url"].startswith("https://")
    token_op = doc["paths"]["/rest/fw/oauth2/token"]["post"]
    assert token_op["security"] == []  # the token route is open


@pytest.mark.parametrize("name", ["HTTP_PLAIN", "HTTP_BASIC", "HTTPS_OAUTH"])
def test_fwrest_openapi_writes_a_valid_document(
    service: Service, bearer: dict[str, str], tmp_path: Path, name: str
) -> None:
    out = tmp_path / f"{name}.json"
    done = run_cli("openapi", str(service.config), "-o", str(out), "--server", name)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    check_openapi(doc)
    headers = {"HTTP_BASIC": ADA, "HTTPS_OAUTH": bearer}.get(name, {})
    served = service.clients[name].get("/fw/rest/openapi.json", headers=headers).json()
    assert doc["paths"] == served["paths"]
    assert doc.get("components") == served.get("components")
