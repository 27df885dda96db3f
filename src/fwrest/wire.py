"""The seam between the HTTP engine and what serves a port.

The engine (:mod:`fwrest.server.http`) parses bytes into a :class:`Request`, asks the port's
:class:`PortHandler` for the body limit of a request before reading its body and for the
:class:`Reply` once it is read, and writes the reply's bytes (:func:`encode_reply`). A request
that expects ``100 Continue`` is first shown to :meth:`PortHandler.admit` without its body.
The engine knows nothing else of the port: not its routes (the token route's smaller body
limit is the port's policy, :meth:`PortHandler.body_limit`), not its guard (``admit`` runs it),
not its logs.

Owns: the request and reply records, the reply encoder. Must not know: routing, auth, config
files, the application.
"""

from __future__ import annotations

import enum
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from email.utils import formatdate
from typing import ClassVar, Protocol

from fwrest.errors import STATUS_PHRASES, HTTPError, Refusal

__all__ = [
    "Keep",
    "PortHandler",
    "Reply",
    "Request",
    "close_stream",
    "coded_body",
    "encode_reply",
    "error_reply",
    "expects_continue",
    "head_answer",
    "protocol_refusal",
    "refusal",
    "transfer_coding_refusal",
]

JSON = "application/json"


@dataclass(slots=True)
class Request:
    """One parsed HTTP request, as the connection hands it over."""

    method: str
    target: bytes
    headers: list[tuple[str, str]]  # lower-case names, latin-1 values, in order
    body: bytes
    client: str
    port: int
    # the Authorization value, found by the HTTP layer while it checks the headers (None:
    # not looked for, or absent; guards then look in ``headers``)
    authorization: str | None = None
    # the client's certificate as the TLS layer decoded it at the connection's handshake
    # (``SSLSocket.getpeercert()``'s mapping, plus its SHA-256 thumbprint under the key
    # ``x5t#S256``: context/certs.py's ``with_thumbprint``), on a port that asks for one
    # (SPEC 11.2, 16.2); None: none sent, none asked for, or plain HTTP
    peer_cert: Mapping[str, object] | None = None


@dataclass(slots=True)
class Reply:
    """What goes back on the wire: status, headers (lower-case names), body.

    A reply with ``drop`` (and ``close``) is not written: the connection is closed instead.

    A streamed reply (``stream``, SPEC 10.3, 10.5) has no ``body``: the engine writes the head,
    then each piece as it comes, waiting while the client does not read, with
    ``Content-Length: length`` when the length is known (a file), else chunked; it closes the
    stream (``aclose``) when it ends early (the client went away).
    """

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    close: bool = False
    stream: AsyncIterator[bytes] | None = None
    length: int = -1  # a stream's length in bytes (-1: unknown, sent chunked)
    # no answer at all: the engine closes the connection without writing (OnSelect's -3,
    # SPEC 11.1); such a reply also has ``close``, so the common path never looks at it
    drop: bool = False
    # a new request id (SPEC 13.4) kept as its integer: the encoder writes its
    # ``x-request-id`` line (0: none, or the id is among ``headers``)
    request_id: int = 0
    # the answer to a HEAD: no content, and a ``content-length`` only where ``headers`` has
    # the one GET would send (none for a stream of unknown length: RFC 9110 8.6, 9.3.2)
    head_only: bool = False


class PortHandler(Protocol):
    """What serves one port, as the engine sees it."""

    # headers the port puts on every answer, which the engine adds to the answers it makes
    # itself (a TLS port's HSTS, SPEC 10.2); decided at start
    engine_headers: tuple[tuple[str, str], ...]

    def body_limit(self, target: bytes, length: int, chunked: bool) -> int:
        """The most body bytes the request for ``target`` may send, asked once its head is
        read (``length`` -1 when it has none; ``chunked`` for a chunked body)."""
        ...

    async def admit(self, head: Request) -> Reply | None:
        """Whether a request that expects ``100 Continue`` may send its body: None lets it
        (the engine sends ``100 Continue`` and reads the body), a reply refuses it (the engine
        sends it and closes, the body unread). ``head`` has no body. Asked only of such
        requests, so the common path pays nothing; ``handle`` still authorizes the whole
        request afterwards (never raises: errors are replies)."""
        ...

    async def handle(self, req: Request) -> Reply:
        """The answer to a complete request (never raises: errors are replies)."""
        ...

    def refused(self, head: Request, reply: Reply) -> Reply:
        """An answer the engine makes itself (:func:`refusal`) to a request whose head it read
        far enough to know its method and target (``head``: no body, the fields read so far),
        with the headers the port puts on every answer of the request's location (CORS, rate
        limits: SPEC 10.1, 13.7). Asked only on that path, never of a request it serves
        (never raises: a failure leaves ``reply`` as it is)."""
        ...


async def close_stream(stream: object) -> None:
    """Close a stream: an async iterator's ``aclose()``, else an iterator's ``close()`` (an
    application's generator runs its ``finally``); nothing for an object with neither."""
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        await closer()
        return
    close = getattr(stream, "close", None)
    if close is not None:
        close()


def error_reply(exc: Refusal) -> Reply:
    """The reply of a client error, the one place every error answer is rendered: an
    :class:`~fwrest.errors.HTTPError`'s (SPEC 3's error body) or the token service's
    ``OAuthError``'s (RFC 6749 5.2's), each with the headers the error built."""
    headers = [("content-type", JSON), *exc.headers]
    return Reply(exc.status, headers, exc.body(), exc.close)


def refusal(exc: HTTPError, request_id: str, port_headers: tuple[tuple[str, str], ...]) -> Reply:
    """An answer the engine makes itself (a protocol error, SPEC 7): the error's reply with the
    request's id (SPEC 13.4) and the headers the port puts on every answer
    (:attr:`PortHandler.engine_headers`)."""
    reply = error_reply(exc)
    reply.headers.append(("x-request-id", request_id))
    reply.headers.extend(port_headers)
    return reply


def head_answer(reply: Reply) -> None:
    """Make ``reply`` (not a stream) the answer to a HEAD request: no content (RFC 9110
    9.3.2), a ``content-length`` as GET's answer would have (none for 204 and 304)."""
    reply.head_only = True
    if reply.status != 204 and reply.status != 304:
        reply.headers.append(("content-length", str(len(reply.body))))
    reply.body = b""


def coded_body(coding: str) -> HTTPError | None:
    """The refusal of a request body sent with ``Content-Encoding: coding`` (gzip, br...):
    fwrest takes bodies as they are, never decoded (RFC 9110 8.4: a server that does not
    accept a coding of the content answers 415, and says what it accepts in
    ``Accept-Encoding``, 12.5.3); None for ``identity`` or an empty value. The engine
    refuses it with the request's head, its body unread, and closes the connection.

    >>> coded_body("identity") is None, coded_body("gzip").status
    (True, 415)
    """
    codings = [c.strip().lower() for c in coding.split(",")]
    if all(c in ("", "identity") for c in codings):
        return None
    return HTTPError(
        415,
        detailed=(
            "a request body with Content-Encoding is not accepted: send it uncompressed, "
            "without Content-Encoding"
        ),
        headers=(("accept-encoding", "identity"),),
        close=True,
    )


def transfer_coding_refusal(coding: str) -> HTTPError | None:
    """The refusal of a request whose ``Transfer-Encoding`` (its fields joined by commas)
    is not ``chunked`` alone; None when it is (empty list elements ignored, RFC 9110
    5.6.1.2). Chunked not the last coding: the body's length cannot be known, 400 (RFC
    9112 6.3, a MUST); chunked last after another coding (``gzip, chunked``): 501, fwrest
    decodes no other transfer coding (RFC 9112 6.1). Both close the connection.

    >>> transfer_coding_refusal(",chunked") is None, transfer_coding_refusal("gzip").status
    (True, 400)
    >>> transfer_coding_refusal("gzip, chunked").status
    501
    """
    codings = [c for c in (part.strip(" \t").lower() for part in coding.split(",")) if c]
    if codings == ["chunked"]:
        return None
    if not codings or codings[-1] != "chunked":
        return HTTPError(
            400,
            detailed="Transfer-Encoding must end with chunked (its body's length is unknown)",
            close=True,
        )
    return HTTPError(501, detailed="only Transfer-Encoding: chunked is supported", close=True)


def protocol_refusal() -> HTTPError:
    """The refusal of a request line naming ``RTSP/`` or ``ICE/``, which llhttp parses for
    the methods they share with HTTP: not HTTP (RFC 9112 2.3: ``HTTP-name`` is ``HTTP``)."""
    return HTTPError(
        400, detailed="the request line must end in HTTP/1.1 (or HTTP/1.0)", close=True
    )


def expects_continue(value: str) -> bool | None:
    """What one ``Expect`` field line asks: True for ``100-continue``, False for nothing (no
    element but empty ones), None for any other expectation (417). The field is a list
    (``#expectation``, RFC 9110 10.1.1) whose empty elements count for nothing (5.6.1.2:
    ``100-continue,`` is ``100-continue``; ``,`` and an empty value ask nothing).

    >>> expects_continue("100-Continue"), expects_continue(", 100-continue,")
    (True, True)
    >>> expects_continue(""), expects_continue(" , "), expects_continue("100-continue, foo")
    (False, False, None)
    """
    asks = False
    for part in value.split(","):
        element = part.strip(" \t").lower()
        if element == "100-continue":
            asks = True
        elif element:
            return None
    return asks


class Keep(enum.IntEnum):
    """What a connection does after an answer."""

    CLOSE = 0  # close it ("connection: close")
    OPEN = 1  # keep it open (HTTP/1.1's default: nothing said)
    OPEN_10 = 2  # keep it open and say so (an HTTP/1.0 client needs "connection: keep-alive")


# every status line fwrest may write, made once: the phrase of http.HTTPStatus (RFC 9110's
# names), none for a status it does not know (RFC 9112 4: the phrase may be empty)
_STATUS_LINES: dict[int, bytes] = {
    code: f"HTTP/1.1 {code} {STATUS_PHRASES.get(code, '')}\r\n".encode() for code in range(100, 600)
}


# SPEC 10.2: on every answer of every port (the only value there is: an application's own
# is dropped rather than sent twice)
_NOSNIFF = b"x-content-type-options: nosniff\r\n"


class _DateLine:
    """The ``date`` header line, formatted once a second, with the ``nosniff`` line that every
    answer carries too."""

    second: ClassVar[int] = 0
    line: ClassVar[bytes] = b""

    @classmethod
    def get(cls) -> bytes:
        now = int(time.time())
        if cls.second != now:
            cls.second = now
            cls.line = f"date: {formatdate(now, usegmt=True)}\r\n".encode() + _NOSNIFF
        return cls.line


# Encoded header lines that fwrest sends over and over (content types, challenges): only
# these names are remembered, never an application's own headers (cookies, ids).
_LINES: dict[tuple[str, str], bytes] = {}
_LINES_SIZE = 256
_LINE_MAX = 512
_REMEMBERED = frozenset(
    (
        "content-type",
        "cache-control",
        "pragma",
        "www-authenticate",
        "allow",
        "vary",
        "content-encoding",
        # a location's security headers and CORS constants (SPEC 10): the same on every answer
        "strict-transport-security",
        "x-frame-options",
        "content-security-policy",
        "access-control-allow-credentials",
        "access-control-expose-headers",
    )
)


def _line(name: str, value: str) -> bytes:
    line = f"{name}: {value}\r\n".encode("latin-1", "replace")
    if name in _REMEMBERED and len(line) <= _LINE_MAX:
        if len(_LINES) >= _LINES_SIZE:
            _LINES.clear()
        _LINES[name, value] = line
    return line


# per request: members through module names and a tuple indexed by the int (an enum's class
# attribute and its Python-level hash each cost more than the encoding of a small answer)
_OPEN = Keep.OPEN
_CONNECTION = (b"connection: close\r\n", b"", b"connection: keep-alive\r\n")


def encode_reply(reply: Reply, keep: Keep, chunked: bool = True) -> bytes:
    """The answer's bytes, with the ``connection`` header ``keep`` asks for; of a streamed
    reply, the head (``chunked`` False: an HTTP/1.0 client, the stream ends with the
    connection)."""
    status_line = _STATUS_LINES.get(reply.status) or f"HTTP/1.1 {reply.status} \r\n".encode()
    parts = [status_line, _DateLine.get()]
    has_length = False
    lines = _LINES
    for pair in reply.headers:
        line = lines.get(pair)
        if line is None:
            name = pair[0]
            if name == "content-length":
                has_length = True
            elif name == "x-content-type-options":
                continue  # sent with the date line
            elif name == "date":
                continue  # the server's clock's (RFC 9110 6.6.1), one line (5.3)
            line = _line(*pair)
        parts.append(line)
    if reply.request_id:
        parts.append(b"x-request-id: %032x\r\n" % reply.request_id)
    status = reply.status
    if reply.stream is not None and status != 204 and status != 304 and status >= 200:
        # the head only: the engine writes the pieces (chunked unless the length is known)
        if reply.length >= 0:
            parts.append(b"content-length: %d\r\n" % reply.length)
        elif chunked:
            parts.append(b"transfer-encoding: chunked\r\n")
        if keep is not _OPEN:
            parts.append(_CONNECTION[keep])
        parts.append(b"\r\n")
        return b"".join(parts)
    if status == 204 or status == 304 or status < 200:
        # no content, whatever the handler gave (RFC 9110 15.3.5, 15.4.5): a body here would
        # be read as the start of the next response on a kept-alive connection
        if keep is not _OPEN:
            parts.append(_CONNECTION[keep])
        parts.append(b"\r\n")
        return b"".join(parts)
    if not has_length and not reply.head_only:
        parts.append(b"content-length: %d\r\n" % len(reply.body))
    if keep is not _OPEN:
        parts.append(_CONNECTION[keep])
    parts.append(b"\r\n")
    parts.append(reply.body)
    return b"".join(parts)
