"""SPEC 11.3's REST methods and ``setFault``'s body (SPEC 3) from handlers in process (module
``rest_methods_app``): each method's effect, the request id's rules (SPEC 13.4), hostile header
names and values; the socket side is test_rest_connection.py. Ports: ``OPEN`` (two locations on two
pools, ``AllowedHosts=api.example.com``), ``BASIC``, ``OAUTH`` (trustme certificates, no TLS in
process)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from fwrest.testing import Client
from tests.auth.oauth2_support import oauth_section
from tests.conftest import issue_certs, local_port, module_config

MODULE = "rest_methods_app"
PORT = 18431  # the OPEN port as configured; nothing binds it in process

APP = """
import asyncio

from fwrest import get, post, rest

def facts():
    return {
        "ip": rest.getClientIP(), "url": rest.getFullURLRequest(), "id": rest.getRequestId(),
        "id_again": rest.getRequestId(), "scopes": rest.getAuthScopes(),
        "pool": {
            "name": rest.getThreadPoolName(), "min": rest.getThreadPoolMinThreads(),
            "max": rest.getThreadPoolMaxThreads(), "accept": rest.getThreadPoolAcceptTimeout(),
            "inactive": rest.getThreadPoolInactiveTimeout(),
            "active": rest.getThreadPoolActiveTimeout(), "port": rest.getThreadPoolPort(),
            "ssl": rest.getThreadPoolSsl(),
        },
    }

@get("/facts")
def sync_facts():
    return facts()

@get("/afacts")
async def async_facts():
    await asyncio.sleep(0)
    return facts()

@get("/named/:name")
def named(name):
    return {"url": rest.getFullURLRequest(), "path": rest.getPathRequest()}

@get("/headers/update")
def update_headers():
    rest.setKeyHeaderResponse("X-Kept", "kept")
    rest.setKeyHeaderResponse("x-changed", "old")
    replaced = rest.updateKeyHeaderResponse("X-Changed", "new")
    added = rest.updateKeyHeaderResponse("X-Added", "fresh")
    rest.updateKeyHeaderResponse("Content-Type", "application/problem+json")
    return {"replaced": replaced, "added": added}

@get("/headers/delete")
def delete_headers():
    rest.setKeyHeaderResponse("X-Gone", "1")
    rest.setKeyHeaderResponse("x-gone", "2")
    rest.setKeyHeaderResponse("X-Kept", "kept")
    deleted = rest.deleteKeyHeaderResponse("X-GONE")
    absent = rest.deleteKeyHeaderResponse("X-Never-Set")
    return {"deleted": deleted, "absent": absent}

@get("/headers/reset")
def reset_headers():
    rest.setKeyHeaderResponse("X-A", "1")
    rest.setKeyHeaderResponse("Content-Type", "text/csv")
    rest.resetKeyHeaderResponse()
    rest.setKeyHeaderResponse("X-After", "3")
    rest.setResponse("a,b")

@get("/headers/reset-nothing")
async def reset_nothing():
    rest.resetKeyHeaderResponse()
    return {"ok": True}

@get("/body/reset")
def reset_body():
    rest.setResponse("dropped ")
    rest.setResponse({"dropped": 1})
    rest.resetResponse()
    rest.setResponse("kept")

@get("/body/reset-fault")
def reset_fault():
    rest.setFault("dropped")
    rest.resetResponse()
    rest.setResponse("after the reset")

HOSTILE = {
    "crlf-value": ("X-Before", "a\\r\\nSet-Cookie: evil=1"),
    "lf-value": ("X-Before", "a\\nX-Injected: evil"),
    "nul-value": ("X-Before", "a\\x00evil"),
    "crlf-name": ("X-A\\r\\nSet-Cookie: evil=1", "v"),
    "empty-name": ("", "v"),
    "non-ascii-name": ("X-Caf\\u00e9", "v"),
    "space-name": ("X A", "v"),
    "colon-name": ("X-A:", "v"),
}

@get("/hostile/update/:case")
def hostile_update(case):
    rest.setKeyHeaderResponse("X-Before", "1")
    name, value = HOSTILE[case]
    rest.updateKeyHeaderResponse(name, value)
    return {"reached": True}

@get("/hostile/delete/:case")
async def hostile_delete(case):
    rest.setKeyHeaderResponse("X-Before", "1")
    rest.deleteKeyHeaderResponse(HOSTILE[case][0])
    return {"reached": True}

@get("/close")
def close():
    rest.setCloseAfterSend()
    return {"closing": True}

@get("/fault/plain")
def fault_plain():
    rest.setFault("the ledger is locked")

@get("/fault/status/:status")
def fault_status(status):
    rest.setStatusCode(int(status))
    rest.setFault("status " + status)

@get("/fault/then/:status")
def fault_then(status):
    rest.setFault("then " + status)
    rest.setStatusCode(int(status))  # the body's code follows a 4xx/5xx; a 2xx/3xx is refused

@get("/fault/after-responses")
def fault_after_responses():
    rest.setResponse("partial text, ")
    rest.setResponse({"half": "done"})
    rest.setResponse(b"bytes")
    rest.setFault("gave up")

@get("/fault/typed")
def fault_typed():
    rest.setKeyHeaderResponse("Content-Type", "text/plain")
    rest.setKeyHeaderResponse("X-Kept", "kept")
    rest.setFault('say "hi" \\u00e9\\u20ac')

@get("/fault/async")
async def fault_async():
    rest.setStatusCode(503)
    rest.setFault("try later")

def check(user, password):
    return user == "ann" and password == "Ann-Pw-5150"

def oauth_params():
    return {
        "client_id": "web",
        "client_secret": "Web-Secret-9q",
        "users": [{"username": "ada", "password": "Ada-Pw-7731"}],
        "types": [{"grant_type": "password"}],
    }
"""


def _config(folder: Path, certs: dict[str, Path]) -> Path:
    basic = {"scheme": "basic", "OnAuth": f"{MODULE}.check", "maxFailures": 1000}
    servers = {
        "OPEN": local_port(Port=PORT, Locations="ROOT, OTHER", AllowedHosts="api.example.com"),
        "BASIC": local_port(FwData={"Authorization": basic}),
        "OAUTH": oauth_section(certs, onAuthparams=f"{MODULE}.oauth_params"),
    }
    pool = {"MinThreads": 2, "MaxThreads": 6, "AcceptTimeout": 4000, "InactiveTimeout": 45000}
    extra = {
        "POOL": {**pool, "ActiveTimeout": 20000},
        "OTHER": {"Path": "/other", "ThreadPool": "SIDE_POOL"},
        "SIDE_POOL": {"Environment": "ENV", "MinThreads": 1, "MaxThreads": 3},
    }
    return module_config(folder, MODULE, app=APP, servers=servers, extra=extra)


@pytest.fixture(scope="module")
def config(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rest_methods")
    return _config(folder, issue_certs(ca, folder / "certs"))


@pytest.fixture(scope="module")
def client(config: Path) -> Iterator[Client]:
    with Client(config, server="OPEN", client_address="10.1.2.3") as http:
        yield http


def _error(status: int, message: str) -> bytes:
    """SPEC 3's error body, exactly as the framework writes it."""
    return json.dumps(
        {"code": status, "detailedMessage": "", "message": message},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


# -- getClientIP, getFullURLRequest ---------------------------------------------------------


@pytest.mark.parametrize("route", ["facts", "afacts"])
def test_client_ip_and_full_url(client: Client, route: str) -> None:
    got = client.get(f"/rest/{route}?b=2&a=%20x").json()
    assert got["ip"] == "10.1.2.3"  # the Client's address; no TrustedProxies here
    assert got["url"] == f"http://127.0.0.1:{PORT}/rest/{route}?b=2&a=%20x"


def test_the_full_url_has_the_normalised_path_percent_encoded(client: Client) -> None:
    got = client.get("/rest//named/./caf%C3%A9%20au%20lait/").json()
    assert got["path"] == "/rest/named/caf\u00e9 au lait"
    assert got["url"] == f"http://127.0.0.1:{PORT}/rest/named/caf%C3%A9%20au%20lait"
    got = client.get("/rest/named/a;b=c@d:e").json()
    assert got["url"] == f"http://127.0.0.1:{PORT}/rest/named/a;b=c@d:e"


@pytest.mark.parametrize(
    ("host", "authority"),
    [
        ("api.example.com", "api.example.com"),  # AllowedHosts, no port: the default one
        ("API.Example.com:8443", "api.example.com:8443"),  # the port the client asked
        ("api.example.com:80", "api.example.com"),
        ("localhost:9000", "localhost:9000"),  # a loopback server is localhost too
        ("evil.example", f"127.0.0.1:{PORT}"),  # a forged Host: the server's own name
        ("evil.example:80", f"127.0.0.1:{PORT}"),
        ("api.example.com:0", f"127.0.0.1:{PORT}"),  # no port
    ],
)
def test_the_full_url_takes_a_host_that_names_the_server(
    client: Client, host: str | bytes, authority: str
) -> None:
    r = client.get("/rest/facts?q=1", headers={"Host": host})
    assert r.status_code == 200, r.text
    assert r.json()["url"] == f"http://{authority}/rest/facts?q=1"


@pytest.mark.parametrize(
    "host",
    ["api.example.com:99999", b"api.example.com:\xb2", "api.example.com@evil.example"],
)
def test_a_host_that_is_no_host_and_port_never_reaches_the_url(
    client: Client, host: str | bytes
) -> None:
    # refused before the handler runs (RFC 9112 3.2), as the engine refuses it
    assert client.get("/rest/facts?q=1", headers={"Host": host}).status_code == 400


def test_the_full_url_of_an_https_port_leaves_out_443(config: Path) -> None:
    with Client(config, server="OAUTH") as http:
        token = _oauth_token(http)
        r = http.get(
            "/rest/facts",
            headers={"Authorization": f"Bearer {token}", "Host": "127.0.0.1:443"},
        )
    assert r.json()["url"] == "https://127.0.0.1/rest/facts"


# -- getRequestId (SPEC 13.4) -----------------------------------------------------------------


@pytest.mark.parametrize(
    "carried", ["abc-123", "req.1:2_3-x", "A" * 128, "0", "trace:01H8XGJWBWBAQ4Z4V0P6"]
)
def test_an_acceptable_request_id_is_kept(client: Client, carried: str) -> None:
    got = client.get("/rest/facts", headers={"X-Request-ID": carried}).json()
    assert got["id"] == got["id_again"] == carried


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("X-Request-ID", "")],
        [("X-Request-ID", "A" * 129)],
        [("X-Request-ID", "has space")],
        [("X-Request-ID", "semi;colon")],
        [(b"X-Request-ID", "caf\u00e9".encode())],
        [("X-Request-ID", "a/b")],
        [("X-Request-ID", "one"), ("X-Request-ID", "two")],  # which one? neither
    ],
    ids=["none", "empty", "too-long", "space", "semicolon", "non-ascii", "slash", "two"],
)
def test_an_unacceptable_request_id_is_replaced_by_a_new_one(
    client: Client, headers: list[tuple[str | bytes, str | bytes]]
) -> None:
    ids = set()
    for _ in range(2):
        r = client.get("/rest/afacts", headers=httpx.Headers(headers))
        got = r.json()
        assert got["id"] == got["id_again"]  # made once per request
        assert re.fullmatch(r"[0-9a-f]{32}", got["id"]), got["id"]
        ids.add(got["id"])
    assert len(ids) == 2  # a new one per request


# -- headers: update, delete, reset -------------------------------------------------------------


def test_update_replaces_a_header_set_and_sets_one_absent(client: Client) -> None:
    r = client.get("/rest/headers/update")
    assert r.status_code == 200, r.text
    assert r.json() == {"replaced": True, "added": False}
    assert r.headers["x-changed"] == "new"
    assert r.headers.get_list("x-changed") == ["new"]
    assert r.headers["x-added"] == "fresh"
    assert r.headers["x-kept"] == "kept"
    # fwrest's own Content-Type is set when the answer is encoded: an update replaces it
    assert r.headers.get_list("content-type") == ["application/problem+json"]


def test_delete_removes_every_spelling_of_a_header(client: Client) -> None:
    r = client.get("/rest/headers/delete")
    assert r.json() == {"deleted": True, "absent": False}
    assert "x-gone" not in r.headers
    assert r.headers["x-kept"] == "kept"


def test_reset_of_the_headers_drops_every_header_set(client: Client) -> None:
    r = client.get("/rest/headers/reset")
    assert r.status_code == 200
    assert "x-a" not in r.headers
    assert r.headers["x-after"] == "3"
    assert r.headers["content-type"] == "text/plain; charset=utf-8"  # text/csv was dropped
    assert r.text == "a,b"
    assert client.get("/rest/headers/reset-nothing").json() == {"ok": True}


def test_reset_of_the_response_drops_what_set_response_gathered(client: Client) -> None:
    r = client.get("/rest/body/reset")
    assert r.status_code == 200
    assert r.text == "kept"
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    r = client.get("/rest/body/reset-fault")  # the body goes, the status setFault set stays
    assert r.status_code == 500
    assert r.text == "after the reset"


BAD_NAMES = ["crlf-name", "empty-name", "non-ascii-name", "space-name", "colon-name"]
# an update of a bad value or name, a delete of a bad name
HOSTILE = [f"update/{case}" for case in ["crlf-value", "lf-value", "nul-value", *BAD_NAMES]]
HOSTILE += [f"delete/{case}" for case in BAD_NAMES]


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_header_update_or_delete_is_a_500_and_adds_nothing(
    client: Client, case: str
) -> None:
    r = client.get(f"/rest/hostile/{case}")
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/json"
    assert r.content == _error(500, "Internal Server Error")
    assert "set-cookie" not in r.headers
    assert "x-injected" not in r.headers
    assert "x-before" not in r.headers  # the standard 500 carries none of the handler's
    assert not any("evil" in value for _, value in r.headers.multi_items())


# -- setCloseAfterSend, getAuthScopes, the pool getters -----------------------------------------


def test_close_after_send_says_connection_close(client: Client) -> None:
    r = client.get("/rest/close")
    assert r.json() == {"closing": True}
    assert r.headers["connection"] == "close"
    assert "connection" not in client.get("/rest/facts").headers  # the next is kept alive


def test_auth_scopes_on_open_and_basic_ports_are_empty(client: Client, config: Path) -> None:
    assert client.get("/rest/facts").json()["scopes"] == []
    with Client(config, server="BASIC") as http:
        got = http.get("/rest/afacts", auth=("ann", "Ann-Pw-5150")).json()
    assert got["scopes"] == []


CLIENT = {"client_id": "web", "client_secret": "Web-Secret-9q"}


def _oauth_token(http: Client) -> str:
    form = {"grant_type": "password", "username": "ada", "password": "Ada-Pw-7731"}
    r = http.post("/rest/fw/oauth2/token", data={**form, **CLIENT})
    assert r.status_code == 200, r.text
    return str(r.json()["access_token"])


def test_auth_scopes_of_an_access_token(config: Path) -> None:
    with Client(config, server="OAUTH") as http:
        token = _oauth_token(http)
        for route in ("facts", "afacts"):
            got = http.get(f"/rest/{route}", headers={"Authorization": f"Bearer {token}"}).json()
            assert got["scopes"] == ["default"]  # what every token is granted (SPEC 12.4)


@pytest.mark.parametrize("route", ["facts", "afacts"])
def test_the_pool_getters_give_the_locations_pool(client: Client, route: str) -> None:
    got: dict[str, Any] = client.get(f"/rest/{route}").json()["pool"]
    limits = {"min": 2, "max": 6, "accept": 4000, "inactive": 45000, "active": 20000}
    assert got == {"name": "POOL", **limits, "port": PORT, "ssl": False}
    other: dict[str, Any] = client.get(f"/other/{route}").json()["pool"]
    assert other["name"] == "SIDE_POOL"
    assert (other["min"], other["max"], other["active"]) == (1, 3, 0)
    assert other["port"] == PORT


# -- setFault (SPEC 3) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "status", "message"),
    [
        ("plain", 500, "the ledger is locked"),
        ("status/404", 404, "status 404"),
        ("status/503", 503, "status 503"),
        ("status/200", 500, "status 200"),  # not an error status: 500
        ("status/302", 500, "status 302"),
        ("then/404", 404, "then 404"),  # the code is the status sent, set before or after
        ("then/503", 503, "then 503"),
        ("then/200", 500, "then 200"),  # an error is not sent as a success (logged)
        ("then/302", 500, "then 302"),
        ("after-responses", 500, "gave up"),  # what setResponse gathered is replaced
        ("typed", 500, 'say "hi" \u00e9\u20ac'),  # an earlier Content-Type gives way
        ("async", 503, "try later"),
    ],
)
def test_set_fault_answers_the_error_body_as_json(
    client: Client, route: str, status: int, message: str
) -> None:
    r = client.get(f"/rest/fault/{route}")
    assert r.status_code == status
    assert r.headers.get_list("content-type") == ["application/json"]
    assert r.content == _error(status, message)
    assert r.json() == {"code": status, "detailedMessage": "", "message": message}


def test_set_fault_keeps_the_other_headers(client: Client) -> None:
    assert client.get("/rest/fault/typed").headers["x-kept"] == "kept"
