"""SPEC 7.1: a pipelining client that does not read holds at most 64 KiB of answers in the worker,
and a connection whose answers cannot be written for ``BodyTimeout`` (shortened to 1 s, SPEC 9) is
closed. Clients have small receive buffers, so that what the worker holds shows (its RSS, the bytes
it reports on giving up)."""

from __future__ import annotations

import contextlib
import re
import select
import socket
import ssl
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import psutil
import pytest
import trustme

from tests.conftest import APP_SOURCE, ServerProcess, free_config, issue_certs, local_port
from tests.server.rawhttp import HANG_GUARD, RawConnection, request_bytes
from tests.server.support import port_of

WRITE_TIMEOUT_MS = 1000  # BodyTimeout: also the deadline of answers nobody reads
# BodyTimeout where clients must be served: seconds over the pause a loaded machine stretches
PAUSED_TIMEOUT_MS = 6000
PAUSE_S = 2.0  # how long the client that pauses reads nothing once its sends stalled
HELD_LIMIT = 65536  # the answers a worker holds for one connection (SPEC 7.1)
PAD = 2000  # each answer carries this many bytes, about 2.1 KB on the wire
TOTAL = 50_000  # requests the client that never reads tries to send
APP = (
    APP_SOURCE
    + f"""

@get("/big/:i")
def big(i):
    return {{"i": i, "pad": "x" * {PAD}}}
"""
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA) -> dict[str, Path]:
    return issue_certs(ca, tmp_path_factory.mktemp("backpressure-certs"))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path]
) -> Iterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("backpressure")
    port = local_port(BodyTimeout=WRITE_TIMEOUT_MS)
    tls = {**port, "SslCertificate": str(certs["cert"]), "SslCertificateKey": str(certs["key"])}
    servers = {
        "HTTP_REST": port,
        "HTTPS_REST": tls,
        # KeepAliveTimeout runs from the last answer handed on while MBs are still in the kernel for
        # the client: a loaded client took longer than the default to read them
        "HTTP_PAUSED": local_port(BodyTimeout=PAUSED_TIMEOUT_MS, KeepAliveTimeout=60000),
    }
    proc = ServerProcess(free_config(tmp, servers=servers, app=APP)).wait_ready()
    yield proc
    proc.stop()


port = port_of("HTTP_REST")
paused_port = port_of("HTTP_PAUSED", "paused_port")


@pytest.fixture(scope="module")
def worker(server: ServerProcess) -> psutil.Process:
    with RawConnection(server.ports["HTTP_REST"]) as conn:
        return psutil.Process(conn.request("GET", "/rest/hello").json()["pid"])


def small_window_socket(port: int) -> socket.socket:
    """Small receive buffer set before connecting (small window): answers pile up in the server."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(HANG_GUARD)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


def _seconds(stamp: str) -> float:
    """A log line's time (``2026-11-25T19:40:49.630Z``) in seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _kernel_send_buffer_max() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    except (OSError, ValueError, IndexError):
        return 4 * 2**20  # Linux's usual maximum


def pipeline(count: int, start: int = 0) -> bytes:
    return b"".join(request_bytes("GET", f"/rest/big/{i}") for i in range(start, start + count))


def send_until_stalled(sock: socket.socket, data: bytes, piece: int = 65536) -> int:
    """Send ``data`` until the server stops reading it (no room for 0.3 s); the bytes sent."""
    sent, started = 0, time.monotonic()
    while sent < len(data) and select.select([], [sock], [], 0.3)[1]:
        assert time.monotonic() - started < HANG_GUARD, "hang guard while sending"
        try:
            sent += sock.send(data[sent : sent + piece])
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            time.sleep(0.01)
    return sent


def read_every_answer(
    sock: socket.socket, data: bytes, sent: int, count: int, reading_first: bool
) -> float:
    """Send the rest of ``data`` (``sent`` sent) and read :func:`pipeline`'s ``count`` answers in
    order (``reading_first``: read when there, else only when sends block); when the first read
    came."""
    received = bytearray()
    first_read = 0.0
    started = time.monotonic()
    while received.count(b"HTTP/1.1 200 OK") < count or not received.endswith(b'"}'):
        assert time.monotonic() - started < 60, "hang guard"
        writers = [sock] if sent < len(data) else []
        readable, writable, _ = select.select([sock], writers, [], HANG_GUARD)
        assert readable or writable, "hang guard"
        if readable and (reading_first or not writable):
            chunk = sock.recv(65536)
            first_read = first_read or time.monotonic()
            assert chunk, f"closed after {received.count(b'HTTP/1.1 200 OK')} answers"
            received += chunk
        if writable:
            with contextlib.suppress(BlockingIOError):
                sent += sock.send(data[sent : sent + 65536])
    ids = re.findall(rb'"i":"(\d+)"', bytes(received))
    assert ids == [str(i).encode() for i in range(count)]
    return first_read


def test_a_pipelining_client_that_never_reads_is_bounded_then_closed(
    server: ServerProcess, port: int, worker: psutil.Process
) -> None:
    """50,000 pipelined requests (105 MB of answers), none read: the worker stops at 64 KiB held and
    closes after ``BodyTimeout`` (it held every answer); the kernel's buffers take a few MB."""
    with RawConnection(port) as conn:  # warm the route, then measure
        for i in range(50):
            response = conn.request("GET", f"/rest/big/{i}")
            assert response.status == 200
    answer_size = len(response.head) + len(response.body)
    rss_before = worker.memory_info().rss
    since = len(server.log())
    data = pipeline(TOTAL)
    sock = small_window_socket(port)
    try:
        sent = send_until_stalled(sock, data)
        stalled = time.monotonic()
        peak = rss_before
        line = None
        while line is None and time.monotonic() - stalled < WRITE_TIMEOUT_MS / 1000 + HANG_GUARD:
            peak = max(peak, worker.memory_info().rss)
            line = re.search(
                r"read none of (\d+) answer bytes within (\d+) ms; closing", server.log()[since:]
            )
            time.sleep(0.05)
        assert line is not None, f"the connection was not closed:\n{server.log()[since:][-2000:]}"
        held = int(line[1])
        # the client's side: the answers the kernel kept for it, then the end of the stream
        received = b""
        sock.setblocking(True)
        sock.settimeout(HANG_GUARD)
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    finally:
        sock.close()
    answers = received.count(b"HTTP/1.1 200 OK")
    log = server.log()[since:]
    answered = len(re.findall(r"GET /rest/big/\d+ 200", log))
    # the time without progress, by the log's clock: the last answer made, then the close
    last_answer = re.findall(r"^(\S+) INFO fwrest.access .*GET /rest/big/\d+ 200", log, re.M)[-1]
    closing = re.search(r"^(\S+) INFO fwrest.server .*read none of", log, re.M)
    assert closing is not None
    closed_after = _seconds(closing[1]) - _seconds(last_answer)
    growth = peak - rss_before
    print(
        f"\nthe client sent {sent} bytes of {len(data)} ({TOTAL} requests) before its sends "
        f"stalled; the worker answered {answered} requests and held {held} answer bytes "
        f"when it closed the connection, {closed_after:.3f} s after its last answer "
        f"(BodyTimeout {WRITE_TIMEOUT_MS} ms); the client's kernel had {answers} answers for it; worker "
        f"RSS {rss_before / 2**20:.1f} MiB, peak +{growth / 2**10:.0f} KiB"
    )
    assert HELD_LIMIT <= held < HELD_LIMIT + PAD + 1024  # paused above 64 KiB: one answer over
    # (the log's clock counts milliseconds, and the access line precedes the answer's write)
    assert WRITE_TIMEOUT_MS / 1000 - 0.01 <= closed_after < WRITE_TIMEOUT_MS / 1000 + HANG_GUARD
    # beyond the worker's 64 KiB: the largest server send buffer, the client's receive buffer
    kernel = _kernel_send_buffer_max() + 65536
    assert answered <= (kernel + held) // answer_size + 1, f"{answered} answers made"
    assert growth < 8 * 2**20, f"the worker grew {growth} bytes"
    with RawConnection(port) as conn:  # the worker serves on
        assert conn.request("GET", "/rest/hello").status == 200


def test_a_tls_client_that_never_reads_is_bounded_then_closed(
    server: ServerProcess, certs: dict[str, Path]
) -> None:
    """The same over TLS: the TLS transport's own buffer of answers is what is bounded."""
    since = len(server.log())
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    raw = small_window_socket(server.ports["HTTPS_REST"])
    raw.setblocking(True)
    sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
    sock.setblocking(False)
    try:
        send_until_stalled(sock, pipeline(20_000), 16384)
        line = server.wait_log("answer bytes within", timeout=HANG_GUARD, since=since)
    finally:
        sock.close()
    found = re.search(r"read none of (\d+) answer bytes within", line)
    assert found is not None
    held = int(found[1])
    answered = len(re.findall(r"GET /rest/big/\d+ 200", line))
    print(f"\nTLS: the worker answered {answered} requests and held {held} answer bytes")
    assert HELD_LIMIT <= held < HELD_LIMIT + 2 * (PAD + 1024)  # plus one TLS record's framing


def test_a_client_that_stops_reading_for_less_than_body_timeout_is_served(
    server: ServerProcess, paused_port: int
) -> None:
    """A pause longer than the other port's ``BodyTimeout`` but under its own: the worker paused,
    resumed, and every answer comes in order on the same connection."""
    count = 3000  # about 6.3 MB of answers: more than the kernel's buffers take
    data = pipeline(count)
    since = len(server.log())
    sock = small_window_socket(paused_port)
    sent = send_until_stalled(sock, data)
    stalled = time.monotonic()
    time.sleep(PAUSE_S)  # the worker is paused by now, and waits
    try:
        first_read = read_every_answer(sock, data, sent, count, reading_first=True)
        sock.setblocking(True)
        sock.sendall(request_bytes("GET", "/rest/big/last"))  # and the connection serves on
        sock.settimeout(HANG_GUARD)
        tail = b""
        while not tail.endswith(b'"}'):
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            tail += chunk
    finally:
        sock.close()
    assert b'"i":"last"' in tail
    assert "answer bytes within" not in server.log()[since:]
    print(
        f"\n{count} answers after a pause of {(first_read - stalled) * 1000:.0f} ms once the "
        f"client's sends stalled (BodyTimeout {PAUSED_TIMEOUT_MS} ms), all in order"
    )


def test_pipelined_answers_stay_whole_and_in_order_through_pauses(paused_port: int) -> None:
    """3,000 pipelined requests read only when sending blocks: many pauses and resumes, every answer
    once and in order (the long ``BodyTimeout`` port: a descheduled client is not the subject)."""
    count = 3000
    data = pipeline(count)
    sock = small_window_socket(paused_port)
    started = time.monotonic()
    try:
        read_every_answer(sock, data, 0, count, reading_first=False)
    finally:
        sock.close()
    print(f"\n{count} pipelined answers in order in {time.monotonic() - started:.1f} s")
