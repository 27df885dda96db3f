"""SPEC 7 "request line + headers at most 16 KiB" and "header read deadline", over raw sockets: two
holes an audit found (``server/http.py``). The head limit counts raw bytes whichever read completes
the head, so spaces the parser strips are no way past ``MaxHeaderSize``; the first request's header
deadline runs from the connection's start (idling before the first byte earns no second
``HeaderTimeout``), a kept-alive request's from its own first byte. ``HTTP_SLOW`` has
``HeaderTimeout`` shortened to 1500 ms (SPEC 9)."""

from __future__ import annotations

import select
import time

import pytest

from tests.conftest import local_port
from tests.server.rawhttp import HANG_GUARD, RawConnection, request_bytes
from tests.server.support import assert_hello, port_of, serve_module

HEADER_LIMIT = 16384  # the default MaxHeaderSize
HEADER_DEADLINE_MS = 1500
KEEP_ALIVE_MS = 4000  # longer than the idle waits below: only the header deadline may fire
IDLE_S = 1.0  # what a client waits before its first byte
KEPT_IDLE_S = 2.0  # a kept-alive connection's idle wait: past the header deadline, under keep-alive
KEPT_TRICKLE_S = 0.5  # how long a kept-alive request's head takes: far under the header deadline
SLACK_S = 1.0  # how late a deadline may fire on this shared, noisy machine

SERVERS = {
    "HTTP_REST": local_port(),
    "HTTP_SLOW": local_port(HeaderTimeout=HEADER_DEADLINE_MS, KeepAliveTimeout=KEEP_ALIVE_MS),
}


server = serve_module("head_limits", servers=SERVERS)
port = port_of("HTTP_REST")
slow_port = port_of("HTTP_SLOW", "slow_port")


def assert_431_and_closed(conn: RawConnection) -> None:
    response = conn.read_response()
    assert response.status_line == "HTTP/1.1 431 Request Header Fields Too Large", response.head
    assert response.json()["code"] == 431
    assert response.header("connection") == "close", response.head
    assert conn.closed_by_server(), f"connection left open; then got {conn.buffer[:200]!r}"


# -- the head limit counts whitespace, whichever read completes the head ------------------------
def padded_head(total: int, start: bytes = b"GET /rest/hello", extra: bytes = b"") -> bytes:
    """``total`` bytes of head, nearly all spaces before ``X-Pad``'s value; ``extra`` first."""
    base = start + b" HTTP/1.1\r\nHost: x\r\n" + extra + b"X-Pad:a\r\n\r\n"
    data = base.replace(b"X-Pad:", b"X-Pad:" + b" " * (total - len(base)))
    assert len(data) == total
    return data


def send_in_writes(conn: RawConnection, data: bytes, cuts: tuple[int, ...]) -> None:
    """``data`` cut at ``cuts`` (negative: from the end), paused so the server reads them apart."""
    offsets = sorted(cut % len(data) for cut in cuts)
    start = 0
    for offset in [*offsets, len(data)]:
        assert conn.send(data[start:offset]), "the server closed before the head was sent"
        start = offset
        time.sleep(0.05)


# Cuts: all in one; padding and end of head after the request line; the padding split; the padding
# alone, then its last byte and the end of the head.
CUTS = {
    "one-write": (),
    "padding-with-the-end": (len(b"GET /rest/hello HTTP/1.1\r\nHost: x\r\n"),),
    "padding-split": (9000,),
    "padding-then-end": (40, -len(b" a\r\n\r\n")),
}


# ``X-Pad:`` + 22,000 spaces + ``a`` (parsed: tiny, raw: 22 KB), and a padded head one byte over
OVER = {
    "far-over": b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nX-Pad:" + b" " * 22000 + b"a\r\n\r\n",
    "one-byte-over": padded_head(HEADER_LIMIT + 1),
}


@pytest.mark.parametrize("data", list(OVER.values()), ids=list(OVER))
@pytest.mark.parametrize("cuts", list(CUTS.values()), ids=list(CUTS))
def test_head_padded_with_whitespace_over_the_limit_gets_431_and_close(
    port: int, cuts: tuple[int, ...], data: bytes
) -> None:
    with RawConnection(port) as conn:
        send_in_writes(conn, data, cuts)
        assert_431_and_closed(conn)


@pytest.mark.parametrize("cuts", list(CUTS.values()), ids=list(CUTS))
def test_head_padded_with_whitespace_at_the_limit_is_served(
    port: int, cuts: tuple[int, ...]
) -> None:
    with RawConnection(port) as conn:
        send_in_writes(conn, padded_head(HEADER_LIMIT), cuts)
        response = conn.read_response()
        assert_hello(response)
        assert response.header("connection") is None
        # and the connection stays usable
        assert_hello(conn.request("GET", "/rest/hello"))


@pytest.mark.parametrize("size", [HEADER_LIMIT - 100, HEADER_LIMIT - 1])
def test_head_padded_with_whitespace_just_under_the_limit_is_served(port: int, size: int) -> None:
    with RawConnection(port) as conn:
        send_in_writes(conn, padded_head(size), (9000,))
        assert_hello(conn.read_response())


def test_padded_head_with_a_body_in_the_same_write_is_measured_without_the_body(
    port: int,
) -> None:
    """A head at the limit followed in the same write by its body: only the head counts."""
    body = b"b" * 500
    head = padded_head(HEADER_LIMIT, b"POST /rest/echo", b"Content-Length: 500\r\n")
    with RawConnection(port) as conn:
        send_in_writes(conn, head + body, (100,))
        response = conn.read_response()
        assert response.status_line == "HTTP/1.1 200 OK", response.head
        assert response.json()["body"] == "b" * 500


# -- the header deadline: from the connection's start, then from each request's first byte -------
REQUEST_LINE = b"GET /rest/hello HTTP/1.1\r\n"
REST_OF_HEAD = request_bytes("GET", "/rest/hello", [("X-Slow", "s" * 30)])[len(REQUEST_LINE) :]


def _trickle(conn: RawConnection, data: bytes, until: float) -> bool:
    """``data`` evenly, its last byte at ``until``; False once the server answers or closes."""
    start = time.monotonic()
    step = max(0.0, until - start) / len(data)
    for index, byte in enumerate(data, 1):
        # each byte aims at its own time, so that late wake-ups on a loaded machine do not add up
        pause = max(0.0, start + index * step - time.monotonic())
        if select.select([conn.sock], [], [], pause)[0]:
            return False
        if not conn.send(bytes([byte])):
            return False
    return True


@pytest.mark.parametrize(
    ("kept_alive", "head_takes_s"),
    [(False, 2 * IDLE_S), (True, 3.0)],
    ids=["first-request-after-idling", "kept-alive-request"],
)
def test_trickling_headers_get_408_at_the_header_deadline(
    slow_port: int, kept_alive: bool, head_takes_s: float
) -> None:
    """Idle 1.0 s, then a head trickled to complete ``head_takes_s`` after the deadline's start: 408
    at 1.5 s from it (a first request: from connecting; a kept-alive one: from its first byte)."""
    deadline = HEADER_DEADLINE_MS / 1000
    with RawConnection(slow_port) as conn:
        connected = time.monotonic()
        if kept_alive:
            assert_hello(conn.request("GET", "/rest/hello"))
        time.sleep(IDLE_S)
        start = time.monotonic() if kept_alive else connected  # where the deadline runs from
        assert conn.send(REQUEST_LINE[:1])
        completed = _trickle(conn, REQUEST_LINE[1:] + REST_OF_HEAD, start + head_takes_s)
        response = conn.read_response()
        elapsed = time.monotonic() - start
        print(
            f"header deadline {HEADER_DEADLINE_MS} ms, first byte after {IDLE_S} s idle: "
            f"{response.status} after {elapsed * 1000:.0f} ms from "
            + ("the request's first byte" if kept_alive else "connecting")
        )
        assert not completed, "the whole head was sent before the server answered"
        assert response.status_line == "HTTP/1.1 408 Request Timeout", response.head
        assert response.json()["detailedMessage"] == "the request headers took too long"
        assert response.header("connection") == "close"
        assert conn.closed_by_server()
        assert elapsed >= deadline * 0.9, "the deadline fired early"
        assert elapsed <= deadline + SLACK_S, "the deadline ran from another start"
        assert elapsed < HANG_GUARD


def test_first_request_completed_within_the_deadline_after_idling_is_served(
    slow_port: int,
) -> None:
    with RawConnection(slow_port) as conn:
        time.sleep(IDLE_S)
        assert_hello(conn.request("GET", "/rest/hello"))


def test_kept_alive_request_gets_its_own_full_deadline_from_its_first_byte(
    slow_port: int,
) -> None:
    """A head trickled over 0.5 s after an idle wait past the deadline is served (the 1.0 s left is
    the margin for a loaded machine's late wake-ups)."""
    with RawConnection(slow_port) as conn:
        connected = time.monotonic()
        assert_hello(conn.request("GET", "/rest/hello"))
        time.sleep(KEPT_IDLE_S)  # idle under the keep-alive timeout, past the header deadline
        first_byte = time.monotonic()
        assert conn.send(REQUEST_LINE[:1])
        assert _trickle(conn, REQUEST_LINE[1:] + REST_OF_HEAD, first_byte + KEPT_TRICKLE_S), (
            "the server answered before the head was complete"
        )
        response = conn.read_response()
        now = time.monotonic()
        print(
            f"kept-alive request: head done {now - first_byte:.2f} s after its first byte, "
            f"{now - connected:.2f} s after connecting: {response.status}"
        )
        assert_hello(response)
        assert response.header("connection") is None
