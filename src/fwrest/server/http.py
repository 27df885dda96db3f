"""HTTP/1.1 connections: httptools (llhttp, strict) parses, this module enforces SPEC 7.

llhttp already refuses a bare LF, ``Content-Length`` with ``Transfer-Encoding``, a duplicate
``Content-Length``, bad chunking, obsolete line folding and invalid header tokens (400 and
close). This layer adds what no engine gives together: the header-size limit (431), the
header, body and keep-alive deadlines, the body limit before and while reading (413), a
repeated ``Authorization`` (400), pipelining in order, and a graceful drain.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Any, cast

import httptools

from fwrest import log
from fwrest.config.model import ServerConfig
from fwrest.errors import HTTPError, is_cancellation
from fwrest.wire import Keep, PortHandler, Request, encode_reply, error_reply

__all__ = ["ConnectionSet", "HttpProtocol"]


class _Phase(enum.Enum):
    """Where the connection is in the current message."""

    IDLE = 0  # between messages
    HEADERS = 1  # reading the request line and headers
    BODY = 2  # reading the body
    DONE = 3  # the message is read; its answer is being made


_IDLE, _HEADERS, _BODY, _DONE = _Phase.IDLE, _Phase.HEADERS, _Phase.BODY, _Phase.DONE
# Chunk extensions are framing the parser skips, never handed to the body: bounded on their
# own, else a client streams an unlimited body past MaxBodySize (as in CVE-2024-22019).
CHUNK_EXTENSIONS_LIMIT = 16384
_CHUNK_FRAMING = 20  # per chunk: up to 16 hex digits and two CRLFs
_SLICE = 8192  # bytes parsed at a time


class ConnectionSet:
    """The open connections of one worker, for a graceful drain."""

    def __init__(self) -> None:
        self.items: set[HttpProtocol] = set()
        self.draining = False

    def drain(self) -> None:
        self.draining = True
        for conn in list(self.items):
            conn.shutdown()


class HttpProtocol(asyncio.Protocol):
    """One client connection."""

    __slots__ = (
        "_authorization",
        "_body",
        "_body_limit",
        "_body_size",
        "_busy",
        "_chunked",
        "_chunks",
        "_client",
        "_completed",
        "_conns",
        "_head_size",
        "_header_bytes",
        "_headers",
        "_http10",
        "_keep_alive",
        "_loop",
        "_parser",
        "_pending",
        "_phase",
        "_queue",
        "_timer",
        "_transport",
        "_url",
        "_wire_body",
        "app",
        "cfg",
    )

    def __init__(
        self,
        app: PortHandler,
        cfg: ServerConfig,
        conns: ConnectionSet,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.app = app
        self.cfg = cfg
        self._conns = conns
        self._loop = loop
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._phase = _IDLE
        self._url = b""
        self._headers: list[tuple[str, str]] = []
        self._authorization: str | None = None  # the current request's Authorization value
        self._header_bytes = 0  # raw bytes of an incomplete head (see _feed)
        self._head_size = 0  # parsed size of the request line and headers so far
        self._completed = 0  # messages parsed on this connection
        self._body: list[bytes] = []
        self._body_size = 0
        self._body_limit = cfg.max_body_size
        self._chunked = False  # the current body is chunked
        self._chunks = 0  # chunks of the current body
        self._wire_body = 0  # raw bytes received while the current body was being read
        self._busy = False
        self._keep_alive = True
        self._http10 = False  # the current request is HTTP/1.0
        self._queue: list[tuple[Request, Keep]] = []
        # a protocol error met while earlier pipelined requests were still being answered:
        # sent after their answers, then the connection closes
        self._pending: HTTPError | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._client = "-"

    # -- connection ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have its methods.
        self._transport = cast(asyncio.Transport, transport)
        peer = self._transport.get_extra_info("peername")
        if isinstance(peer, tuple) and peer:
            self._client = str(peer[0])
        self._conns.items.add(self)
        if self._conns.draining:
            self._transport.close()
            return
        # A new connection has HeaderTimeout, from now, to send its first request line and
        # headers (on_message_begin does not restart it for the first request).
        self._set_timer(self.cfg.header_timeout_ms, self._on_header_timeout)

    def eof_received(self) -> bool:
        """The client shut its write side: answer what it sent, then close (half-close)."""
        self._keep_alive = False
        # True keeps the transport open to write the answer of a request in progress
        return bool(self._busy or self._queue)

    def connection_lost(self, exc: Exception | None) -> None:
        self._conns.items.discard(self)
        self._cancel_timer()
        self._transport = None

    def _set_timer(self, ms: int, callback: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(ms / 1000, callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_header_timeout(self) -> None:
        self._timer = None
        if self._busy:
            return
        if self._phase is _IDLE and self._header_bytes == 0:
            self._close()  # nothing sent at all: just close
            return
        log.server_log.info(
            "client %s sent no complete headers within %d ms; closing",
            self._client,
            self.cfg.header_timeout_ms,
        )
        self._fail(HTTPError(408, detailed="the request headers took too long", close=True))

    def _on_body_timeout(self) -> None:
        self._timer = None
        if self._busy:
            return
        log.server_log.info(
            "client %s sent no complete body within %d ms; closing",
            self._client,
            self.cfg.body_timeout_ms,
        )
        self._fail(HTTPError(408, detailed="the request body took too long", close=True))

    def _on_keep_alive_timeout(self) -> None:
        self._timer = None
        if not self._busy and self._phase is _IDLE:
            self._close()

    def _close(self) -> None:
        self._cancel_timer()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def shutdown(self) -> None:
        """Graceful stop: close when idle, else after the response in progress."""
        self._keep_alive = False
        if not self._busy and self._phase in (_IDLE, _DONE) and not self._queue:
            # Idle: nothing to flush. abort() does not wait for a TLS peer's close_notify,
            # which an idle keep-alive client never sends.
            self._cancel_timer()
            if self._transport is not None and not self._transport.is_closing():
                self._transport.abort()

    # -- input --------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if len(data) <= _SLICE:
            self._feed(data)
            return
        # A large read is parsed in slices, so that the checks between them (chunk
        # extensions, an endless head) also see a message that arrived whole in one read.
        for start in range(0, len(data), _SLICE):
            if not self._feed(data[start : start + _SLICE]):
                return

    def _feed(self, data: bytes) -> bool:
        """Parse ``data``; False when the connection takes no more input."""
        if self._transport is None or self._transport.is_closing():
            return False
        room = self.cfg.max_header_size - self._header_bytes
        if len(data) > room > 0 and self._phase is not _BODY:
            # A head in progress may end in this piece past the limit. Parse the bytes it may
            # still take first: if it is still incomplete after them, its raw count is at the
            # limit and on_headers_complete refuses it (whitespace, which the parsed size
            # leaves out, is counted too). Only a long head (or a piece over the limit) gets here.
            return self._feed(data[:room]) and self._feed(data[room:])
        entry_phase, completed = self._phase, self._completed
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, HTTPError):
                self._fail(cause)
            else:
                log.server_log.error("connection from %s failed: %r", self._client, cause)
                self._fail(HTTPError(400, close=True))
            return False
        except httptools.HttpParserUpgrade:
            # An upgrade we do not speak (h2c, websocket): the request was complete; answer it
            # over HTTP/1.1 and close afterwards.
            self._keep_alive = False
            self._transport.pause_reading()
            return False
        except httptools.HttpParserError as exc:
            self._fail(HTTPError(400, detailed=_parser_detail(exc), close=True))
            return False
        if self._phase is _BODY and self._chunked:
            # what a chunked body sent beyond its data and framing: chunk extensions
            if entry_phase is _BODY:
                self._wire_body += len(data)
            elif entry_phase is _IDLE and self._completed == completed:
                self._wire_body = max(0, len(data) - self._head_size)  # after the head
            extra = self._wire_body - self._body_size - _CHUNK_FRAMING * (self._chunks + 1)
            if extra > CHUNK_EXTENSIONS_LIMIT:
                self._fail(HTTPError(413, detailed="the chunk extensions are too long", close=True))
                return False
            return True
        if self._phase is _HEADERS:
            # The head is still incomplete: count its raw bytes too, so that a header line
            # that never ends (which the parser does not report) is caught as well.
            if self._completed != completed or entry_phase is _BODY:
                # another message ended in this chunk: what was parsed of this one
                self._header_bytes = self._head_size
            elif entry_phase is _HEADERS:
                self._header_bytes += len(data)  # the whole chunk belongs to this head
            else:
                self._header_bytes = len(data)  # this head began at the chunk's start
            if max(self._header_bytes, self._head_size) > self.cfg.max_header_size:
                self._fail(HTTPError(431, close=True))
                return False
        return True

    def on_message_begin(self) -> None:
        self._phase = _HEADERS
        self._url = b""
        self._headers = []
        self._header_bytes = 0
        self._head_size = 0
        self._body = []
        self._body_size = 0
        self._chunked = False
        self._chunks = 0
        self._wire_body = 0
        if self._completed:
            # A later request on a kept-alive connection: its idle wait was KeepAliveTimeout's,
            # its headers get HeaderTimeout from this first byte. The first request's deadline
            # runs from connection_made, so a client cannot idle and then take it again.
            self._set_timer(self.cfg.header_timeout_ms, self._on_header_timeout)

    def on_url(self, url: bytes) -> None:
        if not self._url:
            # the request line around the target: method, two spaces, HTTP/1.1, CRLF
            self._head_size += len(self._parser.get_method()) + 12
        self._url += url
        self._head_size += len(url)
        if self._head_size > self.cfg.max_header_size:
            raise HTTPError(431, close=True)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._phase is _BODY:
            # A trailer field of a chunked body: part of the body (RFC 9112 7.1), counted
            # against its limit and discarded (RFC 9112 7.1.2), never merged into the
            # headers: an ``Authorization`` trailer must not authorise the request.
            self._body_size += len(name) + len(value) + 4
            if self._body_size > self._body_limit:
                raise HTTPError(
                    413, detailed=f"the body may be at most {self._body_limit} bytes", close=True
                )
            return
        self._head_size += len(name) + len(value) + 4  # "name: value\r\n"
        if self._head_size > self.cfg.max_header_size:
            raise HTTPError(431, close=True)
        self._headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self._head_size += 2  # the blank line
        if self._head_size > self.cfg.max_header_size or (
            self._header_bytes >= self.cfg.max_header_size
        ):
            # the second: the raw head was still incomplete at the limit (see _feed)
            raise HTTPError(431, close=True)
        self._phase = _BODY
        self._header_bytes = 0
        parser = self._parser
        authorization: str | None = None
        length = -1
        expect = False
        chunked = False
        hosts = 0
        for name, value in self._headers:
            if name == "host":
                hosts += 1
            elif name == "authorization":
                if authorization is not None:
                    raise HTTPError(400, detailed="repeated Authorization header", close=True)
                authorization = value
            elif name == "content-length":
                length = int(value)  # llhttp validated the digits
            elif name == "transfer-encoding":
                # llhttp insists on chunked last; a coding before it (gzip, chunked) would
                # reach the handler still encoded: refuse it (RFC 9112 6.1).
                if value.strip().lower() != "chunked":
                    raise HTTPError(
                        501, detailed="only Transfer-Encoding: chunked is supported", close=True
                    )
                chunked = True
            elif name == "expect":
                if value.strip().lower() != "100-continue":
                    raise HTTPError(417, close=True)
                expect = True
        version = parser.get_http_version()
        if version != "1.1" and version != "1.0":
            # llhttp also parses HTTP/0.9 and HTTP/2.0 request lines (RFC 9110 15.6.6)
            raise HTTPError(
                505, detailed=f"HTTP/{version} is not supported: send HTTP/1.1", close=True
            )
        self._http10 = version == "1.0"
        if hosts > 1 or (hosts == 0 and version == "1.1"):
            # RFC 9112 3.2: an HTTP/1.1 request has exactly one Host
            raise HTTPError(400, detailed="the request needs exactly one Host header", close=True)
        if not self._keep_alive or not parser.should_keep_alive():
            self._keep_alive = False
        # SPEC 7: the route's body limit, before the body is read (the port's policy)
        limit = self._body_limit = self.app.body_limit(self._url, length, chunked)
        if length > limit:
            raise HTTPError(413, detailed=f"the body may be at most {limit} bytes", close=True)
        self._chunked = chunked
        self._authorization = authorization
        if length > 0 or chunked:
            self._set_timer(self.cfg.body_timeout_ms, self._on_body_timeout)
            if expect and self._transport is not None:
                self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        else:
            self._cancel_timer()

    def on_chunk_header(self) -> None:
        self._chunks += 1

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._body_limit:
            raise HTTPError(
                413, detailed=f"the body may be at most {self._body_limit} bytes", close=True
            )
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._phase = _DONE
        self._completed += 1
        self._cancel_timer()
        method = self._parser.get_method().decode("ascii", "replace")
        body = b"".join(self._body) if self._body else b""
        request = Request(
            method,
            self._url,
            self._headers,
            body,
            self._client,
            self.cfg.port,
            self._authorization,
        )
        keep = Keep.CLOSE
        if self._keep_alive and self._parser.should_keep_alive():
            keep = Keep.OPEN_10 if self._http10 else Keep.OPEN
        if self._busy:
            self._queue.append((request, keep))
            if self._transport is not None:
                self._transport.pause_reading()
            return
        self._start(request, keep)

    # -- output -------------------------------------------------------------------------------
    def _start(self, request: Request, keep: Keep) -> None:
        self._busy = True
        self._loop.create_task(self._serve(request, keep))

    async def _serve(self, request: Request, keep: Keep) -> None:
        try:
            reply = await self.app.handle(request)
        except BaseException as exc:  # never out of the task: SystemExit would end the loop
            if is_cancellation(exc):
                raise
            log.server_log.exception("request pipeline failed")
            reply = error_reply(HTTPError(500))
        transport = self._transport
        if transport is None or transport.is_closing():
            self._busy = False
            return
        if reply.close or self._conns.draining:
            keep = Keep.CLOSE
        elif not self._keep_alive and not self._queue and self._pending is None:
            # nothing follows this answer on a connection that ends (the client half-closed,
            # an upgrade); pipelined requests read before an end are answered first
            keep = Keep.CLOSE
        transport.write(encode_reply(reply, keep))
        self._busy = False
        if keep is Keep.CLOSE:
            self._keep_alive = False
            self._close()
            return
        if self._queue:
            nxt, nkeep = self._queue.pop(0)
            self._start(nxt, nkeep)
            return
        if self._pending is not None:
            # a bad request read behind the ones just answered: its answer, then close
            pending, self._pending = self._pending, None
            self._fail(pending)
            return
        if self._phase is _DONE:
            self._phase = _IDLE
        transport.resume_reading()
        if self._phase is _IDLE:
            self._set_timer(self.cfg.keep_alive_timeout_ms, self._on_keep_alive_timeout)
        elif self._timer is None:
            # the next request's header or body deadline passed while this one was served
            if self._phase is _HEADERS:
                self._on_header_timeout()
            else:
                self._on_body_timeout()

    def _fail(self, exc: HTTPError) -> None:
        """Answer a protocol-level error and close."""
        self._keep_alive = False
        self._cancel_timer()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._busy:
            # pipelined requests read before this error are answered first, in order; this
            # error's answer follows them (see _serve), then the connection closes
            if self._pending is None:
                self._pending = exc
            transport.pause_reading()
            return
        reply = error_reply(exc)
        transport.write(encode_reply(reply, Keep.CLOSE))
        log.access_log.info(
            "- - %d protocol error (%s) client=%s port=%s",
            exc.status,
            exc.detailed or exc.message,
            self._client,
            self.cfg.port,
        )
        transport.close()


def _parser_detail(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text[:200]
