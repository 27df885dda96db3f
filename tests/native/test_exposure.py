"""SPEC 4, 5: native routes are behind the port's scheme unless ``NativeRoutes.public`` opens them:
``HTTP_BASIC`` protects all, ``HTTP_PUBLIC`` opens exactly ``healthcheck`` for probes; ``fwrest
routes`` reads the same configuration."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from fwrest.testing import Client
from tests.conftest import local_port, run_cli
from tests.native.support import NATIVE, auth_service, basic

ADA = basic("ada", "Ada-Pw-1")
CHALLENGE = 'Basic realm="Access to REST", charset="ISO-8859-1"'
PORTS = ("HTTP_BASIC", "HTTP_PUBLIC")


def _basic_port(**fw_data: Any) -> dict[str, Any]:
    return local_port(
        FwData={
            "Authorization": {
                "scheme": "basic",
                "OnAuth": "exposure_auth.check",
                "maxFailures": 1_000_000,
            },
            **fw_data,
        }
    )


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("exposure")
    return auth_service(
        tmp,
        "exposure",
        servers={
            "HTTP_BASIC": _basic_port(),
            "HTTP_PUBLIC": _basic_port(NativeRoutes={"public": ["healthcheck"]}),
        },
    )


def call(
    clients: dict[str, Client], name: str, method: str, path: str, **kw: Any
) -> httpx.Response:
    if method == "POST":  # a state change: JSON (SPEC 7.1)
        kw["json"] = {}  # an empty settings change: allowed, changes nothing
        kw["headers"] = {**kw.get("headers", {}), "Accept": "application/json"}
    return clients[name].request(method, path, timeout=10, **kw)


@pytest.mark.parametrize(("method", "path"), [(m, p) for _, m, p in NATIVE])
def test_every_native_route_needs_credentials_on_a_basic_port(
    clients: dict[str, Client], method: str, path: str
) -> None:
    r = call(clients, "HTTP_BASIC", method, path)
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == CHALLENGE
    r = call(clients, "HTTP_BASIC", method, path, headers=basic("ada", "wrong"))
    assert r.status_code == 403, r.text
    r = call(clients, "HTTP_BASIC", method, path, headers=ADA)
    assert r.status_code == 200, r.text


def test_public_opens_just_the_healthcheck(clients: dict[str, Client]) -> None:
    r = call(clients, "HTTP_PUBLIC", "GET", "/fw/healthcheck")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "UP"
    closed = []
    for _name, method, path in NATIVE:
        if path == "/fw/healthcheck":
            continue
        r = call(clients, "HTTP_PUBLIC", method, path)
        closed.append((method, path, r.status_code))
    print(closed)
    assert all(status == 401 for _, _, status in closed), closed
    assert call(clients, "HTTP_PUBLIC", "GET", "/hello").status_code == 401
    # ... and only on the port that says so
    assert call(clients, "HTTP_BASIC", "GET", "/fw/healthcheck").status_code == 401


def test_the_listing_marks_only_the_public_route_public(clients: dict[str, Client]) -> None:
    r = call(clients, "HTTP_PUBLIC", "GET", "/fw/rest/list/service", headers=ADA)
    assert r.status_code == 200
    public = {e["endpoint"]: e["public"] for e in r.json()}
    assert public["/fw/healthcheck"] is True
    assert public["/fw/healthcheck/ok"] is False
    assert public["/fw/rest/config"] is False
    assert public["/hello"] is False


def test_fwrest_routes_lists_every_native_route_of_both_ports(config: Path) -> None:
    done = run_cli("routes", str(config))
    assert done.returncode == 0, done.stderr
    rows: Counter[tuple[str, str, str]] = Counter()
    for line in done.stdout.splitlines()[1:]:
        method, url, _function, source = line.split()
        rows[(method, "/" + url.split("/", 3)[3], source)] += 1
    for _name, method, path in NATIVE:
        assert rows[(method, "/rest" + path, "native")] == 2, (method, path)  # both ports
