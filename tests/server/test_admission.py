"""SPEC 7.1: ``100 Continue`` only after authorization passed. Without or with wrong credentials the
401/403 is the first answer and the body is never read; with good ones or on a public path, ``100
Continue`` then the answer."""

from __future__ import annotations

import base64
import select
import time
from collections.abc import Iterator

import pytest

from tests.conftest import APP_SOURCE, ServerProcess, free_config, free_port, local_port, serving
from tests.server.rawhttp import RawConnection, request_bytes
from tests.server.support import port_of

APP = (
    APP_SOURCE
    + """

def on_auth(user, password):
    return user == "ada" and password == "pw"
"""
)
GOOD = [("Authorization", "Basic " + base64.b64encode(b"ada:pw").decode())]
WRONG = [("Authorization", "Basic " + base64.b64encode(b"ada:nope").decode())]
EXPECT = [("Expect", "100-continue"), ("Content-Length", "5")]
BASIC = {"Authorization": {"scheme": "basic", "OnAuth": "app.on_auth", "maxFailures": 1000}}
PUBLIC = {**BASIC, "NativeRoutes": {"public": ["healthcheck/ok"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The service; the monitor's port (picked as it starts) is ``ports["APP_MONITOR"]``."""
    monitor = {"Enable": 1, "HostName": "127.0.0.1", "Port": free_port(), "ApiPath": "/api"}
    servers = {"HTTP_BASIC": local_port(FwData=PUBLIC)}
    extra = {"APP_MONITOR": {**monitor, "FwData": BASIC}}
    config = free_config(
        tmp_path_factory.mktemp("admission"), servers=servers, app=APP, extra=extra
    )
    with serving(config) as proc:
        proc.ports["APP_MONITOR"] = monitor["Port"]
        yield proc


port = port_of("HTTP_BASIC")


def assert_refused_before_the_body(conn: RawConnection, status: int) -> None:
    """The refusal first (no interim 100), then the connection closes unread."""
    response = conn.read_response()
    assert response.status == status, response.head
    assert response.header("connection") == "close"
    if status == 401:
        assert (response.header("www-authenticate") or "").startswith("Basic")
    assert conn.closed_by_server(), f"open after the refusal: {conn.buffer[:200]!r}"
    conn.send(b"hello")  # too late: nothing answers it
    assert conn.read_all() == b""


@pytest.mark.parametrize(
    ("path", "credentials", "status"),
    [("/rest/echo", [], 401), ("/rest/echo", WRONG, 403), ("/rest/no/such/route", [], 401)],
    ids=["none", "wrong", "unknown-path"],  # authorization runs before routing: 401, not 404
)
def test_no_continue_before_a_refusal(
    port: int, path: str, credentials: list[tuple[str, str]], status: int
) -> None:
    with RawConnection(port) as conn:
        conn.send(request_bytes("POST", path, [*credentials, *EXPECT]))
        assert_refused_before_the_body(conn, status)


def test_continue_after_good_credentials(port: int) -> None:
    with RawConnection(port) as conn:
        conn.send(request_bytes("POST", "/rest/echo", [*GOOD, *EXPECT]))
        interim = conn.read_response()
        assert interim.head == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.send(b"hello")
        response = conn.read_response()
        assert response.status == 200, response.head
        assert response.json()["body"] == "hello"
        assert response.header("connection") is None
        assert conn.request("GET", "/rest/hello", headers=GOOD).status == 200  # serves on


def test_continue_on_a_public_path(port: int) -> None:
    with RawConnection(port) as conn:
        conn.send(request_bytes("GET", "/rest/fw/healthcheck/ok", EXPECT))
        assert conn.read_response().head == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.send(b"hello")
        response = conn.read_response()
        assert response.status == 200, response.head


def test_expect_without_a_body_is_an_ordinary_request(port: int) -> None:
    """No body to hold back: no admission, the ordinary 401, and the connection serves on."""
    with RawConnection(port) as conn:
        response = conn.request("GET", "/rest/hello", headers=[("Expect", "100-continue")])
        assert response.status == 401
        assert response.header("connection") is None
        assert conn.request("GET", "/rest/hello", headers=GOOD).status == 200


def test_continue_comes_after_the_answers_before_it(port: int) -> None:
    """Behind a slow pipelined request, the interim answer comes after the slow one's answer."""
    with RawConnection(port) as conn:
        conn.send(
            request_bytes("GET", "/rest/asleep/150", GOOD)
            + request_bytes("POST", "/rest/echo", [*GOOD, *EXPECT])
        )
        first = conn.read_response()
        assert first.status == 200 and first.json() == {"slept": 150}
        assert conn.read_response().head == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.send(b"hello")
        assert conn.read_response().json()["body"] == "hello"


def test_the_body_waits_for_the_verdict(port: int) -> None:
    """Nothing is answered while the client waits with its body, until it sends it."""
    with RawConnection(port) as conn:
        conn.send(request_bytes("POST", "/rest/echo", [*GOOD, *EXPECT]))
        assert conn.read_response().status == 100
        time.sleep(0.1)
        assert not select.select([conn.sock], [], [], 0)[0]
        conn.send(b"hello")
        assert conn.read_response().json()["body"] == "hello"


@pytest.mark.parametrize("expectation", ["100-continue", "something-else"])
def test_an_http_1_0_expect_is_ignored(port: int, expectation: str) -> None:
    """RFC 9110 10.1.1 and 15.2: no 1xx to HTTP/1.0, nor a 417: its ``Expect`` is ignored."""
    headers = [*GOOD, ("Expect", expectation), ("Content-Length", "5")]
    with RawConnection(port) as conn:
        conn.send(request_bytes("POST", "/rest/echo", headers, version="HTTP/1.0"))
        time.sleep(0.3)  # a client that waits for a 100 it must not get
        conn.send(b"hello")
        response = conn.read_response()
        assert response.status == 200, response.head
        assert response.json()["body"] == "hello"


@pytest.mark.parametrize(
    ("credentials", "status"), [([], 401), (WRONG, 403), (GOOD, 100)], ids=["none", "wrong", "good"]
)
def test_monitor_port(
    server: ServerProcess, credentials: list[tuple[str, str]], status: int
) -> None:
    with RawConnection(server.ports["APP_MONITOR"]) as conn:
        conn.send(request_bytes("POST", "/api/server/metrics", [*credentials, *EXPECT]))
        if status != 100:
            assert_refused_before_the_body(conn, status)
            return
        assert conn.read_response().head == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.send(b"hello")
        assert conn.read_response().status == 405  # the monitor answers GET only
