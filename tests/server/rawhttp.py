"""A tiny HTTP/1.1 client on a raw socket for tests that control every byte: it reads answers one at
a time (interim ``100 Continue``, pipelined answers, a server's close as ``recv`` giving ``b""``),
and every read has a hang guard (the socket timeout)."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Self

__all__ = [
    "ENGINE_REFUSALS",
    "HANG_GUARD",
    "RawConnection",
    "RawResponse",
    "RawSocket",
    "refusal_head",
    "request_bytes",
]

HANG_GUARD = 5.0  # seconds any single read may wait before the test fails


@dataclass
class RawResponse:
    """One response as it came over the wire."""

    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    head: bytes = b""  # the raw status line and headers, up to and including the blank line

    @property
    def status_line(self) -> str:
        return f"{self.version} {self.status} {self.reason}"

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def header_all(self, name: str) -> list[str]:
        name = name.lower()
        return [value for key, value in self.headers if key.lower() == name]

    def json(self) -> Any:
        return json.loads(self.body)


def request_bytes(
    method: str = "GET",
    target: str = "/",
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
    version: str = "HTTP/1.1",
    host: str = "127.0.0.1",
) -> bytes:
    """A well-formed request; ``Host`` first, then ``headers``, then ``content-length``."""
    lines = [f"{method} {target} {version}", f"Host: {host}"]
    for name, value in headers or []:
        lines.append(f"{name}: {value}")
    if body and not any(name.lower() == "content-length" for name, _ in headers or []):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class RawSocket:
    """One TCP (or TLS) connection; "the server closed" is ``closed_on_send``/``closed_on_recv``, a
    read past the timeout :meth:`hang`: all a subclass (hostile's ``Wire``) changes."""

    closed_on_send: tuple[type[OSError], ...] = (BrokenPipeError, ConnectionResetError)
    closed_on_recv: tuple[type[OSError], ...] = (ConnectionResetError,)

    def __init__(
        self,
        port: int,
        host: str = "127.0.0.1",
        timeout: float = HANG_GUARD,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.buffer = b""
        self.eof = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, data: bytes) -> bool:
        """Send all of ``data``; False when the server already closed (reset or broken pipe)."""
        try:
            self.sock.sendall(data)
        except self.closed_on_send:
            return False
        return True

    def hang(self) -> AssertionError:
        """What a read raises when the server sent nothing within the timeout."""
        return AssertionError(
            f"the server sent nothing for {self.sock.gettimeout()} s (hang guard); "
            f"buffered: {self.buffer[:200]!r}"
        )

    def _fill(self) -> bool:
        """Read more bytes into the buffer; False at end of stream (or a reset)."""
        if self.eof:
            return False
        try:
            chunk = self.sock.recv(65536)
        except self.closed_on_recv:
            chunk = b""
        except TimeoutError:
            raise self.hang() from None
        if not chunk:
            self.eof = True
            return False
        self.buffer += chunk
        return True


class RawConnection(RawSocket):
    """One TCP (or TLS) connection to the server under test, read as HTTP/1.1 responses."""

    # -- sending ------------------------------------------------------------------------------
    def request(self, method: str = "GET", target: str = "/", **kw: Any) -> RawResponse:
        """Send one well-formed request and read its response."""
        self.send(request_bytes(method, target, **kw))
        return self.read_response(head_only=method == "HEAD")

    # -- receiving ----------------------------------------------------------------------------
    def read_response(self, head_only: bool = False) -> RawResponse:
        """Read one response (an interim 1xx one included) and leave what follows buffered."""
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                raise AssertionError(
                    f"the connection closed before a complete response: {self.buffer[:300]!r}"
                )
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        version, status, reason = [*lines[0].split(" ", 2), ""][:3]
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name, value.strip()))
        response = RawResponse(version, int(status), reason, headers, head=head + b"\r\n\r\n")
        if response.status < 200 or response.status in (204, 304) or head_only:
            return response
        length = response.header("content-length")
        if length is not None:
            size = int(length)
            while len(self.buffer) < size:
                if not self._fill():
                    raise AssertionError(
                        f"the connection closed after {len(self.buffer)} of {size} body bytes"
                    )
            response.body, self.buffer = self.buffer[:size], self.buffer[size:]
        else:
            while self._fill():
                pass
            response.body, self.buffer = self.buffer, b""
        return response

    def read_all(self) -> bytes:
        """Everything until the server closes (hang guard applies)."""
        while self._fill():
            pass
        data, self.buffer = self.buffer, b""
        return data

    def closed_by_server(self) -> bool:
        """The server closed with nothing pending (unread bytes or open past the guard: False)."""
        if self.buffer:
            return False
        try:
            return not self._fill()
        except AssertionError:
            return False

    def wait_closed(self) -> float:
        """Seconds until the server closed, sending nothing (else AssertionError)."""
        started = time.monotonic()
        assert self.closed_by_server(), (
            f"expected the server to close the connection; got {self.buffer[:200]!r}"
        )
        return time.monotonic() - started


# Refusals of the HTTP engine itself (SPEC 7), each with the id its answer carries (SPEC 13.4: the
# client's own when the head was read far enough; None: a new one)
_PAD = b"X-Pad: " + b"a" * 20000 + b"\r\n"
ENGINE_REFUSALS: list[tuple[str, bytes, int, str | None]] = [
    ("bare LF", b"GET /rest/hello HTTP/1.1\nHost: x\nX-Request-ID: lf-1\n\n", 400, None),
    (
        "20 KB header",
        b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nX-Request-ID: big-1\r\n" + _PAD + b"\r\n",
        431,
        "big-1",
    ),
    (
        "Content-Length with Transfer-Encoding",
        b"POST /rest/echo HTTP/1.1\r\nHost: x\r\nX-Request-ID: te-1\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
        "te-1",
    ),
    (
        "body over MaxBodySize",
        b"POST /rest/echo HTTP/1.1\r\nHost: x\r\nX-Request-ID: large-1\r\n"
        b"Content-Length: 999999999\r\n\r\n",
        413,
        "large-1",
    ),
    (
        "hostile id",
        b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nX-Request-ID: bad id\r\n" + _PAD + b"\r\n",
        431,
        None,
    ),
]


def refusal_head(port: int, request: bytes) -> tuple[int, dict[str, str]]:
    """The status and headers (lower-case) of the answer to ``request`` on a new connection."""
    with RawConnection(port) as conn:
        conn.send(request)
        answer = conn.read_response(head_only=True)
    return answer.status, {name.strip().lower(): value for name, value in answer.headers}
