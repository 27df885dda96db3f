"""HTTP/1.1 conformance over raw sockets (issue 34): ``Host`` (RFC 9112 3.2, 3.2.2), ``OPTIONS``
(RFC 9110 9.3.7), header names with ``_``, reason phrases; routes echo what the application
received."""

from __future__ import annotations

import base64

import pytest

from tests.conftest import APP_SOURCE, local_port
from tests.server.rawhttp import RawConnection, RawResponse, request_bytes
from tests.server.support import port_of, serve_module

APP = (
    APP_SOURCE
    + """

@get("/headers")
def headers():
    return dict(rest.getHeaderRequest())

@get("/url")
def url():
    return {"url": rest.getFullURLRequest(), "host": rest.getHeaderRequest().get("host")}

@get("/status/:n")
def status(n):
    rest.setStatusCode(int(n))
    return "s"

def on_auth(user, password):
    return user == "ada" and password == "pw"
"""
)
GOOD = [("Authorization", "Basic " + base64.b64encode(b"ada:pw").decode())]
BASIC = {"Authorization": {"scheme": "basic", "OnAuth": "app.on_auth", "maxFailures": 1000}}
SERVER_ALLOW = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"


SERVERS = {"HTTP_OPEN": local_port(), "HTTP_BASIC": local_port(FwData=BASIC)}
server = serve_module("conformance", servers=SERVERS, app=APP)
port = port_of("HTTP_OPEN")
basic_port = port_of("HTTP_BASIC", "basic_port")


def raw_request(port: int, data: bytes) -> tuple[RawResponse, bool]:
    """The answer, and whether the connection serves on (one more GET) or was closed."""
    with RawConnection(port) as conn:
        conn.send(data)
        response = conn.read_response()
        if response.header("connection") == "close":
            return response, not conn.closed_by_server()
        return response, conn.request("GET", "/rest/hello").status == 200


# -- Host (RFC 9112 3.2) -------------------------------------------------------------------------
INVALID_HOSTS = [
    "user@127.0.0.1",
    "user:pw@127.0.0.1:8080",
    "127.0.0.1/rest",
    "127.0.0.1?x",
    "",
    "a.example.com, b.example.com",
    "a.example.com,b.example.com",
    "127.0.0.1:99999",
    "127.0.0.1:80x",
    ":8080",
    "[::1",
    "[::g]",
    "caf\xe9.example",
]


@pytest.mark.parametrize(
    ("version", "host"),
    [*(("HTTP/1.1", host) for host in INVALID_HOSTS), ("HTTP/1.0", "u@h")],
    ids=repr,
)
def test_an_invalid_host_is_400_and_close(port: int, version: str, host: str) -> None:
    data = request_bytes("GET", "/rest/headers", version=version, host=host)
    response, serves = raw_request(port, data)
    assert response.status_line == "HTTP/1.1 400 Bad Request", (host, response.body)
    assert response.json()["detailedMessage"] == (
        "the Host header must be host[:port] and nothing else"
    )
    assert response.header("connection") == "close"
    assert not serves


@pytest.mark.parametrize(
    ("target", "host"),
    [
        ("http://user@127.0.0.1/rest/url", "127.0.0.1"),
        ("http:///rest/url", "127.0.0.1"),
        ("HTTP://a.example,b.example/rest/url", "127.0.0.1"),
    ],
)
def test_an_absolute_form_target_with_a_bad_authority_is_400(
    port: int, target: str, host: str
) -> None:
    response, serves = raw_request(port, request_bytes("GET", target, host=host))
    assert response.status == 400, response.body
    assert "authority" in response.json()["detailedMessage"]
    assert not serves


def test_the_absolute_form_targets_authority_is_the_host(port: int) -> None:
    # RFC 9112 3.2.2: the target's authority wins over Host, for everything that reads it
    data = request_bytes("GET", "http://localhost:8123/rest/url?a=1", host="127.0.0.1")
    response, _ = raw_request(port, data)
    assert response.status == 200, response.body
    assert response.json() == {
        "url": "http://localhost:8123/rest/url?a=1",
        "host": "localhost:8123",
    }


def test_an_http10_absolute_form_without_host_gets_the_authority(port: int) -> None:
    data = b"GET http://localhost:8124/rest/url HTTP/1.0\r\n\r\n"
    response, _ = raw_request(port, data)
    assert response.status == 200, response.body
    assert response.json()["host"] == "localhost:8124"


# -- header names with "_" -----------------------------------------------------------------------
def test_header_names_with_an_underscore_are_dropped(port: int) -> None:
    headers = [("Content_Length", "5"), ("X_Api_Key", "k"), ("Transfer_Encoding", "x")]
    data = request_bytes("GET", "/rest/headers", [*headers, ("X-Api-Key", "dash")])
    response, serves = raw_request(port, data)
    assert response.status == 200, response.body
    seen = response.json()
    assert seen["x-api-key"] == "dash"
    assert not [name for name in seen if "_" in name], seen
    assert serves


# -- OPTIONS (RFC 9110 9.3.7) --------------------------------------------------------------------
@pytest.mark.parametrize("which", ["open", "basic"])
def test_options_asterisk_answers_the_servers_methods(
    port: int, basic_port: int, which: str
) -> None:
    # the server in general: no resource, so no authorization either
    target_port = port if which == "open" else basic_port
    with RawConnection(target_port) as conn:
        response = conn.request("OPTIONS", "*")
        assert response.status_line == "HTTP/1.1 200 OK", response.body
        assert response.header("allow") == SERVER_ALLOW
        assert response.header("content-length") == "0"
        assert response.body == b""
        assert conn.request("GET", "/rest/nowhere").status in (401, 404)  # it serves on


def test_options_on_a_route_answers_its_methods(port: int) -> None:
    with RawConnection(port) as conn:
        response = conn.request("OPTIONS", "/rest/hello")
        assert response.status_line == "HTTP/1.1 200 OK", response.body
        assert response.header("allow") == "GET, HEAD, OPTIONS"
        assert response.header("content-length") == "0"
        params = conn.request("OPTIONS", "/rest/items/7")
        assert params.status == 200
        assert params.header("allow") == "GET, HEAD, OPTIONS"
        assert conn.request("OPTIONS", "/rest/nowhere").status == 404
        # the connection serves on
        assert conn.request("GET", "/rest/hello").status == 200


def test_options_on_a_protected_port_needs_credentials(basic_port: int) -> None:
    with RawConnection(basic_port) as conn:
        refused = conn.request("OPTIONS", "/rest/echo")
        assert refused.status == 401
        granted = conn.request("OPTIONS", "/rest/echo", headers=GOOD)
        assert granted.status == 200, granted.body
        assert granted.header("allow") == "OPTIONS, POST"


# -- reason phrases ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "line"),
    [
        (206, "HTTP/1.1 206 Partial Content"),
        (416, "HTTP/1.1 416 Range Not Satisfiable"),
        (418, "HTTP/1.1 418 I'm a Teapot"),
        (451, "HTTP/1.1 451 Unavailable For Legal Reasons"),
        (503, "HTTP/1.1 503 Service Unavailable"),  # OnSelect's -2 (test_hooks_calls.py)
        (299, "HTTP/1.1 299 "),  # a status Python does not know: no phrase (RFC 9112 4)
    ],
)
def test_every_status_has_its_reason_phrase(port: int, status: int, line: str) -> None:
    response, _ = raw_request(port, request_bytes("GET", f"/rest/status/{status}"))
    assert response.head.split(b"\r\n", 1)[0] == line.encode()
