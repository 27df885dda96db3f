"""HTTP/1.1 connections: httptools (llhttp, strict) parses, this module enforces SPEC 7.

llhttp already refuses a bare LF, ``Content-Length`` with ``Transfer-Encoding``, a duplicate
``Content-Length``, bad chunking, obsolete line folding and invalid header tokens (400 and
close). This layer adds what no engine gives together: the header-size and header-count
limits (431), the header, body and keep-alive deadlines, the body limit before and while
reading (413), a repeated ``Authorization`` and HTTP/1.0 with ``Transfer-Encoding`` (400),
``100 Continue`` only once the port admitted the request (:meth:`PortHandler.admit`; an
HTTP/1.0 request's ``Expect`` is ignored, RFC 9110 10.1.1), the body of a request that asks
for an ``Upgrade`` (fwrest does not upgrade), pipelining in order with
at most :data:`WRITE_BUFFER_HIGH` bytes of answers held for a client that does not read
(SPEC 7.1), and a graceful drain. It also holds the ``Host`` field to RFC 9112 3.2 (exactly
one in HTTP/1.1, a valid ``host[:port]``, the authority of an absolute-form target in its
place) and drops header fields whose names hold ``_`` (as nginx does), which a proxy or a
CGI-style gateway may take for the ``-`` name (``Content_Length``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final, cast

import httptools

from fwrest import log
from fwrest._native import native_encoder, selected
from fwrest.config.hosts import valid_host_field
from fwrest.config.model import ServerConfig
from fwrest.context.certs import with_thumbprint
from fwrest.context.request_id import carried_request_id, new_request_id
from fwrest.errors import HTTPError, StreamCut, is_cancellation
from fwrest.server.connstate import DEADLINES, NEXT, Deadline, Event, State
from fwrest.wire import (
    Keep,
    PortHandler,
    Reply,
    Request,
    close_stream,
    coded_body,
    encode_reply,
    expects_continue,
    head_answer,
    protocol_refusal,
    refusal,
    transfer_coding_refusal,
)

__all__ = ["ConnectionSet", "HttpProtocol", "asks_close"]


# module names of the states (an enum class attribute costs a slow lookup per request);
# the states, the events and the table of transitions: server/connstate.py, docs/engine.md
_IDLE, _HEAD, _BODY, _DONE = State.IDLE, State.HEAD, State.BODY, State.DONE
_READY, _CLOSED = State.READY, State.CLOSED
_MESSAGE_BEGIN, _HEAD_COMPLETE = Event.MESSAGE_BEGIN, Event.HEAD_COMPLETE
_MESSAGE_COMPLETE, _READ_ON = Event.MESSAGE_COMPLETE, Event.READ_ON
_ADMIT, _ADMITTED, _HANDLE = Event.ADMIT, Event.ADMITTED, Event.HANDLE
_STREAM, _ANSWERED, _LOST = Event.STREAM, Event.ANSWERED, Event.LOST
# module names of the members: an enum class attribute costs a slow lookup per request
_CLOSE, _OPEN, _OPEN_10 = Keep.CLOSE, Keep.OPEN, Keep.OPEN_10
# Chunk extensions are framing the parser skips, never handed to the body: bounded on their
# own, else a client streams an unlimited body past MaxBodySize (as in CVE-2024-22019).
CHUNK_EXTENSIONS_LIMIT = 16384
_CHUNK_FRAMING = 20  # per chunk: up to 16 hex digits and two CRLFs
_SLICE = 8192  # bytes parsed at a time
# SPEC 7.1: answers held for a client that does not read them. Above this the connection stops
# reading (and answering) until the client has taken all but a quarter of it; a connection
# whose answers make no progress for BodyTimeout is closed.
WRITE_BUFFER_HIGH = 65536
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# Host values found valid, per worker: most connections send one of a few (bounded)
_HOSTS_OK: set[str] = set()
_HOSTS_OK_SIZE = 256
_ABSOLUTE = (b"http://", b"https://")
# Linux's TCP state once the peer's FIN came (tcp_info's first byte), and the option that reads it
_CLOSE_WAIT = 8
_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None)


def _host_ok(value: str) -> bool:
    """Whether a ``Host`` value (or an absolute-form target's authority) is ``host[:port]``
    (RFC 9112 3.2; ``config/hosts.py``'s grammar), its surrounding whitespace aside."""
    if value in _HOSTS_OK:
        return True
    if not valid_host_field(value.strip(" \t")):
        return False
    if len(_HOSTS_OK) >= _HOSTS_OK_SIZE:
        _HOSTS_OK.clear()
    _HOSTS_OK.add(value)
    return True


def asks_close(headers: list[tuple[str, str]]) -> bool:
    """Whether a ``Connection`` field lists the ``close`` option (RFC 9112 9.6). Asked of an
    HTTP/1.0 request the parser would keep: llhttp (httptools' too) keeps one that names
    ``keep-alive`` whatever else its ``Connection`` says; in HTTP/1.1 it sees ``close``."""
    return any(
        name == "connection"
        and any(option.strip(" \t").lower() == "close" for option in value.split(","))
        for name, value in headers
    )


def absolute_form(url: bytes, headers: list[tuple[str, str]]) -> None:
    """An absolute-form target (``GET http://h/p``): its authority becomes the request's host
    in ``headers``, whatever ``Host`` said (RFC 9112 3.2.2), so that every reader of ``Host``
    (the REST object, the Host check of state-changing routes, URLs) agrees with the target.
    An authority that is no ``host[:port]`` (a user name, empty) is refused. Both engines'
    (the native one calls it: the form is rare).

    Raises:
        HTTPError: 400, the connection closed after it.
    """
    rest = url[url.index(b"://") + 3 :]
    end = len(rest)
    for mark in (b"/", b"?", b"#"):
        found = rest.find(mark)
        if 0 <= found < end:
            end = found
    target_host = rest[:end].decode("latin-1")
    if not _host_ok(target_host):
        raise HTTPError(
            400,
            detailed="the request target's authority must be host[:port] and nothing else",
            close=True,
        )
    for i, (name, _) in enumerate(headers):
        if name == "host":
            headers[i] = ("host", target_host)
            return
    headers.append(("host", target_host))  # HTTP/1.0 may send no Host


# The parser: httptools' (the pure engine) or the native engine's (fwrest/_native, a C
# extension doing the per-request work of on_url, on_header, on_body and on_chunk_header);
# FWREST_ENGINE chooses, once per process. ENGINE says which serves (the start line, check).
try:
    _NATIVE_PARSER, ENGINE = selected()
except ValueError as _exc:
    _NATIVE_PARSER, ENGINE = None, f"pure ({_exc})"
# the reply encoder: with the native parser, the native engine's (wire.encode_reply in C,
# byte for byte)
_ENCODE_REPLY: Callable[[Reply, Keep, bool], bytes] = encode_reply
if _NATIVE_PARSER is not None:
    _ENCODE_REPLY = native_encoder() or encode_reply
# what the native parser tells of a head, as bits of one int (fwrest/_native/engine.pyx's
# FLAG_* values): its begin is told with it, HTTP/1.0, llhttp's keep-alive, an Upgrade, a
# Transfer-Encoding field, Expect: 100-continue
_N_BEGIN: Final = 1
_N_HTTP10: Final = 2
_N_KEEP: Final = 4
_N_UPGRADE: Final = 8
_N_CHUNKED: Final = 16
_N_EXPECT: Final = 32


# what the engine logs once per worker ("underscore": a header name with "_" was dropped)
_NOTED: set[str] = set()


# after a refusal, how long the client's remaining bytes are read and dropped at most before
# the connection closes (_linger)
_LINGER_MS = 2000


class _Stop(Exception):
    """Raised from a parser callback: parse nothing more on this connection."""


class _BodyReader:
    """The parser callbacks that read the body of a request that asked for an ``Upgrade``.

    httptools tells llhttp to skip the body of such a request (it expects the bytes after the
    head to be another protocol), so fwrest, which does not upgrade, reads that body with a
    parser of its own: fed a head of the same framing (length or chunked), then the client's
    bytes. Its body, chunk and trailer callbacks are the connection's; when the body is
    complete the request is handed over and nothing after it is parsed (the connection closes
    after the answer, as for any request that asked for an upgrade).
    """

    __slots__ = ("conn", "started")

    def __init__(self, conn: HttpProtocol) -> None:
        self.conn = conn
        self.started = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.started:  # a trailer field (the head's are the made-up ones)
            self.conn.on_header(name, value)

    def on_headers_complete(self) -> None:
        self.started = True

    def on_chunk_header(self) -> None:
        self.conn.on_chunk_header()

    def on_body(self, body: bytes) -> None:
        self.conn.on_body(body)

    def on_message_complete(self) -> None:
        self.conn.on_message_complete()
        raise _Stop


class _Head:
    """What the head being read has used of its budgets: ``MaxHeaderSize`` (the parsed size
    and the raw bytes, for a line that never ends) and ``MaxHeaders`` (the dropped fields
    count too). Reset at each request's first byte."""

    __slots__ = ("dropped", "parsed", "raw")

    def __init__(self) -> None:
        self.raw = 0  # raw bytes of an incomplete head (see _feed)
        self.parsed = 0  # parsed size of the request line and headers so far
        self.dropped = 0  # header fields dropped (a "_" in the name)


class _Body:
    """The body being read and its budgets: the route's limit (``MaxBodySize`` or the port's
    policy, PortHandler.body_limit) and, for a chunked body, what its framing may add (the
    chunk extensions' limit). Reset at each request's first byte."""

    __slots__ = ("chunked", "chunks", "limit", "pieces", "size", "wire")

    def __init__(self, limit: int) -> None:
        self.pieces: list[bytes] = []
        self.size = 0
        self.limit = limit
        self.chunked = False  # the body is chunked
        self.chunks = 0  # chunks of the body
        self.wire = 0  # raw bytes received while the body was being read


class _WriteFlow:
    """Write flow control (SPEC 7.1): paused above WRITE_BUFFER_HIGH bytes of answers, with
    the write deadline while paused; and a streamed answer (SPEC 10.3, 10.5): the task
    writing it, and what it waits on while the client does not read (resume_writing or
    connection_lost ends the wait)."""

    __slots__ = ("drain", "held", "leaves", "paused", "streaming", "task", "timer")

    def __init__(self) -> None:
        self.paused = False
        self.timer: asyncio.TimerHandle | None = None  # the write deadline
        self.held = 0  # answer bytes held when the write deadline was last armed
        self.task: asyncio.Task[None] | None = None
        self.streaming = False
        # the client's end of input during the stream means it went away (False: it had shut
        # its side before the stream began, and waits for the answer)
        self.leaves = False
        self.drain: asyncio.Future[None] | None = None


class _Pipeline:
    """What waits behind the request being answered, in order: requests read whole (at most
    one slice of them), then a protocol error met behind them, then a request that expects
    100 Continue, then bytes not parsed yet."""

    __slots__ = ("admission", "pending", "queue", "unparsed")

    def __init__(self) -> None:
        self.queue: list[tuple[Request, Keep, bool]] = []
        # a protocol error met while earlier pipelined requests were still being answered:
        # sent after their answers, then the connection closes
        self.pending: HTTPError | None = None
        # the head of a request that expects 100 Continue, waiting for the answers before it
        # to be written; then the port is asked to admit it (see _expect_continue)
        self.admission: Request | None = None
        # bytes read behind queued requests, not parsed yet (data_received)
        self.unparsed = b""


class ConnectionSet:
    """The open connections of one worker (or of its monitor's port), for a graceful drain.

    A drain (:meth:`drain`) closes no connection by itself: each one closes after an answer
    that no request of it follows (requests pipelined behind the one in progress are answered
    first), and a request that comes on a kept-alive connection meanwhile is served, its
    answer saying ``Connection: close`` (the probes answer 503: SPEC 5, 13.3). The idle ones
    are closed by :meth:`close_idle` (a stop, once nothing is in progress) or by their
    ``KeepAliveTimeout`` (a reload: the client never sends a request on a connection closed
    under it, and the service serves on, SPEC 13.1).
    """

    def __init__(self) -> None:
        self.items: set[HttpProtocol] = set()
        self.draining = False
        self.closing_idle = False  # a connection made now is closed at once

    def drain(self) -> None:
        self.draining = True

    @property
    def busy(self) -> bool:
        """Whether a connection has a request in progress (or one arriving)."""
        return any(not conn.idle for conn in self.items)

    def close_idle(self) -> None:
        """Close the idle connections now, the others after their answer in progress."""
        self.draining = self.closing_idle = True
        for conn in list(self.items):
            conn.shutdown()


class HttpProtocol(asyncio.Protocol):
    """One client connection."""

    __slots__ = (
        "_answering",
        "_authorization",
        "_body",
        "_client",
        "_completed",
        "_conns",
        "_flow",
        "_foreign",
        "_head",
        "_headers",
        "_http10",
        "_keep_alive",
        "_lingering",
        "_loop",
        "_method",
        "_native",
        "_parser",
        "_peer_cert",
        "_pipe",
        "_reading",
        "_timer",
        "_transport",
        "_upgrade_body",
        "_url",
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
        # made in connection_made: on a TLS port the protocol is made when the connection is
        # accepted, before its handshake, and the parser holds the protocol's bound methods (a
        # cycle only the cyclic GC frees); a handshake that never completes makes none
        self._parser: Any  # httptools.HttpRequestParser, or the native RequestParser
        self._transport: asyncio.Transport | None = None
        self._native = False  # the parser is the native engine's (see connection_made)
        # the two sides of the connection (server/connstate.py): the request being read,
        # and what the server does with the requests read; moved only by _read_to/_answer_to
        self._reading = _IDLE
        self._answering = _READY
        # the request being read
        self._url = b""
        self._method = ""
        self._headers: list[tuple[str, str]] = []
        self._authorization: str | None = None  # the current request's Authorization value
        self._http10 = False  # the request being read is HTTP/1.0 (its answer: _serve's own)
        # the request line beginning a read names RTSP/ or ICE/ (the pure engine: see _feed)
        self._foreign = False
        self._head = _Head()
        self._body = _Body(cfg.max_body_size)
        # the framing of an upgrade request's body, read by a _BodyReader (see _feed)
        self._upgrade_body: bytes | None = None
        self._completed = 0  # messages parsed on this connection
        self._keep_alive = True  # False: the connection closes after its answers
        self._lingering = False  # a refusal was written: what still comes is dropped
        self._timer: asyncio.TimerHandle | None = None  # the reading side's deadline
        self._pipe = _Pipeline()
        self._flow = _WriteFlow()
        self._client = "-"
        # the client's certificate, taken once per connection (SPEC 11.2; connection_made)
        self._peer_cert: Mapping[str, object] | None = None

    # -- states (server/connstate.py) ---------------------------------------------------------
    def _read_to(self, event: Event) -> None:
        """Step the reading side through the table. The steps every request takes (its
        first byte, head, end; HANDLE, ANSWERED, READ_ON) are this method written out where
        they happen: a call each cost the pure build measurably."""
        nxt = NEXT[self._reading][event]
        if nxt is None:
            self._illegal(self._reading, event)
        else:
            self._reading = nxt

    def _answer_to(self, event: Event) -> None:
        """Step the answering side through the table."""
        nxt = NEXT[self._answering][event]
        if nxt is None:
            self._illegal(self._answering, event)
        else:
            self._answering = nxt

    def _illegal(self, state: State, event: Event) -> None:
        """An event the table does not allow in its state: a bug of the engine. The worker
        serves on; this connection, whose state is unknown, is closed without an answer."""
        log.server_log.error(
            "engine state error: event %s in state %s (client %s); closing the connection",
            event.name,
            state.name,
            self._client,
        )
        transport = self._transport
        if transport is not None:
            transport.abort()

    def _deadline_due(self, deadline: Deadline) -> bool:
        """Whether ``deadline`` may fire now, checked as it fires: a reading deadline in the
        reading states of DEADLINES, the write deadline while the write flow is paused. One
        that may not is a bug (logged, the connection closed)."""
        if deadline in DEADLINES[self._reading] and (
            deadline is not Deadline.WRITE or self._flow.paused
        ):
            return True
        log.server_log.error(
            "engine state error: %s deadline in state %s (client %s); closing the connection",
            deadline.name,
            self._reading.name,
            self._client,
        )
        transport = self._transport
        if transport is not None:
            transport.abort()
        return False

    # -- connection ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have its methods.
        self._transport = cast(asyncio.Transport, transport)
        if _NATIVE_PARSER is not None:
            cfg = self.cfg
            self._parser = _NATIVE_PARSER(
                self, cfg.max_header_size, cfg.max_headers, cfg.max_body_size
            )
            self._native = True
        else:
            self._parser = httptools.HttpRequestParser(self)
            # any HTTP/d.d version is parsed; on_headers_complete answers the ones not served
            # (505) and serves a later HTTP/1.x as 1.1 (RFC 9110 2.5)
            self._parser.set_dangerous_leniencies(lenient_version=True)
        self._transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        peer = self._transport.get_extra_info("peername")
        if isinstance(peer, tuple) and peer:
            self._client = str(peer[0])
        if self.cfg.tls.client_cert:
            # decoded by the TLS layer when the handshake completed: {} when it was not
            # verified, None when the client sent none (ClientCert.OPTIONAL)
            decoded = self._transport.get_extra_info("peercert") or None
            if decoded:
                # with its SHA-256 thumbprint, for certificate-bound tokens (SPEC 16.2)
                tls = self._transport.get_extra_info("ssl_object")
                der = tls.getpeercert(binary_form=True) if tls is not None else None
                decoded = with_thumbprint(decoded, der)
            self._peer_cert = decoded
        self._conns.items.add(self)
        if self._conns.closing_idle:
            self._transport.close()
            return
        # A new connection has HeaderTimeout, from now, to send its first request line and
        # headers (on_message_begin does not restart it for the first request).
        self._set_timer(self.cfg.header_timeout_ms, self._on_header_timeout)

    def eof_received(self) -> bool:
        """The client shut its write side: answer what it sent, then close (half-close); but
        during a streamed answer, with no request of it waiting, it went away (SPEC 10.5)."""
        if self._lingering:
            return False  # it read the refusal and is done: close now
        self._keep_alive = False
        pipe = self._pipe
        if self._flow.streaming and self._flow.leaves and not pipe.queue and not pipe.unparsed:
            # the client left while the stream was being sent (a socket's close(), an HTTP
            # client leaving the answer): close the stream now, as for a reset, rather than at
            # the second write that fails, which an idle stream makes 30 s later
            transport = self._transport
            if transport is not None:
                transport.abort()
            return False
        # True keeps the transport open to write the answer of a request in progress
        return bool(self._answering is not _READY or self._pipe.queue or self._pipe.unparsed)

    def connection_lost(self, exc: Exception | None) -> None:
        self._conns.items.discard(self)
        self._cancel_timer()
        self._wake_writer()
        if self._flow.streaming and self._flow.task is not None:
            # the client went away during a stream: stop waiting for its next piece, so
            # that the stream is closed now (SPEC 10.5: within 1 s)
            self._flow.task.cancel()
        if self._flow.timer is not None:
            self._flow.timer.cancel()
            self._flow.timer = None
        self._transport = None
        self._read_to(_LOST)
        self._answer_to(_LOST)

    # -- write flow control (SPEC 7.1) --------------------------------------------------------
    def pause_writing(self) -> None:
        """The transport holds more than WRITE_BUFFER_HIGH bytes the client has not taken:
        read nothing more and start no further answer until it has; close the connection if
        it takes nothing for BodyTimeout."""
        self._flow.paused = True
        transport = self._transport
        if transport is None:
            return
        if not transport.is_closing():
            transport.pause_reading()
        self._flow.held = transport.get_write_buffer_size()
        self._arm_write_timer()

    def _wake_writer(self) -> None:
        drain = self._flow.drain
        if drain is not None and not drain.done():
            drain.set_result(None)

    def resume_writing(self) -> None:
        self._flow.paused = False
        self._wake_writer()
        if self._flow.timer is not None:
            self._flow.timer.cancel()
            self._flow.timer = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._answering is _READY:
            self._next()  # what waited for the client to read
        elif self._flow.streaming and self._reading_free():
            # read on during a stream, as before the pause: its client's end (eof_received)
            # is seen at once, and a pipelined request is read and queued as usual
            transport.resume_reading()

    def _arm_write_timer(self) -> None:
        if self._flow.timer is not None:
            self._flow.timer.cancel()
        self._flow.timer = self._loop.call_later(
            self.cfg.body_timeout_ms / 1000, self._on_write_timeout
        )

    def _on_write_timeout(self) -> None:
        flow = self._flow
        flow.timer = None
        transport = self._transport
        if transport is None:
            return
        if not self._deadline_due(Deadline.WRITE):
            return
        held = transport.get_write_buffer_size()
        if held < self._flow.held:
            # the client took some: a slow reader, not a stuck one; another BodyTimeout
            self._flow.held = held
            self._arm_write_timer()
            return
        log.server_log.info(
            "client %s read none of %d answer bytes within %d ms; closing",
            self._client,
            held,
            self.cfg.body_timeout_ms,
        )
        self._keep_alive = False
        self._pipe.queue.clear()
        self._cancel_timer()
        transport.abort()  # close() would wait for the client to read the answers

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
        if not self._deadline_due(Deadline.HEADER):
            return
        if self._answering is not _READY:
            return
        if self._reading is _IDLE and self._head.raw == 0:
            self._close()  # nothing sent at all: just close
            return
        self._fail(
            HTTPError(408, detailed="the request headers took too long", close=True),
            f"client {self._client} sent no complete headers within "
            f"{self.cfg.header_timeout_ms} ms; closing",
        )

    def _on_body_timeout(self) -> None:
        self._timer = None
        if not self._deadline_due(Deadline.BODY):
            return
        if self._answering is not _READY:
            return
        self._fail(
            HTTPError(408, detailed="the request body took too long", close=True),
            f"client {self._client} sent no complete body within "
            f"{self.cfg.body_timeout_ms} ms; closing",
        )

    def _on_keep_alive_timeout(self) -> None:
        self._timer = None
        if not self._deadline_due(Deadline.KEEP_ALIVE):
            return
        if self._answering is _READY and self._reading is _IDLE:
            self._close()

    def _close(self) -> None:
        self._cancel_timer()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def _reading_free(self) -> bool:
        """Nothing held back by the pipeline (requests queued, bytes unparsed, an error or an
        admission waiting): reading paused only for the write flow may resume."""
        pipe = self._pipe
        held = bool(pipe.queue or pipe.unparsed) or pipe.pending is not None
        return not held and pipe.admission is None

    @property
    def idle(self) -> bool:
        """No request in progress, queued, held or arriving (a drain may close it)."""
        return (
            self._answering is _READY
            and self._reading in (_IDLE, _DONE)
            and not self._pipe.queue
            and not self._pipe.unparsed
            and self._pipe.pending is None
            and self._pipe.admission is None
        )

    @property
    def answering(self) -> bool:
        """Whether the task answering a request (a stream's, until it is closed) still runs."""
        task = self._flow.task
        return task is not None and not task.done()

    def give_up(self) -> None:
        """GracefulTimeout passed with this connection busy: close it now; a stream being sent
        is cut at once (its transport aborted, its iterator closed as for a client gone),
        rather than after its client took what the transport holds."""
        transport = self._transport
        if self._flow.streaming and transport is not None:
            self._cancel_timer()
            transport.abort()
        else:
            self._close()

    def shutdown(self) -> None:
        """Graceful stop: close when idle, else after the response in progress."""
        self._keep_alive = False
        if self._answering is _READY and self._reading in (_IDLE, _DONE) and not self._pipe.queue:
            # Idle: nothing to flush. abort() does not wait for a TLS peer's close_notify,
            # which an idle keep-alive client never sends.
            self._cancel_timer()
            transport = self._transport
            if transport is not None and not transport.is_closing():
                if self._flow.paused:
                    transport.close()  # answers still to take: the write deadline applies
                else:
                    transport.abort()

    # -- input --------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # after a refusal: dropped, unread (see _linger)
        pipe = self._pipe
        if pipe.queue or pipe.unparsed:
            self._hold(data)
            return
        if len(data) <= _SLICE:
            self._feed(data)
            return
        # A large read is parsed in slices, so that the checks between them (chunk
        # extensions, an endless head) also see a message that arrived whole in one read.
        for start in range(0, len(data), _SLICE):
            if self._pipe.queue:
                # pipelined requests wait behind the one being answered: keep the rest as
                # bytes, parsed when they are answered (a slice of requests at most is held
                # parsed, not a whole read of them)
                self._hold(data[start:])
                return
            if not self._feed(data[start : start + _SLICE]):
                return

    def _hold(self, data: bytes) -> None:
        self._pipe.unparsed += data
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def _feed(self, data: bytes) -> bool:
        """Parse ``data``; False when the connection takes no more input."""
        if self._transport is None or self._transport.is_closing():
            return False
        room = self.cfg.max_header_size - self._head.raw
        if len(data) > room > 0 and self._reading is not _BODY:
            # A head in progress may end in this piece past the limit. Parse the bytes it may
            # still take first: if it is still incomplete after them, its raw count is at the
            # limit and on_headers_complete refuses it (whitespace, which the parsed size
            # leaves out, is counted too). Only a long head (or a piece over the limit) gets here.
            return self._feed(data[:room]) and self._feed(data[room:])
        entry_state, completed = self._reading, self._completed
        if entry_state is _IDLE and not self._native:
            # httptools does not tell the request line's protocol, which llhttp also parses
            # as RTSP/ or ICE/: a line begun by this read is looked at here (one later in
            # it, behind a pipelined request, or cut by its end is not; the native engine
            # looks at every one); on_headers_complete refuses it
            self._foreign = _names_other_protocol(data)
        rest: bytes | None = None  # what follows an upgrade request's head
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            # the native engine names the callback's exception as the cause too, which no
            # raise overwrites; httptools only as the context
            cause = exc.__cause__ if exc.__cause__ is not None else exc.__context__
            if isinstance(cause, _Stop):  # an upgrade request's body is read: nothing more
                self._transport.pause_reading()
            elif isinstance(cause, HTTPError):
                self._fail(cause)
            else:
                note = f"connection from {self._client} failed: {cause!r}"
                self._fail(HTTPError(400, close=True), note, logging.ERROR)
            return False
        except httptools.HttpParserUpgrade as exc:
            # An upgrade we do not speak (h2c, websocket): the request is answered over
            # HTTP/1.1 and the connection closes afterwards (on_headers_complete). llhttp
            # stopped right after the head, skipping the body: read it (SPEC 7.1).
            if self._upgrade_body is None:  # no body: the request was complete
                self._transport.pause_reading()
                return False
            rest = data[exc.args[0] :]
        except httptools.HttpParserError as exc:
            # the refused request began this read when it is the read's first
            first = entry_state is _IDLE and self._completed == completed
            self._fail(_parse_refusal(exc, data if first else b""))
            return False
        if rest is not None:  # outside the except clause: the body's errors are its own
            self._read_upgrade_body()
            return self._feed(rest) if rest else True
        if self._reading is _BODY and self._body.chunked:
            # what a chunked body sent beyond its data and framing: chunk extensions
            if self._native:  # the native parser counts them (httptools: on_body...)
                self._body.size = self._parser.body_size
                self._body.chunks = self._parser.chunks
            if entry_state is _BODY:
                self._body.wire += len(data)
            elif entry_state is _IDLE and self._completed == completed:
                if self._native:  # the native parser counts the head (httptools: on_url...)
                    self._head.parsed = self._parser.parsed
                self._body.wire = max(0, len(data) - self._head.parsed)  # after the head
            extra = self._body.wire - self._body.size - _CHUNK_FRAMING * (self._body.chunks + 1)
            if extra > CHUNK_EXTENSIONS_LIMIT:
                self._fail(
                    HTTPError(
                        413,
                        detailed="the chunk extensions or a trailer field are too long",
                        close=True,
                    )
                )
                return False
            return True
        if self._reading is _HEAD:
            # The head is still incomplete: count its raw bytes too, so that a header line
            # that never ends (which the parser does not report) is caught as well.
            if self._native:  # the native parser counts the parsed size (httptools: on_url...)
                self._head.parsed = self._parser.parsed
            if self._completed != completed or entry_state is _BODY:
                # another message ended in this chunk: what was parsed of this one
                self._head.raw = self._head.parsed
            elif entry_state is _HEAD:
                self._head.raw += len(data)  # the whole chunk belongs to this head
            else:
                self._head.raw = len(data)  # this head began at the chunk's start
            if max(self._head.raw, self._head.parsed) > self.cfg.max_header_size:
                self._fail(HTTPError(431, close=True))
                return False
            if self._native:  # it refuses a head completed at the raw limit (431)
                self._parser.raw = self._head.raw
        return True

    def _read_upgrade_body(self) -> None:
        """Parse what follows an upgrade request's head as its body (see _BodyReader)."""
        framing = self._upgrade_body
        assert framing is not None
        self._upgrade_body = None
        self._native = False  # the body's pieces come to on_body and on_header now
        self._parser = httptools.HttpRequestParser(_BodyReader(self))
        self._parser.feed_data(b"POST / HTTP/1.1\r\nHost: h\r\n" + framing + b"\r\n\r\n")

    def on_message_begin(self) -> None:
        after = NEXT[self._reading][_MESSAGE_BEGIN]
        if after is None:
            self._illegal(self._reading, _MESSAGE_BEGIN)
        else:
            self._reading = after
        self._url = b""
        self._headers = []
        head = self._head
        head.dropped = head.raw = head.parsed = 0
        body = self._body
        body.pieces = []
        body.size = body.chunks = body.wire = 0
        body.chunked = False
        if self._completed:
            # A later request on a kept-alive connection: its idle wait was KeepAliveTimeout's,
            # its headers get HeaderTimeout from this first byte. The first request's deadline
            # runs from connection_made, so a client cannot idle and then take it again.
            self._set_timer(self.cfg.header_timeout_ms, self._on_header_timeout)

    def on_url(self, url: bytes) -> None:
        if not self._url:
            # the request line around the target: method, two spaces, HTTP/1.1, CRLF
            self._head.parsed += len(self._parser.get_method()) + 12
        self._url += url
        self._head.parsed += len(url)
        if self._head.parsed > self.cfg.max_header_size:
            raise HTTPError(431, close=True)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._reading is _BODY:
            # A trailer field of a chunked body: part of the body (RFC 9112 7.1), counted
            # against its limit and discarded (RFC 9112 7.1.2), never merged into the
            # headers: an ``Authorization`` trailer must not authorise the request.
            self._body.size += len(name) + len(value) + 4
            if self._body.size > self._body.limit:
                raise HTTPError(
                    413, detailed=f"the body may be at most {self._body.limit} bytes", close=True
                )
            return
        self._head.parsed += len(name) + len(value) + 4  # "name: value\r\n"
        if self._head.parsed > self.cfg.max_header_size:
            raise HTTPError(431, close=True)
        if len(self._headers) + self._head.dropped >= self.cfg.max_headers:
            # SPEC 7.1: thousands of tiny fields fit in 16 KiB, each a callback and a tuple
            raise HTTPError(
                431, detailed=f"at most {self.cfg.max_headers} header fields", close=True
            )
        if b"_" in name:
            # dropped, as nginx does (underscores_in_headers off): a proxy or a CGI-style
            # gateway may take Content_Length for Content-Length, so the application could
            # read a header this server never framed the request by
            self._head.dropped += 1
            self._note_underscore(name)
            return
        if value[-1:] in b" \t":
            # RFC 9110 5.5: the value excludes the whitespace after it (llhttp drops the
            # whitespace before it, not after: the parsed size above counts it)
            value = value.rstrip(b" \t")
        self._headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    # -- the native parser's calls (fwrest/_native/engine.pyx) ---------------------------------
    def _native_request(
        self,
        method: str,
        url: bytes,
        headers: list[tuple[str, str]],
        authorization: str | None,
        flags: int,
    ) -> None:
        """A request without a body, read whole, its head checked by the native parser: its
        begin (``flags`` & _N_BEGIN: not told yet), head and end in one call, the states and
        the keep-alive flag as httptools' calls and on_headers_complete would have left them
        (the header deadline that its begin would have started and its head stopped is not
        started: no code of the protocol runs in between)."""
        reading = self._reading
        if flags & _N_BEGIN:
            after = NEXT[reading][_MESSAGE_BEGIN]
            if after is None:
                self._illegal(reading, _MESSAGE_BEGIN)
                return
            reading = after
        else:
            self._head.raw = 0
        after = NEXT[reading][_HEAD_COMPLETE]
        if after is None:
            self._illegal(reading, _HEAD_COMPLETE)
            return
        done = NEXT[after][_MESSAGE_COMPLETE]
        if done is None:
            self._illegal(after, _MESSAGE_COMPLETE)
            return
        self._reading = done
        http10 = self._http10 = bool(flags & _N_HTTP10)
        if not flags & _N_KEEP:
            self._keep_alive = False
        self._completed += 1
        self._cancel_timer()
        self._pipe.admission = None
        request = Request(
            method, url, headers, b"", self._client, self.cfg.port, authorization, self._peer_cert
        )
        keep = _CLOSE
        if self._keep_alive:
            keep = _OPEN_10 if http10 else _OPEN
        self._dispatch(request, keep, http10)

    def _native_head(
        self,
        method: str,
        url: bytes,
        headers: list[tuple[str, str]],
        authorization: str | None,
        length: int,
        flags: int,
    ) -> int:
        """The head of a request with a body (or an Upgrade), checked by the native parser
        (``flags``: see _native_request and _N_*): its begin and head, as on_message_begin and
        on_headers_complete would have left them. The body limit, for the parser."""
        if flags & _N_BEGIN:
            self.on_message_begin()
        self._url = url
        self._headers = headers
        self._method = method
        self._read_to(_HEAD_COMPLETE)
        self._head.raw = 0
        self._http10 = bool(flags & _N_HTTP10)
        if not flags & _N_KEEP:
            self._keep_alive = False
        chunked = bool(flags & _N_CHUNKED)
        if flags & _N_UPGRADE:
            self._upgraded(method, length, chunked)
        self._body_begins(length, chunked, bool(flags & _N_EXPECT), authorization)
        return self._body.limit

    def _note_underscore(self, name: bytes) -> None:
        """A header field with ``_`` in its name was dropped (either engine): said once per
        worker."""
        if "underscore" not in _NOTED:
            _NOTED.add("underscore")
            log.server_log.info(
                "a request header field with '_' in its name was dropped (%s; and any "
                "later ones, not logged): send it with '-' instead",
                log.escape(name.decode("latin-1")[:100]),
            )

    def on_headers_complete(self) -> None:
        self._head.parsed += 2  # the blank line
        if self._head.parsed > self.cfg.max_header_size or (
            self._head.raw >= self.cfg.max_header_size
        ):
            # the second: the raw head was still incomplete at the limit (see _feed)
            raise HTTPError(431, close=True)
        after = NEXT[self._reading][_HEAD_COMPLETE]
        if after is None:
            self._illegal(self._reading, _HEAD_COMPLETE)
        else:
            self._reading = after
        self._head.raw = 0
        parser = self._parser
        # this request's method from here on (a refusal of its head answers a HEAD as one)
        method = self._method = parser.get_method().decode("ascii", "replace")
        authorization: str | None = None
        length = -1
        expect = False
        chunked = False
        coding = ""  # the Transfer-Encoding fields, joined
        content_coding = ""
        hosts = 0
        host = ""
        version = parser.get_http_version()
        for name, value in self._headers:
            if name == "host":
                hosts += 1
                host = value
            elif name == "authorization":
                if authorization is not None:
                    raise HTTPError(400, detailed="repeated Authorization header", close=True)
                authorization = value
            elif name == "content-length":
                length = int(value)  # llhttp validated the digits
            elif name == "transfer-encoding":
                chunked = True
                coding = f"{coding},{value}" if coding else value
            elif name == "expect" and version != "1.0":
                # RFC 9110 10.1.1 and 15.2: an HTTP/1.0 request's Expect is ignored (no 100
                # to a 1.0 client, no 417)
                asks = expects_continue(value)  # a list: empty elements ask nothing
                if asks is None:
                    raise HTTPError(417, close=True)
                if asks:
                    expect = True
            elif name == "content-encoding":
                content_coding = f"{content_coding},{value}" if content_coding else value
        if self._foreign:
            self._foreign = False
            raise protocol_refusal()
        if version[:2] != "1.":
            # HTTP/0.9, 2.0, 3.0...: a major version not served (RFC 9110 15.6.6); a later
            # HTTP/1.x is served as 1.1, the highest minor version it conforms to (RFC 9110 2.5)
            raise HTTPError(
                505, detailed=f"HTTP/{version} is not supported: send HTTP/1.1", close=True
            )
        self._http10 = version == "1.0"
        if chunked:
            if self._http10:
                # RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 request is faulty framing
                # (an HTTP/1.0 hop would read the body differently)
                raise HTTPError(
                    400, detailed="HTTP/1.0 requests cannot use Transfer-Encoding", close=True
                )
            refused = transfer_coding_refusal(coding)
            if refused is not None:
                # a coding after chunked (RFC 9112 6.3: 400), or one before it, which would
                # reach the handler still encoded (6.1: 501)
                raise refused
        if hosts > 1 or (hosts == 0 and not self._http10):
            # RFC 9112 3.2: an HTTP/1.1 request has exactly one Host
            raise HTTPError(400, detailed="the request needs exactly one Host header", close=True)
        if hosts and not _host_ok(host):
            # RFC 9112 3.2: no user name, path, list or empty value; a port up to 65535
            raise HTTPError(
                400, detailed="the Host header must be host[:port] and nothing else", close=True
            )
        url = self._url
        if not url.startswith(b"/") and url[:8].lower().startswith(_ABSOLUTE):
            absolute_form(self._url, self._headers)
        if (
            not self._keep_alive
            or not parser.should_keep_alive()
            or (self._http10 and asks_close(self._headers))
        ):
            self._keep_alive = False
        if parser.should_upgrade():
            self._upgraded(method, length, chunked)
        if content_coding and (length > 0 or chunked):
            # a compressed body would reach the handler still compressed: 415, unread
            refused = coded_body(content_coding)
            if refused is not None:
                raise refused
        self._body_begins(length, chunked, expect, authorization)

    def _upgraded(self, method: str, length: int, chunked: bool) -> None:
        """fwrest does not upgrade: the request is answered over HTTP/1.1, then the
        connection closes (nothing after it is read: a proxy may take it as a tunnel).
        llhttp skips the body (httptools has it do so); _feed reads it (SPEC 7.1). CONNECT's
        bytes after the head are a tunnel's, never a body (RFC 9110 9.3.6)."""
        self._keep_alive = False
        if method != "CONNECT" and (length > 0 or chunked):
            self._upgrade_body = (
                b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % length
            )

    def _body_begins(
        self, length: int, chunked: bool, expect: bool, authorization: str | None
    ) -> None:
        """The head is read and checked: the body's limit (413 before a byte of it), its
        deadline, and ``100 Continue``'s admission."""
        # SPEC 7: the route's body limit, before the body is read (the port's policy)
        limit = self._body.limit = self.app.body_limit(self._url, length, chunked)
        if length > limit:
            raise HTTPError(413, detailed=f"the body may be at most {limit} bytes", close=True)
        self._body.chunked = chunked
        self._authorization = authorization
        if length > 0 or chunked:
            self._set_timer(self.cfg.body_timeout_ms, self._on_body_timeout)
            if expect:
                self._expect_continue()
        else:
            self._cancel_timer()

    def _expect_continue(self) -> None:
        """The client waits for ``100 Continue`` before it sends the body: read nothing more
        until the port admitted the request (its guard passed). It is asked once the answers
        before this request are written; until then the request is held like a pipelined one
        (on_message_complete: a client that does not wait sends the body anyway)."""
        transport = self._transport
        if transport is None:
            return
        transport.pause_reading()
        head = Request(
            self._method,
            self._url,
            self._headers,
            b"",
            self._client,
            self.cfg.port,
            self._authorization,
            self._peer_cert,
        )
        if (
            self._answering is not _READY
            or self._pipe.queue
            or self._flow.paused
            or self._pipe.pending is not None
        ):
            self._pipe.admission = head
        else:
            self._admit(head)

    def _admit(self, head: Request) -> None:
        self._answer_to(_ADMIT)
        self._loop.create_task(self._admitted(head))

    async def _admitted(self, head: Request) -> None:
        try:
            reply = await self.app.admit(head)
        except BaseException as exc:  # never out of the task, as in _serve
            if is_cancellation(exc):
                raise
            log.server_log.exception("request admission failed")
            reply = self._refusal(HTTPError(500, close=True), head.headers)
        self._answer_to(_ADMITTED)
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if reply is not None:
            # refused before its body was read (401, 403...): that answer, then close; the
            # body is never read (RFC 9110 10.1.1)
            self._keep_alive = False
            self._pipe.queue.clear()
            self._pipe.pending = None
            self._cancel_timer()
            transport.write(_ENCODE_REPLY(reply, _CLOSE, True))
            self._close()
            return
        if self._reading is _BODY and self._pipe.pending is None:
            transport.write(_CONTINUE)
        self._next()

    def on_chunk_header(self) -> None:
        self._body.chunks += 1

    def on_body(self, body: bytes) -> None:
        budget = self._body
        budget.size += len(body)
        if budget.size > budget.limit:
            raise HTTPError(
                413, detailed=f"the body may be at most {budget.limit} bytes", close=True
            )
        budget.pieces.append(body)

    def on_message_complete(self, body: bytes | None = None) -> None:
        """The request is read whole; ``body``: from the native parser (httptools: None,
        the body is the pieces on_body gathered)."""
        if self._upgrade_body is not None:
            return  # llhttp skipped an upgrade request's body: the _BodyReader completes it
        after = NEXT[self._reading][_MESSAGE_COMPLETE]
        if after is None:
            self._illegal(self._reading, _MESSAGE_COMPLETE)
        else:
            self._reading = after
        self._completed += 1
        self._cancel_timer()
        # the body came without waiting for 100 Continue: no admission to ask (RFC 9110
        # 10.1.1); the port's pipeline authorizes it as any request
        self._pipe.admission = None
        if body is None:
            pieces = self._body.pieces
            body = b"".join(pieces) if pieces else b""
        request = Request(
            self._method,
            self._url,
            self._headers,
            body,
            self._client,
            self.cfg.port,
            self._authorization,
            self._peer_cert,
        )
        keep = _CLOSE
        if self._keep_alive and self._parser.should_keep_alive():
            keep = _OPEN_10 if self._http10 else _OPEN
        self._dispatch(request, keep, self._http10)

    def _dispatch(self, request: Request, keep: Keep, http10: bool) -> None:
        """A request read whole: started now, or queued behind the answers before it (or a
        paused write flow), reading paused meanwhile (pipelining)."""
        if self._answering is not _READY or self._flow.paused:
            self._pipe.queue.append((request, keep, http10))
            if self._transport is not None:
                self._transport.pause_reading()
            return
        self._start(request, keep, http10)

    # -- output -------------------------------------------------------------------------------
    def _start(self, request: Request, keep: Keep, http10: bool) -> None:
        after = NEXT[self._answering][_HANDLE]
        if after is None:
            self._illegal(self._answering, _HANDLE)
        else:
            self._answering = after
        self._flow.task = self._loop.create_task(self._serve(request, keep, http10))

    async def _serve(self, request: Request, keep: Keep, http10: bool) -> None:
        """Answer ``request``; ``http10``: it is an HTTP/1.0 request (its own, not the
        connection's latest: a pipelined request read meanwhile may be of the other version)."""
        try:
            reply = await self.app.handle(request)
        except BaseException as exc:  # never out of the task: SystemExit would end the loop
            if is_cancellation(exc):
                raise
            reply = self._refusal(HTTPError(500), request.headers)
            # the line carries the id the answer does (the pipeline's own was reset with it)
            rid_token = log.request_id.set(_refusal_id(reply))
            log.server_log.exception("request pipeline failed")
            log.request_id.reset(rid_token)
        transport = self._transport
        if transport is None or transport.is_closing():
            self._answer_to(_ANSWERED)
            if reply.stream is not None:
                # the client left before the head: the stream is closed unsent (a def
                # handler's chunked answer is told at its next piece)
                await self._close_stream(reply.stream)
            return
        if reply.close:
            if reply.drop:
                # no answer at all (OnSelect's -3): close, the requests queued behind it too
                self._answer_to(_ANSWERED)
                self._keep_alive = False
                self._pipe.queue.clear()
                self._pipe.pending = None
                self._close()
                return
            keep = _CLOSE
        elif (
            (not self._keep_alive or self._conns.draining)
            and not self._pipe.queue
            and not self._pipe.unparsed
            and self._pipe.pending is None
            and self._pipe.admission is None
        ):
            # nothing follows this answer on a connection that ends (the client half-closed,
            # an upgrade, a drain); pipelined requests read before an end are answered first
            keep = _CLOSE
        if reply.stream is not None:
            keep = await self._stream(reply, keep, transport, http10)
        else:
            transport.write(_ENCODE_REPLY(reply, keep, True))
        after = NEXT[self._answering][_ANSWERED]
        if after is None:
            self._illegal(self._answering, _ANSWERED)
        else:
            self._answering = after
        if keep is _CLOSE:
            self._keep_alive = False
            self._close()
            return
        self._next()

    async def _stream(
        self, reply: Reply, keep: Keep, transport: asyncio.Transport, http10: bool
    ) -> Keep:
        """Write a streamed reply: its head, then each piece as it comes, waiting while the
        client does not read (the transport's high-water mark: the worker never holds more
        than that of a stream), chunked unless its length is known. The stream is closed
        when it ends, early too (an error, the client gone); the connection then closes."""
        stream = reply.stream
        assert stream is not None
        status = reply.status
        if status == 204 or status == 304 or status < 200:
            # no content (RFC 9110 15.3.5, 15.4.5), so no Transfer-Encoding (RFC 9112 6.1):
            # sent as such an answer is, the stream closed unread (a port's pipeline does so
            # itself, PortApp._finish: this is for any other PortHandler)
            reply.stream = None
            transport.write(_ENCODE_REPLY(reply, keep, True))
            await self._close_stream(stream)
            return keep
        chunked = reply.length < 0 and not http10
        if reply.length < 0 and http10:
            keep = _CLOSE  # HTTP/1.0 has no chunks: the stream ends with the connection
        self._answer_to(_STREAM)
        transport.write(encode_reply(reply, keep, chunked))
        complete = False
        self._flow.streaming = True
        self._flow.leaves = not _peer_shut(transport)
        # what the `finally` of a try would do, done after it: the stream is closed (awaited)
        # whatever happened, then a cancellation travels on. Compiled (mypyc), an exception
        # leaving a `finally` that awaits stays the thread's current exception, and the next
        # such `finally` to end raises it again (docs/decisions.md, "The compiled build")
        travels: BaseException | None = None
        try:
            try:
                async for piece in stream:
                    if transport.is_closing():
                        break
                    if not piece:
                        continue
                    if chunked:
                        transport.write(b"%x\r\n%b\r\n" % (len(piece), piece))
                    else:
                        transport.write(piece)
                    if self._flow.paused:
                        self._flow.drain = self._loop.create_future()
                        await self._flow.drain
                        self._flow.drain = None
                else:
                    complete = True
            except StreamCut:
                pass  # its failure is logged (the port's streams.Sending, the handler's pool)
            except BaseException as exc:  # the stream's own error: the answer is cut short
                if not isinstance(exc, asyncio.CancelledError) or self._transport is not None:
                    if is_cancellation(exc):
                        raise
                    log.app_log.error("a streamed answer failed: %s", _shown(exc))
        except BaseException as exc:
            travels = exc
        self._flow.streaming = False
        self._flow.drain = None
        await self._close_stream(stream)
        if travels is not None:
            raise travels
        if not complete or transport.is_closing():
            return _CLOSE  # the client cannot tell a cut stream from a whole one otherwise
        if chunked:
            transport.write(b"0\r\n\r\n")
        return keep

    async def _close_stream(self, stream: AsyncIterator[bytes]) -> None:
        """Close a stream the engine took, sent or not; what the application's cleanup
        raises is logged."""
        try:
            await close_stream(stream)
        except Exception as exc:
            log.app_log.error("closing a streamed answer failed: %s", _shown(exc))

    def _next(self) -> None:
        """After an answer (or an admission): start what waits, else read on. Nothing while
        the client has not taken the answers written so far (resume_writing calls again)."""
        transport = self._transport
        if self._answering is not _READY or self._flow.paused or transport is None:
            return  # (busy: resume_writing ran inside a write; the writer calls again)
        pipe = self._pipe
        if pipe.queue:
            nxt, nkeep, nhttp10 = pipe.queue.pop(0)
            self._start(nxt, nkeep, nhttp10)
            return
        if pipe.pending is not None:
            # a bad request read behind the ones just answered: its answer, then close
            pending, pipe.pending = pipe.pending, None
            self._fail(pending)
            return
        if pipe.admission is not None:
            # the request behind the ones just answered expects 100 Continue
            head, pipe.admission = pipe.admission, None
            self._admit(head)
            return
        if pipe.unparsed:
            data, pipe.unparsed = pipe.unparsed, b""
            self.data_received(data)
            if self._answering is not _READY or pipe.unparsed or transport.is_closing():
                return  # a request started (its answer comes back here), or more wait
        if self._reading is _DONE:
            after = NEXT[self._reading][_READ_ON]
            if after is None:
                self._illegal(self._reading, _READ_ON)
            else:
                self._reading = after
        transport.resume_reading()
        if self._reading is _IDLE:
            self._set_timer(self.cfg.keep_alive_timeout_ms, self._on_keep_alive_timeout)
        elif self._timer is None:
            # the next request's header or body deadline passed while this one was served
            if self._reading is _HEAD:
                self._on_header_timeout()
            else:
                self._on_body_timeout()

    def _refusal(self, exc: HTTPError, headers: list[tuple[str, str]] | None) -> Reply:
        """The engine's own answer: with the request's id (SPEC 13.4), the client's own when
        ``headers`` (what was parsed of the head) carry an acceptable one, and the headers the
        port puts on every answer (a TLS port's HSTS, SPEC 10.2)."""
        return refusal(exc, _request_id(headers), self.app.engine_headers)

    def _fail(self, exc: HTTPError, note: str = "", level: int = logging.INFO) -> None:
        """Answer a protocol-level error and close; ``note``: why, for the server log (with
        the access line, both carrying the refused request's id)."""
        self._keep_alive = False
        self._cancel_timer()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._answering is not _READY or self._pipe.queue:
            # pipelined requests read before this error are answered first, in order (they
            # may wait for the client to read: _next); this error's answer follows them
            # (see _serve), then the connection closes
            if note:
                log.server_log.log(level, "%s", note)
            if self._pipe.pending is None:
                self._pipe.pending = exc
            transport.pause_reading()
            return
        # the head's fields read so far are this request's only while one is being read
        # (between messages they are the previous request's)
        phase = self._reading
        headers = self._headers
        if phase is _HEAD and self._native:
            headers = self._parser.headers  # (httptools: on_header has added them)
        known = phase is _HEAD or phase is _BODY
        rid = _request_id(headers if known else None)
        reply = refusal(exc, rid, self.app.engine_headers)
        head = self._refused_head(phase, headers) if known else None
        said = "- -"
        if head is not None:
            said = f"{head.method} {_logged_path(head.target)}"
            # the headers of the request's location (CORS, rate limits), and no content
            # for a HEAD (RFC 9110 9.3.2); a request line not read that far: as it is
            reply = self.app.refused(head, reply)
            if head.method == "HEAD":
                head_answer(reply)
        transport.write(_ENCODE_REPLY(reply, _CLOSE, True))
        rid_token = log.request_id.set(rid)
        try:
            if note:
                log.server_log.log(level, "%s", note)
            log.access_log.info(
                "%s %d protocol error (%s) client=%s port=%s",
                said,
                exc.status,
                exc.detailed or exc.message,
                self._client,
                self.cfg.port,
            )
        finally:
            log.request_id.reset(rid_token)
        self._linger(transport)

    def _linger(self, transport: asyncio.Transport) -> None:
        """Close after a refusal without losing it (RFC 9112 9.6): a socket closed with
        request bytes still unread sends a reset, which can reach the client before it read
        the answer (a 431 for a head over the limit: the rest of the head still arriving).
        So the write side is shut (the client reads the answer, then the end), and what the
        client still sends is read and dropped until it closes, at most LINGER_MS. A TLS
        connection, which has no half-close, closes at once."""
        if not transport.can_write_eof():
            transport.close()
            return
        self._lingering = True
        transport.write_eof()
        transport.resume_reading()
        self._set_timer(_LINGER_MS, transport.close)

    def _refused_head(self, phase: State, headers: list[tuple[str, str]]) -> Request | None:
        """The head of the request being refused (in ``phase``, _HEAD or _BODY), as far as it
        was read; None when its target is not known (nor, then, surely its method)."""
        if phase is _BODY:
            method, url = self._method, self._url
        else:
            # llhttp reads the method before the target: a target begun, the method is known
            url = self._parser.url if self._native else self._url
            if not url:
                return None
            method = self._parser.get_method().decode("ascii", "replace")
        return Request(
            method, url, headers, b"", self._client, self.cfg.port, None, self._peer_cert
        )


def _logged_path(target: bytes) -> str:
    """A refused request's target as its protocol error line shows it: the path, escaped as
    an access line's (SPEC 7.1), without the query, which may hold secrets, nor an
    absolute-form target's scheme and authority (which may hold userinfo).

    >>> _logged_path(b"/rest/upload?password=x"), _logged_path(b"http://a:b@h/r?x")
    ('/rest/upload', '/r')
    >>> _logged_path(b"*"), _logged_path(b"http://h")
    ('*', '/')
    """
    text = target.decode("latin-1").partition("?")[0].partition("#")[0]
    if not text.startswith("/") and "://" in text:
        text = "/" + text.split("://", 1)[1].partition("/")[2]
    return log.escape(text)


def _peer_shut(transport: asyncio.Transport) -> bool:
    """Whether the client has shut its write side, though the loop may not have read its end
    yet (it sent its request and its end at once, as a raw client does); Linux alone tells."""
    sock = transport.get_extra_info("socket")
    if sock is None or _TCP_INFO is None:
        return False
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 1)
    except (OSError, TypeError, ValueError):
        return False
    return bool(info) and info[0] == _CLOSE_WAIT


def _names_other_protocol(data: bytes) -> bool:
    """Whether the request line at the start of ``data`` (after the empty lines llhttp
    skips) ends in ``RTSP/d.d`` or ``ICE/d.d``; False when the line is not whole in it.

    >>> _names_other_protocol(b"POST /a RTSP/1.0\\r\\n")
    True
    >>> _names_other_protocol(b"\\r\\nSOURCE / ICE/1.0\\n")
    True
    >>> _names_other_protocol(b"GET /RTSP/1.0 HTTP/1.1\\r\\n"), _names_other_protocol(b"GET /ICE/1.0\\n")
    (False, False)
    """
    if data[:1] in (b"\r", b"\n"):
        data = data.lstrip(b"\r\n")
    end = data.find(b"\n")
    if end < 0:
        return False
    tail = data[max(0, end - 10) : end].rstrip(b"\r")
    return tail[-9:].startswith(b" RTSP/") or tail[-8:].startswith(b" ICE/")


def _request_id(headers: list[tuple[str, str]] | None) -> str:
    """The id of a request the engine answers itself (SPEC 13.4): the client's acceptable one
    among ``headers`` (what was parsed of its head; None: nothing of it), else a new one."""
    return (carried_request_id(headers) if headers else None) or new_request_id()


# RFC 9110 5.6.2: a method is a token
_METHOD_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ ")


def _parse_refusal(exc: httptools.HttpParserError, begun: bytes) -> HTTPError:
    """The refusal of a request llhttp cannot parse; ``begun``: the read it began with (b""
    when it began earlier). A method that is a token llhttp does not know (``FOO``, ``get``)
    is 501, not implemented (RFC 9110 9.1, 15.6.2); other faults are 400."""
    # llhttp also refuses a method of RTSP's on an HTTP line (DESCRIBE, PLAY...) as its own
    if isinstance(exc, httptools.HttpParserInvalidMethodError) or str(exc).startswith(
        "Invalid method for HTTP/"
    ):
        if begun[:1] in (b"\r", b"\n"):
            begun = begun.lstrip(b"\r\n")
        if _METHOD_TOKEN.match(begun) is not None:
            return HTTPError(501, detailed="the request's method is not implemented", close=True)
    if str(exc).startswith("Pause on PRI"):
        # HTTP/2's connection preface (RFC 9113 3.4), which llhttp stops at: a version of
        # another major, as any HTTP/2.0 request line (RFC 9110 15.6.6)
        return HTTPError(505, detailed="HTTP/2.0 is not supported: send HTTP/1.1", close=True)
    return HTTPError(400, detailed=_parser_detail(exc), close=True)


def _parser_detail(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text[:200]


def _refusal_id(reply: Reply) -> str:
    """The request id an engine's refusal (``wire.refusal``) carries."""
    for name, value in reply.headers:
        if name == "x-request-id":
            return value
    return new_request_id()


def _shown(exc: BaseException) -> str:
    """An exception as a log line shows it: its escaped ``repr``, or its type's name alone
    when the application's ``__repr__`` fails."""
    try:
        return log.escape(repr(exc))
    except Exception:
        return f"{type(exc).__name__} (its repr failed)"
