"""``list/service``, ``openapi.json`` and the environment routes where routes differ (SPEC 3, 5, 9):
two locations with different routes for one relative path, one shape naming parameters differently,
``NativeRoutes`` warned about at start. ``HTTP_SPLIT``: ``/rest`` serves ``variants_app`` (``GET
/hello``, ``GET /items/:id``, ``DELETE /items/:iid``, ``POST /echo``), ``/side`` ``variants_side``
(``GET``/``POST /hello``, ``POST /items/:key``); ``HTTP_NO_VENDOR``: ``vendor/environment``
disabled; ``HTTP_OPEN_ALL``: ``"public": ["*"]`` (warned). In process, and ``fwrest serve`` for the
warning."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from fwrest.testing import Client
from tests.conftest import local_port, run_cli
from tests.native.support import auth_service, in_process_ports

APP = """
from fwrest import delete, get, post


@get("/hello", description="says hello")
def hello():
    return {"from": "app"}


@get("/items/:id")
def item(id):
    return {"id": id}


@delete("/items/:iid", description="removes an item")
def remove(iid):
    return {"removed": iid}


@post("/echo")
def echo():
    return {"echo": True}
"""

SIDE = """
from fwrest import get, post


@get("/hello", description="says hello from the side")
def side_hello():
    return {"from": "side"}


@post("/hello")
def side_greet():
    return {"greeted": True}


@post("/items/:key")
def side_item(key):
    return {"key": key}
"""


PUBLIC_WARNING = "[HTTP_OPEN_ALL] FwData NativeRoutes public opens rest/config and rest/usage/time"


NAMES = ("HTTP_SPLIT", "HTTP_NO_VENDOR", "HTTP_OPEN_ALL")


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("variants")
    (tmp / "variants_side.py").write_text(SIDE)
    return auth_service(
        tmp,
        "variants",
        app=APP,
        servers={
            "HTTP_SPLIT": {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT, SIDE"},
            "HTTP_NO_VENDOR": local_port(
                FwData={"NativeRoutes": {"disable": ["fw/vendor/environment"]}}
            ),
            "HTTP_OPEN_ALL": local_port(
                FwData={
                    "Authorization": {"scheme": "basic", "OnAuth": "variants_auth.check"},
                    "NativeRoutes": {"public": ["*"]},
                }
            ),
        },
        extra={
            "SIDE": {"Path": "/side", "ThreadPool": "SIDE_POOL"},
            "SIDE_POOL": {"Environment": "SIDE_ENV", "MinThreads": 1, "MaxThreads": 2},
            "SIDE_ENV": {"Repository": "variants_side"},
        },
    )


@pytest.fixture(scope="module")
def clients(config: Path) -> Iterator[dict[str, Client]]:
    """Server section -> its in-process client; paths are full (``/rest/...``)."""
    with in_process_ports(config, NAMES, "") as clients:
        yield clients


def listing(clients: dict[str, Client]) -> list[dict[str, Any]]:
    r = clients["HTTP_SPLIT"].get("/rest/fw/rest/list/service", timeout=10)
    assert r.status_code == 200, r.text
    body: list[dict[str, Any]] = r.json()
    return body


def concrete(path: str) -> str:
    """A request path for a route path: every parameter given the value 7."""
    return re.sub(r"(:[A-Za-z_]\w*|\{[A-Za-z_]\w*\})", "7", path)


def test_each_location_is_listed_with_the_functions_it_really_serves(
    clients: dict[str, Client],
) -> None:
    entries = listing(clients)
    print([(e["endpoint"], e["paths"]) for e in entries])
    keys = [(e["endpoint"], e["paths"]) for e in entries]
    assert keys == sorted(keys)
    hello = [e for e in entries if e["endpoint"] == "/hello"]
    assert [(e["paths"], [m["function"] for m in e["methods"]]) for e in hello] == [
        (["/rest/hello"], ["variants_app.hello"]),
        (["/side/hello"], ["variants_side.side_hello", "variants_side.side_greet"]),  # GET, POST
    ]
    by_endpoint = {e["endpoint"]: e for e in entries}
    assert by_endpoint["/echo"]["paths"] == ["/rest/echo"]  # /side serves no /echo
    assert by_endpoint["/items/:key"]["paths"] == ["/side/items/:key"]
    # a native route is the same in both locations: one entry
    assert by_endpoint["/fw/healthcheck"]["paths"] == [
        "/rest/fw/healthcheck",
        "/side/fw/healthcheck",
    ]
    # each full path is in one entry only
    paths = [p for e in entries for p in e["paths"]]
    assert len(paths) == len(set(paths))


def test_every_path_and_method_the_listing_names_answers(clients: dict[str, Client]) -> None:
    for entry in listing(clients):
        if entry["type"] == "fw":
            continue
        for path in entry["paths"]:
            for method in entry["methods"]:
                r = clients["HTTP_SPLIT"].request(method["method"], concrete(path), timeout=10)
                assert r.status_code == 200, (method, path, r.status_code, r.text)


def test_openapi_has_one_path_item_per_shape_and_every_operation_answers(
    clients: dict[str, Client],
) -> None:
    r = clients["HTTP_SPLIT"].get("/rest/fw/rest/openapi.json", timeout=10)
    assert r.status_code == 200
    doc = r.json()
    validate(doc)
    shapes = [re.sub(r"\{[^}]+\}", "{}", path) for path in doc["paths"]]
    assert len(shapes) == len(set(shapes)), sorted(doc["paths"])  # OpenAPI 3.1, Paths Object
    items = doc["paths"]["/rest/items/{id}"]
    assert sorted(items) == ["delete", "get"]
    for operation in items.values():
        assert operation["parameters"] == [
            {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
        ]
    assert items["delete"]["summary"] == "removes an item"
    assert "/rest/items/{iid}" not in doc["paths"]
    assert sorted(doc["paths"]["/side/items/{key}"]) == ["post"]
    assert doc["paths"]["/side/hello"]["get"]["summary"] == "says hello from the side"
    assert "/side/echo" not in doc["paths"]
    for path, item in doc["paths"].items():
        if "/fw/" in path or path.endswith("/environment"):
            continue
        for method in item:
            answer = clients["HTTP_SPLIT"].request(method.upper(), concrete(path), timeout=10)
            assert answer.status_code == 200, (method, path, answer.status_code)


# the seed's path of an environment route -> its path under /fw/
TWINS = {
    "/server/environment": "/fw/server/environment",
    "/vendor/environment": "/fw/vendor/environment",
}
ENVIRONMENTS = ["/fw/environment", *TWINS, *TWINS.values()]


@pytest.mark.parametrize("path", ENVIRONMENTS)
def test_the_environment_routes_answer_exactly_version_build_patch(
    clients: dict[str, Client], path: str
) -> None:
    r = clients["HTTP_SPLIT"].get(f"/rest{path}", timeout=10)
    assert r.status_code == 200
    body = r.json()
    print(path, body)
    assert sorted(body) == ["build", "patch", "version"]
    assert all(isinstance(v, str) and v for v in body.values())
    # the seed's path and the path under /fw/ are one route
    twin = TWINS.get(path)
    if twin is not None:
        assert clients["HTTP_SPLIT"].get(f"/rest{twin}", timeout=10).json() == body


def test_a_name_covers_both_paths_of_an_environment_route(clients: dict[str, Client]) -> None:
    client = clients["HTTP_NO_VENDOR"]
    for path in ("/vendor/environment", "/fw/vendor/environment"):
        assert client.get("/rest" + path, timeout=10).status_code == 404, path
    for path in ("/server/environment", "/fw/server/environment"):
        assert client.get("/rest" + path, timeout=10).status_code == 200, path
    listed = [e["endpoint"] for e in client.get("/rest/fw/rest/list/service").json()]
    assert "/fw/server/environment" in listed and "/server/environment" in listed
    assert not any("vendor" in endpoint for endpoint in listed)


def test_public_star_on_a_protected_port_is_warned_about(config: Path, serve: Any) -> None:
    # the warning of a start is in its log: a real fwrest serve (the client logs none)
    server = serve(config)
    assert PUBLIC_WARNING in server.log()
    done = run_cli("check", str(server.config))
    assert done.returncode == 0, done.stderr
    assert f"warning: {PUBLIC_WARNING}" in done.stdout
    assert "HTTP_SPLIT] FwData NativeRoutes" not in done.stdout
    # and it is what the warning says: the settings answer without credentials
    origin = f"http://127.0.0.1:{server.ports['HTTP_OPEN_ALL']}"
    r = httpx.get(f"{origin}/rest/fw/rest/config", timeout=10)
    assert r.status_code == 200
    assert httpx.get(f"{origin}/rest/hello", timeout=10).status_code == 401


def test_disabling_the_token_route_of_an_oauth2_port_is_warned_about(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    params = (
        "def params():\n"
        '    return {"username": "ada", "password": "Ada-Pw-1", "access_expires": 3600000}\n'
    )
    config = auth_service(
        tmp_path,
        auth=params,
        app=APP,
        servers={
            "HTTPS_REST": local_port(
                SslCertificate=str(certs["cert"]),
                SslCertificateKey=str(certs["key"]),
                FwData={
                    "Authorization": {
                        "scheme": "oAuth2",
                        "onAuth": "",
                        "onAuthparams": "auth.params",
                        "allowGetToken": False,
                    },
                    "NativeRoutes": {"disable": ["*"]},
                },
            )
        },
    )
    done = run_cli("check", str(config))
    print(done.stdout)
    assert done.returncode == 0, done.stderr
    assert (
        "warning: [HTTPS_REST] FwData NativeRoutes disable takes away this port's token route"
        in (done.stdout)
    )
    assert "public opens" not in done.stdout


OPEN_CONFIG_WARNING = (
    "[OPEN] has no Authorization scheme and serves rest/config: anyone who reaches this port "
    "can change the service's run-time settings"
)


def test_an_open_port_serving_rest_config_is_warned_about_once(tmp_path: Path, serve: Any) -> None:
    """SPEC 5 lets "every authenticated user" change settings; on a port without a scheme,
    everyone (kept as the original product has it: docs/decisions.md). ``fwrest check`` and
    the start say so once per such port, with how to prevent it; not for a port whose
    NativeRoutes disables rest/config, nor for one with a scheme."""
    config = auth_service(
        tmp_path,
        "openwarn",
        app=APP,
        servers={
            "OPEN": local_port(),
            "CLOSED": local_port(FwData={"NativeRoutes": {"disable": ["rest/config"]}}),
            "BASIC": local_port(
                FwData={"Authorization": {"scheme": "basic", "OnAuth": "openwarn_auth.check"}}
            ),
        },
    )
    done = run_cli("check", str(config))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "serves rest/config" in line]
    assert len(lines) == 1 and lines[0].startswith(f"warning: {OPEN_CONFIG_WARNING}"), lines
    print(lines[0])
    assert '"disable": ["rest/config"]' in lines[0] and "behind a scheme" in lines[0]
    server = serve(config, workers=2)
    started = [line for line in server.log().splitlines() if "serves rest/config" in line]
    assert len(started) == 1 and OPEN_CONFIG_WARNING in started[0], started
    # the behaviour is kept: the warning says what is so
    origin = f"http://127.0.0.1:{server.ports['OPEN']}"
    changed = httpx.post(f"{origin}/rest/fw/rest/config", json={"rest_trace_time": 1}, timeout=10)
    assert changed.status_code == 200, changed.text
    closed = f"http://127.0.0.1:{server.ports['CLOSED']}/rest/fw/rest/config"
    assert httpx.post(closed, json={"rest_trace_time": 0}, timeout=10).status_code == 404
