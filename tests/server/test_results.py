"""What a handler returns, as a client receives it (SPEC 3, 9): ordinary Python data that
orjson alone refuses, statuses without content, ``setResponse`` of a dict, and ``async def``
handlers behind decorators. A real server over loopback; raw sockets where the bytes on the
wire matter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ServerProcess, free_config
from tests.server.rawhttp import RawConnection, request_bytes

APP = """
import asyncio
import functools

from fwrest import Response, get, rest


@get("/intkeys")
def intkeys():
    return {1: "a", 2: "b"}


@get("/bigint")
async def bigint():
    return {"n": 2**70, "items": [2**64, -(2**65)]}


@get("/bigint-list")
def bigint_list():
    return [2**70]


@get("/notjson")
def notjson():
    return {"o": object()}


@get("/nocontent")
def nocontent():
    rest.setStatusCode(204)
    return {"x": 1}


@get("/notmodified")
async def notmodified():
    return Response({"x": 1}, status=304, headers={"ETag": '"v1"'})


@get("/interim")
def interim():
    rest.setStatusCode(101)
    return {"x": 1}


@get("/setresponse")
def setresponse():
    rest.setResponse({"a": 1, "b": [True, None]})


def logged(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


@get("/wrapped/:id")
@logged
async def wrapped(id):
    await asyncio.sleep(0)
    return {"id": id, "loop": asyncio.get_running_loop() is not None}


@get("/hello")
def hello():
    return {"hello": "world"}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("results")
    servers = {"HTTP_REST": {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT"}}
    proc = ServerProcess(free_config(tmp, app=APP, servers=servers)).wait_ready()
    yield proc
    proc.stop()


@pytest.fixture
def base(server: ServerProcess) -> str:
    return f"http://127.0.0.1:{server.ports['HTTP_REST']}/rest"


def test_a_dict_with_number_keys_is_json_with_string_keys(base: str) -> None:
    r = httpx.get(f"{base}/intkeys")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"1": "a", "2": "b"}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/bigint", {"n": 2**70, "items": [2**64, -(2**65)]}),
        ("/bigint-list", [2**70]),
    ],
)
def test_integers_beyond_64_bits_are_sent_exactly(base: str, path: str, expected: object) -> None:
    r = httpx.get(base + path)
    assert r.status_code == 200, r.text
    assert r.json() == expected  # Python's json reads big integers exactly


def test_data_that_is_not_json_is_500_and_logged(server: ServerProcess, base: str) -> None:
    r = httpx.get(f"{base}/notjson")
    assert r.status_code == 500
    assert r.json()["code"] == 500
    assert "object" not in r.text  # the reason goes to the log, not to the client
    server.wait_log("a handler returned data that is not JSON")


@pytest.mark.parametrize(("path", "status"), [("/nocontent", 204), ("/notmodified", 304)])
def test_a_status_without_content_sends_no_body_and_keeps_the_connection(
    server: ServerProcess, path: str, status: int
) -> None:
    port = server.ports["HTTP_REST"]
    with RawConnection(port) as conn:
        # pipelined: a body after the 204/304 would be read as the next response
        conn.send(request_bytes("GET", "/rest" + path) + request_bytes("GET", "/rest/hello"))
        first = conn.read_response()
        assert first.status == status, first.head
        assert first.header("content-length") is None, first.head
        second = conn.read_response()
        assert second.status_line == "HTTP/1.1 200 OK", (first.head, second.head, conn.buffer)
        assert second.json() == {"hello": "world"}
    # HEAD: no body and no length either (RFC 9110 8.6: none on 204 and 304)
    with RawConnection(port) as conn:
        head = conn.request("HEAD", "/rest" + path)
        assert head.status == status and head.header("content-length") is None, head.head
        assert conn.request("GET", "/rest/hello").json() == {"hello": "world"}
    # and a client library reusing its connection sees the same
    with httpx.Client() as client:
        assert client.get(f"http://127.0.0.1:{port}/rest{path}").status_code == status
        assert client.get(f"http://127.0.0.1:{port}/rest/hello").json() == {"hello": "world"}


def test_an_interim_status_is_refused_as_a_handler_error(base: str) -> None:
    r = httpx.get(f"{base}/interim")
    assert r.status_code == 500
    assert r.json()["code"] == 500


def test_set_response_with_a_dict_sends_its_json(base: str) -> None:
    r = httpx.get(f"{base}/setresponse")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"a": 1, "b": [True, None]}


def test_an_async_handler_behind_a_decorator_runs_on_the_loop(base: str) -> None:
    r = httpx.get(f"{base}/wrapped/42")
    assert r.status_code == 200, r.text
    assert r.json() == {"id": "42", "loop": True}
