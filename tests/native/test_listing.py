"""``/fw/rest/list/service``, ``/fw/rest/openapi.json`` and ``fwrest routes/openapi`` (SPEC 5).

One service for the module, four ports:

* ``HTTP_REST``: open, two locations (``/rest`` and ``/other``), a ``LoadURNs`` route, and
  ``NativeRoutes`` hiding ``healthcheck/datetime`` and disabling ``vendor/environment``;
* ``HTTP_PLAIN``: open, one location, no ``NativeRoutes`` (every native route listed);
* ``HTTP_BASIC``: Basic;
* ``HTTPS_OAUTH``: oAuth2 on TLS.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from openapi_spec_validator import validate

from tests.conftest import APP_SOURCE, ServerProcess, free_config, run_cli
from tests.native.support import NATIVE, NATIVE_PATHS, basic, running

APP = (
    APP_SOURCE
    + '''

def mapped(x):
    """Reached through LoadURNs only."""
    return {"mapped": x}
'''
)

AUTH_SOURCE = """
def check(user, password):
    return (user, password) == ("ada", "Ada-Pw-1")


def params():
    return {
        "client_id": "web",
        "client_secret": "Web-Secret-9q",
        "username": "ada",
        "password": "Ada-Pw-7731",
        "grant_type": "password",
        "access_expires": 3600000,
    }
"""

ADA = basic("ada", "Ada-Pw-1")
HIDDEN, DISABLED = "/fw/healthcheck/datetime", "/vendor/environment"
ENTRY_KEYS = ["doc", "endpoint", "methods", "paths", "public", "source", "type"]


@pytest.fixture(scope="module")
def service(
    tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA
) -> Iterator[tuple[ServerProcess, Path]]:
    tmp = tmp_path_factory.mktemp("listing")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(str(tmp / "server.crt"))
    cert.private_key_pem.write_to_path(str(tmp / "server.key"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    (tmp / "auth.py").write_text(AUTH_SOURCE)
    server = {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT"}
    config = free_config(
        tmp,
        servers={
            "HTTP_REST": {
                **server,
                "Locations": "ROOT, OTHER",
                "LoadURNs": {
                    "/mapped/:x": {"GET": {"Function": "app.mapped", "Description": "mapped"}}
                },
                "FwData": {
                    "NativeRoutes": {
                        "hide": ["healthcheck/datetime"],
                        "disable": ["vendor/environment"],
                    }
                },
            },
            "HTTP_PLAIN": dict(server),
            "HTTP_BASIC": {
                **server,
                "FwData": {"Authorization": {"scheme": "basic", "OnAuth": "auth.check"}},
            },
            "HTTPS_OAUTH": {
                **server,
                "SslCertificate": "server.crt",
                "SslCertificateKey": "server.key",
                "FwData": {
                    "Authorization": {
                        "scheme": "oAuth2",
                        "onAuth": "",
                        "onAuthparams": "auth.params",
                    }
                },
            },
        },
        extra={
            "ENV": {"Repository": "app,auth"},
            "OTHER": {"Path": "/other", "ThreadPool": "POOL"},
        },
        app=APP,
    )
    with running(config) as proc:
        yield proc, tmp


@pytest.fixture(scope="module")
def server(service: tuple[ServerProcess, Path]) -> ServerProcess:
    return service[0]


def base(server: ServerProcess, name: str = "HTTP_REST") -> str:
    scheme = "https" if name.startswith("HTTPS") else "http"
    return f"{scheme}://127.0.0.1:{server.ports[name]}/rest"


def listing(server: ServerProcess, name: str = "HTTP_REST", **kw: Any) -> list[dict[str, Any]]:
    r = httpx.get(f"{base(server, name)}/fw/rest/list/service", **kw)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    body: list[dict[str, Any]] = r.json()
    assert isinstance(body, list)
    return body


def by_endpoint(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["endpoint"]: e for e in entries}


@pytest.fixture(scope="module")
def tls(service: tuple[ServerProcess, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(service[1] / "ca.pem"))


@pytest.fixture(scope="module")
def bearer(server: ServerProcess, tls: ssl.SSLContext) -> dict[str, str]:
    r = httpx.post(
        f"{base(server, 'HTTPS_OAUTH')}/fw/oauth2/token",
        data={"grant_type": "password", "username": "ada", "password": "Ada-Pw-7731"},
        verify=tls,
    )
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


# -- list/service --------------------------------------------------------------------------------


def test_list_service_is_sorted_one_entry_per_path_in_the_documented_shape(
    server: ServerProcess,
) -> None:
    entries = listing(server)
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
    server: ServerProcess,
) -> None:
    entries = by_endpoint(listing(server))
    assert entries["/hello"] == {
        "endpoint": "/hello",
        "type": "default",
        "doc": "true",
        "source": "annotation",
        "paths": ["/other/hello", "/rest/hello"],
        "public": True,  # an open port
        "methods": [{"method": "GET", "description": "says hello", "function": "app.hello"}],
    }
    items = entries["/items/:id"]
    assert (items["doc"], items["source"], items["type"]) == ("false", "annotation", "default")
    assert items["methods"][0]["function"] == "app.item"
    assert not items["methods"][0]["description"]
    assert entries["/echo"]["methods"][0]["method"] == "POST"
    mapped = entries["/mapped/:x"]
    assert mapped["source"] == "mapping"
    assert mapped["type"] == "default"
    assert mapped["doc"] == "true"
    assert mapped["methods"] == [
        {"method": "GET", "description": "mapped", "function": "app.mapped"}
    ]
    config = entries["/fw/rest/config"]
    assert (config["type"], config["source"]) == ("fw", "native")
    assert [m["method"] for m in config["methods"]] == ["GET", "POST"]
    assert all(m["function"].startswith("fwrest.") for m in config["methods"])
    assert config["doc"] == "true"
    # the mapped route answers where the listing says
    assert httpx.get(f"{base(server)}/mapped/7").json() == {"mapped": "7"}
    assert httpx.get(f"http://127.0.0.1:{server.ports['HTTP_REST']}/other/mapped/8").json() == {
        "mapped": "8"
    }


def test_every_native_route_lists_itself(server: ServerProcess) -> None:
    plain = by_endpoint(listing(server, "HTTP_PLAIN"))
    for _name, method, path in NATIVE:
        assert path in plain, path
        assert method in [m["method"] for m in plain[path]["methods"]], (method, path)
        assert (plain[path]["type"], plain[path]["source"]) == ("fw", "native")
    assert "/fw/oauth2/token" not in plain  # only on oAuth2 ports


def test_hide_leaves_a_route_out_of_the_list_but_it_still_answers(server: ServerProcess) -> None:
    assert HIDDEN not in by_endpoint(listing(server))
    assert HIDDEN in by_endpoint(listing(server, "HTTP_PLAIN"))  # only where it is hidden
    r = httpx.get(f"{base(server)}{HIDDEN}")
    assert r.status_code == 200, r.text


def test_disable_gives_404_and_leaves_the_route_out(server: ServerProcess) -> None:
    assert DISABLED not in by_endpoint(listing(server))
    r = httpx.get(f"{base(server)}{DISABLED}")
    assert r.status_code == 404
    assert r.json() == {"code": 404, "detailedMessage": "", "message": "Not Found"}
    assert httpx.get(f"{base(server, 'HTTP_PLAIN')}{DISABLED}").status_code == 200
    assert DISABLED in by_endpoint(listing(server, "HTTP_PLAIN"))


def test_public_flag_follows_the_port_scheme(
    server: ServerProcess, tls: ssl.SSLContext, bearer: dict[str, str]
) -> None:
    basic_entries = by_endpoint(listing(server, "HTTP_BASIC", headers=ADA))
    assert basic_entries["/hello"]["public"] is False
    assert basic_entries["/fw/healthcheck"]["public"] is False
    oauth = by_endpoint(listing(server, "HTTPS_OAUTH", headers=bearer, verify=tls))
    token = oauth["/fw/oauth2/token"]
    assert token["public"] is True  # the token route is never protected
    assert [m["method"] for m in token["methods"]] == ["GET", "POST"]
    assert (token["type"], token["source"]) == ("fw", "native")
    assert oauth["/hello"]["public"] is False


def test_fwrest_routes_lists_every_native_route(service: tuple[ServerProcess, Path]) -> None:
    config = service[0].config
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


def test_openapi_of_an_open_port_validates(server: ServerProcess) -> None:
    r = httpx.get(f"{base(server, 'HTTP_PLAIN')}/fw/rest/openapi.json")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    check_openapi(doc)
    assert "security" not in doc
    assert doc["servers"] == [{"url": f"http://127.0.0.1:{server.ports['HTTP_PLAIN']}"}]


def test_openapi_of_a_basic_port_has_the_http_basic_scheme(server: ServerProcess) -> None:
    assert httpx.get(f"{base(server, 'HTTP_BASIC')}/fw/rest/openapi.json").status_code == 401
    r = httpx.get(f"{base(server, 'HTTP_BASIC')}/fw/rest/openapi.json", headers=ADA)
    assert r.status_code == 200
    doc = r.json()
    check_openapi(doc)
    schemes = doc["components"]["securitySchemes"]
    assert list(schemes.values()) == [{"type": "http", "scheme": "basic"}]
    assert doc["security"] == [{next(iter(schemes)): []}]


def test_openapi_of_an_oauth2_port_has_the_password_flow(
    server: ServerProcess, tls: ssl.SSLContext, bearer: dict[str, str]
) -> None:
    r = httpx.get(f"{base(server, 'HTTPS_OAUTH')}/fw/rest/openapi.json", headers=bearer, verify=tls)
    assert r.status_code == 200, r.text
    doc = r.json()
    check_openapi(doc)
    ((name, scheme),) = doc["components"]["securitySchemes"].items()
    assert scheme["type"] == "oauth2"
    assert scheme["flows"]["password"]["tokenUrl"].endswith("/fw/oauth2/token")
    assert doc["security"] == [{name: ["default"]}]
    assert doc["servers"][0]["url"].startswith("https://")
    token_op = doc["paths"]["/rest/fw/oauth2/token"]["post"]
    assert token_op["security"] == []  # the token route is open


@pytest.mark.parametrize("name", ["HTTP_PLAIN", "HTTP_BASIC", "HTTPS_OAUTH"])
def test_fwrest_openapi_writes_a_valid_document(
    service: tuple[ServerProcess, Path],
    tls: ssl.SSLContext,
    bearer: dict[str, str],
    tmp_path: Path,
    name: str,
) -> None:
    server, _ = service
    out = tmp_path / f"{name}.json"
    done = run_cli("openapi", str(server.config), "-o", str(out), "--server", name)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    check_openapi(doc)
    headers = {"HTTP_BASIC": ADA, "HTTPS_OAUTH": bearer}.get(name, {})
    served = httpx.get(
        f"{base(server, name)}/fw/rest/openapi.json", headers=headers, verify=tls
    ).json()
    assert doc["paths"] == served["paths"]
    assert doc.get("components") == served.get("components")
