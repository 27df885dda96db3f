"""SPEC 11.3's connection-dependent REST methods: on ``fwrest serve`` with raw sockets,
``setCloseAfterSend`` (``Connection: close``, then the end); in process, ``getClientIP`` behind a
trusted proxy and ``getThreadPoolSsl``/``getThreadPoolPort``. ``HTTP_REST`` trusts 127.0.0.1, ``PLAIN`` none,
``HTTPS_REST`` speaks TLS."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trustme

from fwrest.testing import Client
from tests.builders import own_ports
from tests.conftest import (
    ServerProcess,
    exchange,
    free_config,
    issue_certs,
    local_port,
    module_config,
    serving,
    tls_server,
)
from tests.native.support import in_process_ports

APP = """
from fwrest import get, rest

@get("/hello")
def hello():
    return {"hello": "world"}

@get("/ip")
async def ip():
    return {"ip": rest.getClientIP()}

@get("/close")
def close():
    rest.setCloseAfterSend()
    return {"closing": True}

@get("/close/boom")
async def close_boom():
    rest.setCloseAfterSend()
    raise RuntimeError("after asking to close")

@get("/close/stream")
def close_stream():
    rest.setCloseAfterSend()

    def pieces():
        yield "one,"
        yield "two"

    return pieces()

@get("/pool")
def pool():
    return {"ssl": rest.getThreadPoolSsl(), "port": rest.getThreadPoolPort(),
            "name": rest.getThreadPoolName(), "url": rest.getFullURLRequest()}
"""


SERVERS = {"HTTP_REST": local_port(TrustedProxies="127.0.0.1"), "PLAIN": local_port()}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = free_config(tmp_path_factory.mktemp("rest_connection"), app=APP, servers=SERVERS)
    with serving(config) as proc:
        yield proc


@pytest.fixture(scope="module")
def ports(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Client]]:
    """In-process clients of the three ports, each numbered (unbound, but in the answers)."""
    folder = tmp_path_factory.mktemp("rest_connection_inproc")
    certs = issue_certs(ca, folder / "certs")
    servers = own_ports({**SERVERS, "HTTPS_REST": tls_server(certs)})
    config = module_config(folder, "rest_connection_app", app=APP, servers=servers)
    with in_process_ports(config, servers) as clients:
        yield clients


GET = b"GET /rest/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def _split(raw: bytes) -> list[bytes]:
    """The answers in ``raw``, each from its status line on."""
    return [b"HTTP/1.1 " + part for part in raw.split(b"HTTP/1.1 ")[1:]]


def test_close_after_send_ends_the_connection_after_its_answer(service: ServerProcess) -> None:
    port = service.ports["HTTP_REST"]
    # pipelined: the first asks to close, the second is never answered (read to the close)
    answers = _split(exchange(port, GET % b"close" + GET % b"hello"))
    assert len(answers) == 1, answers
    head, _, body = answers[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"\r\nconnection: close" in head.lower()
    assert body == b'{"closing":true}'
    # the control: without it, both are answered on the one connection
    last = b"GET /rest/hello HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    answers = _split(exchange(port, GET % b"hello" + last))
    assert len(answers) == 2, answers
    assert b"connection:" not in answers[0].lower()


def test_close_after_send_on_an_http10_keep_alive_connection(service: ServerProcess) -> None:
    raw = exchange(
        service.ports["HTTP_REST"],
        b"GET /rest/close HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
        b"GET /rest/hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    )
    answers = _split(raw)
    assert len(answers) == 1, answers
    assert b"\r\nconnection: close" in answers[0].lower()
    assert b"keep-alive" not in answers[0].lower()


def test_close_after_send_holds_for_the_error_answer_and_a_stream(service: ServerProcess) -> None:
    port = service.ports["HTTP_REST"]
    answers = _split(exchange(port, GET % b"close/boom" + GET % b"hello"))
    assert len(answers) == 1, answers
    assert answers[0].startswith(b"HTTP/1.1 500 ")
    assert b"\r\nconnection: close" in answers[0].lower()
    assert answers[0].endswith(
        b'{"code":500,"detailedMessage":"","message":"Internal Server Error"}'
    )
    answers = _split(exchange(port, GET % b"close/stream" + GET % b"hello"))
    assert len(answers) == 1, answers
    head, _, body = answers[0].partition(b"\r\n\r\n")
    assert b"\r\nconnection: close" in head.lower()
    assert b"transfer-encoding: chunked" in head.lower()
    assert body == b"4\r\none,\r\n3\r\ntwo\r\n0\r\n\r\n"


@pytest.mark.parametrize(
    ("forwarded", "client"),
    [
        (None, "127.0.0.1"),  # from the proxy itself
        ("203.0.113.9", "203.0.113.9"),
        ("198.51.100.7, 203.0.113.9", "203.0.113.9"),  # the left one could be forged
        ("203.0.113.9, 127.0.0.1", "203.0.113.9"),  # a chain of trusted proxies
        ("2001:db8::1", "2001:db8::1"),
        ("not-an-address", "127.0.0.1"),
    ],
)
def test_client_ip_behind_a_trusted_proxy(
    ports: dict[str, Client], forwarded: str | None, client: str
) -> None:
    headers = {"X-Forwarded-For": forwarded} if forwarded is not None else {}
    assert ports["HTTP_REST"].get("/ip", headers=headers).json() == {"ip": client}
    # a port that trusts no proxy takes the peer's address, whatever the header says
    assert ports["PLAIN"].get("/ip", headers=headers).json() == {"ip": "127.0.0.1"}


@pytest.mark.parametrize(("name", "scheme"), [("HTTPS_REST", "https"), ("PLAIN", "http")])
def test_pool_ssl_and_port_of_a_port(ports: dict[str, Client], name: str, scheme: str) -> None:
    port = ports[name].base_url.port
    assert ports[name].get("/pool").json() == {
        "ssl": scheme == "https",
        "port": port,
        "name": "POOL",
        "url": f"{scheme}://127.0.0.1:{port}/rest/pool",
    }
