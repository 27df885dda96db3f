"""HTTPS ports over real TLS (trustme) beside a plain port. ``HTTPS_REST`` keeps default deadlines
(a worker descheduled for a second by make test's nice 10 part must not close a request);
``HTTPS_QUICK`` shortens the handshake deadline to 400 ms (SPEC 9)."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from tests.conftest import ServerProcess, free_config, issue_certs, local_port, serving, tls_server
from tests.server.rawhttp import RawConnection, request_bytes

HANDSHAKE_MS = 400


@pytest.fixture(scope="module")
def tls_files(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return issue_certs(ca, tmp_path_factory.mktemp("tls-certs"))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, tls_files: dict[str, Path]
) -> Iterator[ServerProcess]:
    quick = tls_server(tls_files, TlsHandshakeTimeout=HANDSHAKE_MS)
    servers = {"HTTP_REST": local_port(), "HTTPS_REST": tls_server(tls_files), "HTTPS_QUICK": quick}
    with serving(free_config(tmp_path_factory.mktemp("tls"), servers=servers)) as proc:
        yield proc


@pytest.fixture
def client_ctx(tls_files: dict[str, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(tls_files["ca"]))


def test_https_port_answers_over_verified_tls(
    server: ServerProcess, client_ctx: ssl.SSLContext
) -> None:
    url = server.url("HTTPS_REST")
    assert url.startswith("https://127.0.0.1:")
    with httpx.Client(verify=client_ctx) as client:
        response = client.get(f"{url}/hello")
        assert response.status_code == 200 and response.json()["hello"] == "world"
        assert response.http_version == "HTTP/1.1"
        # the same TLS connection carries a second request
        again = client.get(f"{url}/items/42")
        assert again.status_code == 200 and again.json() == {"id": "42"}


def test_https_errors_have_the_spec_body(server: ServerProcess, client_ctx: ssl.SSLContext) -> None:
    response = httpx.get(f"{server.url('HTTPS_REST')}/nope", verify=client_ctx)
    assert response.status_code == 404
    assert response.json() == {"code": 404, "detailedMessage": "", "message": "Not Found"}


def test_client_without_the_ca_refuses_the_certificate(server: ServerProcess) -> None:
    """Real TLS: a client trusting only the system store refuses the test CA's certificate."""
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url('HTTPS_REST')}/hello", verify=ssl.create_default_context())


def test_raw_tls_connection_speaks_http11(
    server: ServerProcess, client_ctx: ssl.SSLContext
) -> None:
    with RawConnection(server.ports["HTTPS_REST"], tls=client_ctx) as conn:
        assert isinstance(conn.sock, ssl.SSLSocket)
        assert conn.sock.version() in ("TLSv1.2", "TLSv1.3")
        response = conn.request("GET", "/rest/items/7", headers=[("Connection", "close")])
        assert response.status_line == "HTTP/1.1 200 OK"
        assert response.json() == {"id": "7"}
        assert response.header("connection") == "close"
        assert conn.closed_by_server()


def test_plain_http_on_the_tls_port_gets_no_http_answer(server: ServerProcess) -> None:
    with RawConnection(server.ports["HTTPS_REST"]) as conn:
        conn.send(request_bytes("GET", "/rest/hello"))
        data = conn.read_all()  # the server ends the connection (hang guard applies)
        print(f"plain HTTP on the TLS port got {len(data)} bytes back: {data[:40]!r}")
        assert not data.startswith(b"HTTP/")
        assert b"hello" not in data


def test_http_and_https_ports_of_one_service_both_serve(
    server: ServerProcess, client_ctx: ssl.SSLContext
) -> None:
    plain = httpx.get(f"{server.url('HTTP_REST')}/hello")
    secure = httpx.get(f"{server.url('HTTPS_REST')}/hello", verify=client_ctx)
    assert server.url("HTTP_REST").startswith("http://")
    assert plain.status_code == secure.status_code == 200
    assert plain.json() == secure.json()  # the same worker process serves both ports
    assert server.ports["HTTP_REST"] != server.ports["HTTPS_REST"]


@pytest.mark.parametrize("sent", ["nothing", "half-a-client-hello"])
def test_a_tls_client_that_stalls_is_closed_at_the_handshake_deadline(
    server: ServerProcess, sent: str
) -> None:
    """``TlsHandshakeTimeout`` (400 ms here, HeaderTimeout left at 10 s) closes a connection that
    sends nothing, or half a ClientHello then silence; nothing is served."""
    hello = b""
    if sent == "half-a-client-hello":
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
        with pytest.raises(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = outgoing.read()
        assert len(hello) > 20
    started = time.monotonic()  # before the connection: the deadline cannot start earlier
    with RawConnection(server.ports["HTTPS_QUICK"]) as conn:
        conn.send(hello[: len(hello) // 2])
        data = conn.read_all()  # until the server closes (a reset too; hang guard applies)
    elapsed = time.monotonic() - started
    print(
        f"TLS handshake timeout {HANDSHAKE_MS} ms, {sent} sent: closed after {elapsed * 1000:.0f} ms"
    )
    assert not data.startswith(b"HTTP/"), data
    if not hello:
        assert data == b""
    assert elapsed >= HANDSHAKE_MS / 1000 * 0.9, "closed before the handshake deadline"


def test_plain_port_still_serves_while_tls_clients_stall(server: ServerProcess) -> None:
    # TCP connections to the TLS port with the short handshake deadline, no handshake begun
    stalled = [RawConnection(server.ports["HTTPS_QUICK"]) for _ in range(5)]
    try:
        response = httpx.get(f"{server.url('HTTP_REST')}/hello")
        assert response.status_code == 200
        assert response.json()["hello"] == "world"
    finally:
        for conn in stalled:
            conn.close()
