"""SPEC 7 limits, SPEC 3 error bodies and HTTP/1.1 connection handling over raw sockets: status
line, error body, and whether the server closed. ``HTTP_SMALL`` has small header limits;
``HTTP_HEADERS``, ``HTTP_BODY``, ``HTTP_IDLE`` each shorten one deadline to 400 ms (SPEC 9), the
others at their defaults: a worker descheduled for a second (``make test`` runs at nice 10 beside
the serial part) runs its due timers before it reads and must not answer a test at another deadline.
"""

from __future__ import annotations

import gzip
import select
import statistics
import time

import pytest

from tests.conftest import local_port
from tests.server.rawhttp import HANG_GUARD, RawConnection, RawResponse, request_bytes
from tests.server.support import assert_hello, port_of, serve_module

BODY_LIMIT = 1000
SMALL_HEADER_LIMIT = 2048
SMALL_FIELD_LIMIT = 10
DEFAULT_FIELD_LIMIT = 100
DEFAULT_HEADER_LIMIT = 16384
DEADLINE_MS = 400

SERVERS = {
    "HTTP_REST": local_port(MaxBodySize=BODY_LIMIT),
    "HTTP_SMALL": local_port(MaxHeaderSize=SMALL_HEADER_LIMIT, MaxHeaders=SMALL_FIELD_LIMIT),
    "HTTP_HEADERS": local_port(HeaderTimeout=DEADLINE_MS),
    "HTTP_BODY": local_port(BodyTimeout=DEADLINE_MS),
    "HTTP_IDLE": local_port(KeepAliveTimeout=DEADLINE_MS),
}


server = serve_module("limits", servers=SERVERS)
port = port_of("HTTP_REST")
small_port = port_of("HTTP_SMALL", "small_port")
headers_port = port_of("HTTP_HEADERS", "headers_port")
body_port = port_of("HTTP_BODY", "body_port")
idle_port = port_of("HTTP_IDLE", "idle_port")


REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
}
TOO_BIG = f"the body may be at most {BODY_LIMIT} bytes"
ONE_HOST = "the request needs exactly one Host header"


def assert_error(response: RawResponse, status: int, detailed: str = "") -> None:
    """The SPEC 3 error shape: exactly ``code``, ``detailedMessage`` and ``message``."""
    message = REASONS[status]
    assert response.status_line == f"HTTP/1.1 {status} {message}", response.head
    assert response.header("content-type") == "application/json"
    body = response.json()
    assert set(body) == {"code", "detailedMessage", "message"}, body
    assert body["code"] == status
    assert body["message"] == message
    assert body["detailedMessage"] == detailed, body


def assert_closed(conn: RawConnection, response: RawResponse) -> None:
    assert response.header("connection") == "close", response.head
    assert conn.closed_by_server(), f"connection left open; then got {conn.buffer[:200]!r}"


def refused(port: int, data: bytes, status: int, detailed: str = "") -> RawResponse:
    """The error ``status`` (:func:`assert_error`), then the server closes."""
    with RawConnection(port) as conn:
        conn.send(data)
        return closed_with(conn, status, detailed)


def closed_with(conn: RawConnection, status: int, detailed: str = "") -> RawResponse:
    """The next answer on ``conn``: the error ``status`` (:func:`assert_error`), then the close."""
    response = conn.read_response()
    assert_error(response, status, detailed)
    assert_closed(conn, response)
    return response


def served(port: int, data: bytes) -> RawResponse:
    """``data`` on a new connection: the answer, a 200."""
    with RawConnection(port) as conn:
        conn.send(data)
        response = conn.read_response()
    assert response.status_line == "HTTP/1.1 200 OK", response.head
    return response


def echoed(conn: RawConnection, body: str) -> RawResponse:
    """The next answer on ``conn``: a 200 of ``/rest/echo`` with ``body``."""
    response = conn.read_response()
    assert response.status_line == "HTTP/1.1 200 OK", response.head
    assert response.json()["body"] == body
    return response


def head_of_size(total: int, target: str = "/rest/hello") -> bytes:
    """A GET whose request line and headers (blank line included) are exactly ``total`` bytes."""
    base = request_bytes("GET", target, [("X-Pad", "")])
    data = request_bytes("GET", target, [("X-Pad", "a" * (total - len(base)))])
    assert len(data) == total
    return data


def fields_request(count: int, target: str = "/rest/hello") -> bytes:
    """A GET with exactly ``count`` header fields, ``Host`` included."""
    return request_bytes("GET", target, [(f"X-F{i}", "f") for i in range(count - 1)])


# -- request line + headers: 16 KiB, header fields: at most MaxHeaders (100); 431 then close
# (SPEC 7.1) ------------------------------------------------------------------------------------
FIELDS_100 = "at most 100 header fields"
TOO_LARGE = {
    "one-huge-header": (request_bytes("GET", "/rest/hello", [("X-Big", "a" * 20000)]), ""),
    # ~18 KB in 91 fields: within MaxHeaders, over MaxHeaderSize
    "many-small-headers": (
        request_bytes("GET", "/rest/hello", [(f"X-H{i}", "v" * 190) for i in range(90)]),
        "",
    ),
    # the shortest legal header lines, thousands of them: still 431, not a stalled worker
    "many-tiny-header-lines": (
        b"GET /rest/hello HTTP/1.1\r\nHost: x\r\n" + b"a:\r\n" * 5000 + b"\r\n",
        FIELDS_100,
    ),
    "one-header-field-over-the-limit": (fields_request(DEFAULT_FIELD_LIMIT + 1), FIELDS_100),
    # a 40 KB header line with no end, in one write: 431 at once, not at the header deadline
    "unterminated-huge-header-in-one-write": (
        b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000,
        "",
    ),
    "header-block-one-byte-over-limit": (head_of_size(DEFAULT_HEADER_LIMIT + 1), ""),
}


@pytest.mark.parametrize("case", TOO_LARGE)
def test_too_large_a_head_gets_431_and_close(port: int, case: str) -> None:
    data, detailed = TOO_LARGE[case]
    refused(port, data, 431, detailed)


@pytest.mark.parametrize(
    "data",
    [fields_request(DEFAULT_FIELD_LIMIT), head_of_size(DEFAULT_HEADER_LIMIT)],
    ids=["header-fields-at-the-limit", "header-block-at-the-limit"],
)
def test_a_head_at_the_limit_is_served(port: int, data: bytes) -> None:
    with RawConnection(port) as conn:
        conn.send(data)
        assert_hello(conn.read_response())
        assert_hello(conn.request("GET", "/rest/hello"))  # and the connection serves on


def test_max_headers_is_per_server(port: int, small_port: int) -> None:
    assert_hello(served(small_port, fields_request(SMALL_FIELD_LIMIT)))
    refused(small_port, fields_request(SMALL_FIELD_LIMIT + 1), 431, "at most 10 header fields")
    # the same request on the port with the default limit
    assert_hello(served(port, fields_request(SMALL_FIELD_LIMIT + 1)))


def test_trailer_fields_are_not_header_fields(port: int) -> None:
    """Trailers of a chunked body count against the body limit, not ``MaxHeaders``."""
    fields = [("Transfer-Encoding", "chunked")] + [(f"X-F{i}", "f") for i in range(98)]
    trailers = b"".join(b"T%d: t\r\n" % i for i in range(20))
    data = request_bytes("POST", "/rest/echo", fields) + b"2\r\nok\r\n0\r\n" + trailers + b"\r\n"
    assert served(port, data).json()["body"] == "ok"


def test_thousands_of_tiny_header_fields_cost_what_a_request_costs(port: int) -> None:
    """2,690 fields of 5 bytes fit in 16 KiB, each a parser callback (SPEC 7.1's review: 34 times a
    normal request); the 101st now ends it with 431. Speeds printed, not asserted."""
    tiny = b"GET /rest/hello HTTP/1.1\r\nHost: x\r\n" + b"a:b\r\n" * 2689 + b"\r\n"
    assert len(tiny) <= DEFAULT_HEADER_LIMIT
    normal = request_bytes("GET", "/rest/hello")

    def timed(data: bytes, status: int) -> float:
        times = []
        for _ in range(40):
            with RawConnection(port) as conn:
                started = time.perf_counter()
                conn.send(data)
                response = conn.read_response()
                times.append(time.perf_counter() - started)
                assert response.status == status, response.head
        return statistics.median(times)

    plain, fields = timed(normal, 200), timed(tiny, 431)
    print(
        f"\nmedian over 40 new connections: a normal GET {plain * 1e6:.0f} us, one with 2,690 "
        f"tiny header fields {fields * 1e6:.0f} us (431), x{fields / plain:.1f}"
    )


def test_trickled_oversized_header_gets_431_and_close(port: int) -> None:
    """One header value that never ends, sent 1000 bytes at a time: 431 before it ends."""
    with RawConnection(port) as conn:
        conn.send(b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sent = 0
        for _ in range(60):  # up to 60 KB, far past the limit; the server stops us first
            if not conn.send(b"a" * 1000):
                break
            sent += 1000
            if select.select([conn.sock], [], [], 0.01)[0]:
                break
        print(f"server answered after {sent} trickled header bytes")
        assert sent < 60000, "the server took the whole 60 KB header without answering"
        closed_with(conn, 431)


def test_trickled_long_url_within_limit_is_served(port: int) -> None:
    """A 10 KB request target arriving in pieces is within 16 KiB and must be served."""
    target = "/rest/items/" + "7" * 10000
    data = request_bytes("GET", target)
    with RawConnection(port) as conn:
        for i in range(0, len(data), 500):
            assert conn.send(data[i : i + 500])
            time.sleep(0.002)
        response = conn.read_response()
        assert response.status_line == "HTTP/1.1 200 OK", response.head
        assert response.json() == {"id": "7" * 10000}
        assert response.header("connection") is None


def test_max_header_size_is_per_server(port: int, small_port: int) -> None:
    assert_hello(served(small_port, head_of_size(SMALL_HEADER_LIMIT)))
    refused(small_port, head_of_size(SMALL_HEADER_LIMIT + 1), 431)
    # the same 4 KB head is fine on the port with the default limit
    assert_hello(served(port, head_of_size(4096)))


TE_10 = "HTTP/1.0 requests cannot use Transfer-Encoding"
CHUNKS = b"5\r\nhello\r\n0\r\n\r\n"
OVER = [("Content-Length", str(BODY_LIMIT + 1))]
# what else the engine refuses, with the detailedMessage it gives (the malformed framings: the
# hostile corpus, tests/hostile/corpus.py)
REFUSED: dict[str, tuple[bytes, int, str]] = {
    "repeated-authorization": (
        request_bytes(
            "GET", "/rest/hello", [("Authorization", "Basic YTpi"), ("Authorization", "Basic Yzpk")]
        ),
        400,
        "repeated Authorization header",
    ),
    **{
        f"http10-transfer-encoding-{coding}": (
            request_bytes("POST", "/rest/echo", [("Transfer-Encoding", coding)], version="HTTP/1.0")
            + CHUNKS,
            400,
            TE_10,
        )
        for coding in ("chunked", "gzip, chunked", "identity")
    },
    # gzip, chunked would hand the handler a still-compressed body
    "unsupported-transfer-coding": (
        request_bytes("POST", "/rest/echo", [("Transfer-Encoding", "gzip, chunked")]) + CHUNKS,
        501,
        "only Transfer-Encoding: chunked is supported",
    ),
    # chunked not last: the body's length is unknown (RFC 9112 6.3: 400)
    "transfer-coding-without-chunked": (
        request_bytes("POST", "/rest/echo", [("Transfer-Encoding", "gzip")]) + CHUNKS,
        400,
        "Transfer-Encoding must end with chunked (its body's length is unknown)",
    ),
    "http11-without-host": (b"GET /rest/hello HTTP/1.1\r\n\r\n", 400, ONE_HOST),
    "two-host-headers": (b"GET /rest/hello HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, ONE_HOST),
    # 413 before the body: only the headers are sent, the answer comes without the body
    "content-length-over-limit": (request_bytes("POST", "/rest/echo", OVER), 413, TOO_BIG),
    # and no 100 Continue
    "expect-continue-over-limit": (
        request_bytes("POST", "/rest/echo", [*OVER, ("Expect", "100-continue")]),
        413,
        TOO_BIG,
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_refused_request_gets_its_error_and_close(port: int, case: str) -> None:
    data, status, detailed = REFUSED[case]
    refused(port, data, status, detailed)


def test_a_coded_request_body_gets_415_unread_and_close(port: int) -> None:
    """A coded body would reach the handler compressed (and gzip outsizes ``MaxBodySize``): 415 with
    ``Accept-Encoding: identity`` (RFC 9110 8.4, 12.5.3), unread; ``identity`` is served."""
    packed = gzip.compress(b"x" * 100_000)
    detailed = (
        "a request body with Content-Encoding is not accepted: send it uncompressed, "
        "without Content-Encoding"
    )
    for coding in ("gzip", "br", "deflate", "identity, gzip", "x-unknown"):
        headers = [("Content-Encoding", coding), ("Content-Length", str(len(packed)))]
        response = refused(
            port, request_bytes("POST", "/rest/echo", headers) + packed, 415, detailed
        )
        assert response.header("accept-encoding") == "identity"
    # nor after 100 Continue: refused with the head
    headers = [*headers, ("Expect", "100-continue")]
    refused(port, request_bytes("POST", "/rest/echo", headers), 415, detailed)
    with RawConnection(port) as conn:
        headers = [("Content-Encoding", "identity"), ("Content-Length", "2")]
        conn.send(request_bytes("POST", "/rest/echo", headers) + b"hi")
        echoed(conn, "hi")
        conn.send(request_bytes("GET", "/rest/hello", [("Content-Encoding", "gzip")]))
        assert_hello(conn.read_response())


# -- body limit: 413 while reading ----------------------------------------------------------------
def test_chunked_body_growing_past_limit_gets_413_while_reading(port: int) -> None:
    head = request_bytes("POST", "/rest/echo", [("Transfer-Encoding", "chunked")])
    chunk = b"190\r\n" + b"a" * 0x190 + b"\r\n"  # 400 bytes a chunk
    with RawConnection(port) as conn:
        assert conn.send(head + chunk + chunk)  # 800 bytes: still within the limit
        assert not select.select([conn.sock], [], [], 0.2)[0], "answered before the limit"
        conn.send(chunk)  # 1200 bytes; the last chunk never comes
        closed_with(conn, 413, TOO_BIG)


def test_body_exactly_at_limit_is_served(port: int) -> None:
    response = served(port, request_bytes("POST", "/rest/echo", body=b"b" * BODY_LIMIT))
    assert response.json()["body"] == "b" * BODY_LIMIT
    assert response.header("connection") is None


def test_chunked_body_exactly_at_limit_is_served(port: int) -> None:
    head = request_bytes("POST", "/rest/echo", [("Transfer-Encoding", "chunked")])
    body = b"3e8\r\n" + b"c" * BODY_LIMIT + b"\r\n0\r\n\r\n"
    assert served(port, head + body).json()["body"] == "c" * BODY_LIMIT


# -- deadlines, shortened to DEADLINE_MS, one a port ----------------------------------------------
def _trickle_until_answered(
    conn: RawConnection, data: bytes, pause: float, started: float | None = None
) -> tuple[float, int]:
    """A byte at a time until answered; (seconds since ``started``, bytes sent)."""
    started = time.monotonic() if started is None else started
    for i, byte in enumerate(data):
        if select.select([conn.sock], [], [], pause)[0]:
            return time.monotonic() - started, i
        if not conn.send(bytes([byte])):
            return time.monotonic() - started, i
        assert time.monotonic() - started < HANG_GUARD, "no deadline fired (hang guard)"
    raise AssertionError("the whole request was trickled without the deadline firing")


def test_client_stopping_mid_body_gets_408_and_close(body_port: int) -> None:
    with RawConnection(body_port) as conn:
        started = time.monotonic()  # before the head is sent: the deadline starts after it
        conn.send(request_bytes("POST", "/rest/echo", [("Content-Length", "100")]) + b"x" * 10)
        response = conn.read_response()
        elapsed = time.monotonic() - started
        print(f"body deadline {DEADLINE_MS} ms: 408 after {elapsed * 1000:.0f} ms")
        assert_error(response, 408, "the request body took too long")
        assert_closed(conn, response)
        assert elapsed >= DEADLINE_MS / 1000 * 0.9, "the deadline fired early"


def test_trickled_body_gets_408_at_the_body_deadline(body_port: int) -> None:
    """Bytes that keep coming do not extend the body deadline."""
    with RawConnection(body_port) as conn:
        conn.send(request_bytes("POST", "/rest/echo", [("Content-Length", "500")]))
        elapsed, sent = _trickle_until_answered(conn, b"y" * 500, 0.05)
        print(f"body deadline {DEADLINE_MS} ms: 408 after {elapsed * 1000:.0f} ms, {sent} bytes")
        closed_with(conn, 408, "the request body took too long")


def test_idle_keep_alive_connection_is_closed_after_keep_alive_timeout(idle_port: int) -> None:
    with RawConnection(idle_port) as conn:
        started = time.monotonic()  # before the request: the idle time cannot start earlier
        response = conn.request("GET", "/rest/hello")
        assert_hello(response)
        assert response.header("connection") is None  # kept alive ...
        conn.wait_closed()  # ... until idle for KeepAliveTimeout, silently
        elapsed = time.monotonic() - started
        print(
            f"keep-alive timeout {DEADLINE_MS} ms: closed {elapsed * 1000:.0f} ms after the request"
        )
        assert elapsed >= DEADLINE_MS / 1000 * 0.9, "closed before the keep-alive timeout"


def test_keep_alive_connection_is_reused_within_the_timeout(port: int) -> None:
    """On the default port (its keep-alive timeout is many pauses long, not a deschedule's)."""
    with RawConnection(port) as conn:
        for _ in range(3):
            assert_hello(conn.request("GET", "/rest/hello"))
            time.sleep(DEADLINE_MS / 1000 / 8)


def test_connection_sending_nothing_is_closed(headers_port: int) -> None:
    with RawConnection(headers_port) as conn:
        elapsed = conn.wait_closed()
        print(
            f"header deadline {DEADLINE_MS} ms: silent connection closed after {elapsed * 1000:.0f} ms"
        )


def test_normal_client_is_served_during_slow_ones(port: int) -> None:
    """Slow clients on the default port (10 s header, 30 s body deadline) block nobody."""
    with (
        RawConnection(port) as slow_headers,
        RawConnection(port) as slow_body,
        RawConnection(port) as normal,
    ):
        slow_headers.send(b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        slow_body.send(request_bytes("POST", "/rest/echo", [("Content-Length", "100")]) + b"z")
        for _ in range(3):
            assert_hello(normal.request("GET", "/rest/hello"))
        # the slow ones are still waiting, unanswered and open
        ready = select.select([slow_headers.sock, slow_body.sock], [], [], 0.1)[0]
        assert ready == []
        slow_body.send(b"z" * 99)
        response = slow_body.read_response()
        assert response.status_line == "HTTP/1.1 200 OK"
        assert response.json()["body"] == "z" * 100


# -- a request asking for an upgrade keeps its body (SPEC 7.1) --------------------------------------
# (in one write, with Expect, h2c's: the hostile corpus's upgrade cases)
WEBSOCKET = [("Connection", "Upgrade"), ("Upgrade", "websocket")]


def test_upgrade_request_body_arriving_in_pieces(port: int) -> None:
    headers = [*WEBSOCKET, ("Content-Length", "11")]
    with RawConnection(port) as conn:
        conn.send(request_bytes("POST", "/rest/echo", headers))
        for piece in (b"hel", b"lo", b"-world"):
            time.sleep(0.05)
            assert not select.select([conn.sock], [], [], 0)[0], "answered before the body"
            conn.send(piece)
        assert_closed(conn, echoed(conn, "hello-world"))


def test_upgrade_request_chunked_body_with_trailer(port: int) -> None:
    head = request_bytes("POST", "/rest/echo", [*WEBSOCKET, ("Transfer-Encoding", "chunked")])
    with RawConnection(port) as conn:
        conn.send(head + b"3\r\nabc\r\n")
        time.sleep(0.05)
        conn.send(b"2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\nGET /rest/hello HTTP/1.1\r\n\r\n")
        assert_closed(conn, echoed(conn, "abcde"))


def test_upgrade_request_body_over_the_limit_gets_413(port: int) -> None:
    head = request_bytes("POST", "/rest/echo", [*WEBSOCKET, ("Transfer-Encoding", "chunked")])
    chunk = b"190\r\n" + b"a" * 0x190 + b"\r\n"
    refused(port, head + chunk * 3, 413, TOO_BIG)


def test_pipelined_requests_before_an_upgrade_request_are_answered(port: int) -> None:
    upgrade = request_bytes("POST", "/rest/echo", WEBSOCKET, body=b"up")
    with RawConnection(port) as conn:
        conn.send(
            request_bytes("GET", "/rest/asleep/100") + upgrade + request_bytes("GET", "/rest/hello")
        )
        assert conn.read_response().json() == {"slept": 100}
        assert_closed(conn, echoed(conn, "up"))


# -- keep-alive, pipelining, close ---------------------------------------------------------------
def test_pipelined_requests_are_answered_in_order(port: int) -> None:
    """The first is slow (an async sleep), the second fast: the answers keep request order."""
    with RawConnection(port) as conn:
        conn.send(
            request_bytes("GET", "/rest/asleep/150")
            + request_bytes("GET", "/rest/items/2")
            + request_bytes("POST", "/rest/echo", body=b"third")
        )
        first, second, third = conn.read_response(), conn.read_response(), conn.read_response()
        assert first.status == second.status == third.status == 200
        assert first.json() == {"slept": 150}
        assert second.json() == {"id": "2"}
        assert third.json()["body"] == "third"
        assert conn.buffer == b""


@pytest.mark.parametrize(
    "head",
    [
        b"GET /rest/hello HTTP/1.0\r\n",
        b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n",
        b"GET /rest/hello HTTP/1.0\r\nConnection: keep-alive, close\r\n",
        b"GET /rest/hello HTTP/1.0\r\nConnection: close, Keep-Alive\r\n",
        b"GET /rest/hello HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n",
        b"POST /rest/echo HTTP/1.0\r\nConnection: keep-alive, close\r\nContent-Length: 2\r\n",
    ],
    ids=["http10", "connection-close", "http10-get", "close-first", "two-lines", "http10-post"],
)
def test_a_request_without_keep_alive_is_answered_then_closed(port: int, head: bytes) -> None:
    """HTTP/1.0 without ``keep-alive``, ``Connection: close``, and (RFC 9112 9.6) ``close`` beside
    ``keep-alive`` (llhttp keeps HTTP/1.0 naming ``keep-alive`` open): no request after it served."""
    body = b"hi" if head.startswith(b"POST") else b""
    with RawConnection(port) as conn:
        conn.send(head + b"\r\n" + body + request_bytes("GET", "/rest/items/2"))
        response = conn.read_response()
        if body:
            assert response.status == 200, response.head
        else:
            assert_hello(response)
        assert_closed(conn, response)
        assert b"HTTP/1.1" not in conn.buffer, "the request after the close was served"


def test_expect_100_continue_gets_continue_before_the_body(port: int) -> None:
    headers = [("Content-Length", "5"), ("Expect", "100-continue")]
    with RawConnection(port) as conn:
        conn.send(request_bytes("POST", "/rest/echo", headers))
        interim = conn.read_response()
        assert interim.status_line == "HTTP/1.1 100 Continue"
        assert interim.head == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.send(b"hello")
        echoed(conn, "hello")


def test_head_returns_headers_with_content_length_and_no_body(port: int) -> None:
    with RawConnection(port) as conn:
        get = conn.request("GET", "/rest/text")
        head = conn.request("HEAD", "/rest/text")
        assert head.status_line == "HTTP/1.1 200 OK"
        assert get.body == b"plain text"
        assert head.header("content-length") == str(len(get.body))
        assert head.header("content-type") == get.header("content-type")
        assert len(head.header_all("content-length")) == 1
        # no body bytes followed the HEAD answer: the next answer starts right away
        assert conn.buffer == b""
        after = conn.request("GET", "/rest/items/9")
        assert after.status_line == "HTTP/1.1 200 OK"
        assert after.json() == {"id": "9"}


# -- SPEC 3 bodies ---------------------------------------------------------------------------------
def test_unknown_path_gets_404_body_and_keeps_the_connection(port: int) -> None:
    with RawConnection(port) as conn:
        response = conn.request("GET", "/rest/no/such/route")
        assert response.status_line == "HTTP/1.1 404 Not Found"
        assert response.body == b'{"code":404,"detailedMessage":"","message":"Not Found"}'
        assert response.header("connection") is None
        assert_hello(conn.request("GET", "/rest/hello"))


def test_wrong_method_gets_405_with_allow(port: int) -> None:
    with RawConnection(port) as conn:
        response = conn.request("DELETE", "/rest/hello")
        assert response.status_line == "HTTP/1.1 405 Method Not Allowed"
        assert response.body == (
            b'{"code":405,"detailedMessage":"","message":"Method Not Allowed"}'
        )
        assert response.header("allow") == "GET, HEAD, OPTIONS"
        assert_hello(conn.request("GET", "/rest/hello"))


# -- the one path normaliser, end to end ---------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "id"),
    [
        ("/rest//items/./7", "7"),
        ("/rest/%69tems/7", "7"),
        ("/rest/x/../items/7", "7"),
        ("/rest/items/7/", "7"),
        ("http://127.0.0.1/rest/items/7", "7"),
        ("/rest/items/7;x", "7;x"),  # a semicolon is part of the segment
        ("/rest/items/%2541", "%41"),  # percent-decoded once only
    ],
)
def test_equivalent_paths_reach_the_same_route(port: int, target: str, id: str) -> None:
    assert served(port, request_bytes("GET", target)).json() == {"id": id}


@pytest.mark.parametrize(
    ("target", "detailed"),
    [
        ("/rest/items/a%2Fb", "the path holds an encoded slash"),
        ("/rest/items/a%2fb", "the path holds an encoded slash"),
        ("/rest/../../items/7", "the path climbs above /"),
        ("/rest/%2e%2e/%2e%2e/items/7", "the path climbs above /"),
        ("/rest/items/%00", "the path holds an encoded NUL"),
        ("/rest/items/%ff", "the path is not valid UTF-8"),
    ],
)
def test_refused_paths_get_400(port: int, target: str, detailed: str) -> None:
    with RawConnection(port) as conn:
        assert_error(conn.request("GET", target), 400, detailed)


def test_query_string_reaches_the_handler(port: int) -> None:
    body = served(port, request_bytes("POST", "/rest//echo?a=1&b=two", body=b"{}")).json()
    assert body["query"] == {"a": "1", "b": "two"}
    assert body["path"] == "/rest/echo"
