"""Testing a service without sockets (SPEC 14.3): ``fwrest.testing.Client``.

``Client(config, server=NAME)`` is an :class:`httpx.Client` whose transport hands each request
to the request pipeline of the named server section (port), in this process, as Starlette's
``TestClient`` does for an ASGI app: the same guard, routing, REST object and answers as over
a socket (their heads made by the engine's encoder), with the checks the HTTP engine makes
before the pipeline (one ``Authorization`` header, the head and body limits, no
``Content-Encoding`` on a body). What only a socket
shows (deadlines, TLS, pipelining, processes) needs a real server (``fwrest.start``).

    >>> from fwrest.testing import Client                      # doctest: +SKIP
    >>> with Client("service.ini", server="HTTP_REST") as c:   # doctest: +SKIP
    ...     c.get("/rest/users/1", auth=("u", "p")).json()

The service runs one worker on a background event loop from ``__enter__`` (or the first
request) to ``__exit__`` (or :meth:`Client.close`). Needs the extra ``fwrest[testing]``
(httpx).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

try:
    import httpx
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("fwrest.testing needs httpx: pip install 'fwrest[testing]'") from exc

from fwrest import log
from fwrest.config.hosts import valid_host_field
from fwrest.context.request_id import request_id_of
from fwrest.errors import HTTPError, StreamCut, is_cancellation
from fwrest.server.app import PortApp
from fwrest.server.build import ServicePlan, open_runtime
from fwrest.server.hooks import StartFailed
from fwrest.server.http import asks_close
from fwrest.server.service import _release_logging, _setup_logging, prepare
from fwrest.server.worker import Worker, new_loop
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
    refusal,
    transfer_coding_refusal,
)

__all__ = ["Client"]

_CALL_TIMEOUT_S = 300.0  # a hung handler fails the test instead of hanging it


async def _next_piece(stream: AsyncIterator[bytes]) -> bytes | None:
    """The next piece of a streamed answer; None at its end. A stream that fails raises
    :class:`StreamCut` (its failure logged, as the engine logs it), a cancellation as is."""
    try:
        return await anext(stream)
    except StopAsyncIteration:
        return None
    except StreamCut:
        raise
    except BaseException as exc:
        if is_cancellation(exc):
            raise
        log.app_log.error("a streamed answer failed: %s", log.escape(repr(exc)))
        raise StreamCut() from None


class _PipelineStream(httpx.SyncByteStream):
    """A streamed answer's body, each piece taken from the service's loop as the client
    reads it (as over a socket: an endless ``EventStream`` gives its first event at once);
    closed early, the stream is closed as a client that leaves closes it. A piece that does
    not come within the request's read timeout raises ``httpx.ReadTimeout``; a stream cut
    after its head, ``httpx.RemoteProtocolError`` (what httpx raises over a socket)."""

    def __init__(
        self,
        stream: AsyncIterator[bytes],
        loop: asyncio.AbstractEventLoop,
        request: httpx.Request,
    ) -> None:
        self._stream: AsyncIterator[bytes] | None = stream
        self._loop = loop
        self._request = request
        read = request.extensions.get("timeout", {}).get("read")
        self._read_s = _CALL_TIMEOUT_S if read is None else float(read)

    def __iter__(self) -> Iterator[bytes]:
        while (stream := self._stream) is not None:
            # timed on the loop: a piece late is cancelled there, its generator left (not
            # running) before the stream is closed
            job = asyncio.run_coroutine_threadsafe(
                asyncio.wait_for(_next_piece(stream), self._read_s), self._loop
            )
            try:
                piece = job.result(self._read_s + _CALL_TIMEOUT_S)
            except (TimeoutError, concurrent.futures.TimeoutError):
                job.cancel()
                self.close()
                raise httpx.ReadTimeout(
                    f"no piece of the streamed answer within {self._read_s:g} s (the read timeout)",
                    request=self._request,
                ) from None
            except StreamCut:
                self.close()
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body "
                    "(incomplete chunked read)",
                    request=self._request,
                ) from None
            if piece is None:
                self.close()  # as the engine closes a stream it read to its end
                return
            if piece:
                yield piece

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and not self._loop.is_closed():
            job = asyncio.run_coroutine_threadsafe(close_stream(stream), self._loop)
            with contextlib.suppress(Exception):
                job.result(_CALL_TIMEOUT_S)


def _encoded(reply: Reply, close: bool = False) -> tuple[bytes, bytes]:
    """The status line and header lines the engine writes for ``reply``, and the content it
    sends after them (wire.encode_reply's, so that the client's answers have the socket's
    headers: the date and ``nosniff`` lines, the request id, ``content-length`` or
    ``transfer-encoding``, ``connection: close``, also where the request asked for it:
    ``close``; and the socket's content: none for a 1xx, 204 or 304, whatever was returned).
    A stream's content is its pieces, written by the engine after this head."""
    encoded = encode_reply(reply, Keep.CLOSE if reply.close or close else Keep.OPEN)
    if reply.stream is not None:
        return encoded, b""
    end = encoded.index(b"\r\n\r\n")
    return encoded[:end], encoded[end + 4 :]


def _header_fields(head: bytes) -> list[tuple[bytes, bytes]]:
    """The header fields of an encoded head (its status line aside), as bytes: httpx takes
    str values as ASCII, and a value may hold ISO-8859-1."""
    fields = []
    for line in head.split(b"\r\n")[1:]:
        if line:
            name, _, value = line.partition(b": ")
            fields.append((name, value))
    return fields


class _Runtime:
    """One worker of the service on an event loop of its own thread."""

    def __init__(self, config: str | Path | Mapping[str, Any], server: str | None) -> None:
        self.plan: ServicePlan = prepare(config)
        names = [port.config.name for port in self.plan.ports]
        if server is None:
            self.index = 0
        else:
            wanted = server.lower()  # section names are case-insensitive (SPEC 9)
            found = [i for i, name in enumerate(names) if name.lower() == wanted]
            if not found:
                raise ValueError(
                    f"Client(server={server!r}): the configuration has no such server; "
                    f"name one of {', '.join(names)}"
                )
            self.index = found[0]
        port = self.plan.ports[self.index].config
        host = port.host if port.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        self.base_url = f"{port.scheme}://{host}:{port.port or 80}"
        self.port_number = port.port
        self.max_header_size = port.max_header_size
        self.max_headers = port.max_headers
        self.app: PortApp | None = None
        # what the engine would serve: the app, or its TracedPort (Tracing: SPEC 17.4)
        self._handler: PortHandler | None = None
        self._worker: Worker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def open(self) -> PortApp:
        with self._lock:
            if self.app is not None:
                return self.app
            _setup_logging(self.plan.config, own_process=False)
            try:
                open_runtime(self.plan)
                loop = new_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="fwrest-testing", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
                worker = Worker(self.plan, [])
                asyncio.run_coroutine_threadsafe(worker.open(), loop).result(_CALL_TIMEOUT_S)
            except StartFailed as failed:  # an OnStart raised: as fwrest.start() says it
                self._shut()
                raise failed.config_error() from None
            except BaseException:
                self._shut()
                raise
            self._worker = worker
            self.app = worker.apps[self.index]
            self._handler = worker.built.handlers[self.index]
            return self.app

    def call(self, request: Request) -> Reply:
        """The port's reply to ``request`` (a streamed one's stream still to be read, on
        :attr:`loop`)."""
        self.open()
        handler = self._handler
        assert self._loop is not None and handler is not None
        future = asyncio.run_coroutine_threadsafe(handler.handle(request), self._loop)
        return future.result(_CALL_TIMEOUT_S)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    def close(self) -> None:
        with self._lock:
            worker, loop = self._worker, self._loop
            if worker is not None and loop is not None:
                asyncio.run_coroutine_threadsafe(worker.close(), loop).result(_CALL_TIMEOUT_S)
            self._worker = None
            self.app = None
            self._handler = None
            self._shut()

    def _shut(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(10)
            loop.close()
        self._loop = self._thread = None
        if self.plan.store is not None:
            self.plan.store.close()
            self.plan.store = None
        _release_logging()


def head_size(method: str, target: bytes, headers: list[tuple[str, str]]) -> int:
    """The bytes of a request's line and headers on the wire, as ``MaxHeaderSize`` counts them.

    >>> head_size("GET", b"/rest/hello", [("host", "x")])
    37
    """
    line = len(method) + 1 + len(target) + len(" HTTP/1.1\r\n")
    return line + sum(len(n) + len(": ") + len(v) + 2 for n, v in headers) + 2


_LENGTH_MAX = 2**64 - 1  # llhttp's Content-Length


def _framing(headers: list[tuple[str, str]]) -> HTTPError | None:
    """The engine's refusals of a request's framing headers (SPEC 7), in the order it makes
    them: llhttp's while it parses the fields (``Content-Length`` with ``Transfer-Encoding``,
    a duplicate or malformed ``Content-Length``, a ``Transfer-Encoding`` after ``chunked``),
    with its words, then ``server/http.py``'s once the head is read (a repeated
    ``Authorization``, an ``Expect`` asking anything but ``100-continue``, a transfer coding other
    than ``chunked``). All are 400 (417, 501) and close.

    >>> _framing([("transfer-encoding", "chunked"), ("content-length", "0")]).detailed
    "Content-Length can't be present with Transfer-Encoding"
    >>> _framing([("content-length", "2"), ("transfer-encoding", "chunked")]).status
    400
    >>> _framing([("transfer-encoding", "gzip, chunked")]).status, _framing([])
    (501, None)
    """
    length = False
    coded = False  # a Transfer-Encoding field was seen
    chunked = False  # ... and the last coding was chunked: nothing may follow
    for name, value in headers:
        if name == "content-length":
            if coded:
                why = "Content-Length can't be present with Transfer-Encoding"
            elif length:
                why = "Duplicate Content-Length"
            elif not (digits := value.strip(" \t")):
                why = "Empty Content-Length"
            elif not (digits.isascii() and digits.isdigit()):
                why = "Invalid character in Content-Length"
            elif int(digits) > _LENGTH_MAX:
                why = "Content-Length overflow"
            else:
                length = True
                continue
            return HTTPError(400, detailed=why, close=True)
        if name == "transfer-encoding":
            codings = [c.strip(" \t").lower() for c in value.split(",")]
            if length:
                why = "Transfer-Encoding can't be present with Content-Length"
            elif not value.strip(" \t"):
                why = "Empty Transfer-Encoding"
            elif chunked or "chunked" in codings[:-1]:
                why = "Invalid `Transfer-Encoding` header value"
            else:
                coded = True
                chunked = codings[-1] == "chunked"
                continue
            return HTTPError(400, detailed=why, close=True)
    authorization = False
    for name, value in headers:
        if name == "authorization":
            if authorization:
                return HTTPError(400, detailed="repeated Authorization header", close=True)
            authorization = True
        elif name == "expect" and expects_continue(value) is None:
            return HTTPError(417, close=True)
    if coded:
        return transfer_coding_refusal(
            ",".join(value for name, value in headers if name == "transfer-encoding")
        )
    return None


class _PipelineTransport(httpx.BaseTransport):
    """Hands each request to the port's pipeline, as the HTTP engine would."""

    def __init__(self, runtime: _Runtime, client_address: str) -> None:
        self._runtime = runtime
        self._client_address = client_address

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        target = request.url.raw_path
        # a name with "_" is dropped, as the engine drops it (nginx's underscores_in_headers)
        headers = [
            (name.decode("latin-1").lower(), value.decode("latin-1"))
            for name, value in request.headers.raw
            if b"_" not in name
        ]
        reply = self._refused(request.method, target, headers, body)
        if reply is None:
            reply = self._runtime.call(
                Request(
                    request.method,
                    target,
                    headers,
                    body,
                    self._client_address,
                    self._runtime.port_number,
                )
            )
        if reply.drop:  # closed without an answer (OnSelect's -3), as httpx reports it
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        # the headers and content as the engine writes them (a stream's: chunked unless its
        # length is known); the body as sent (no length added by httpx), a stream's as it comes
        head, content = _encoded(reply, asks_close(headers))
        stream = reply.stream
        reply.stream = None
        return httpx.Response(
            reply.status,
            headers=_header_fields(head),
            stream=(
                httpx.ByteStream(content)
                if stream is None
                else _PipelineStream(stream, self._runtime.loop, request)
            ),
            request=request,
        )

    def _refused(
        self, method: str, target: bytes, headers: list[tuple[str, str]], body: bytes
    ) -> Reply | None:
        """What the engine refuses before the pipeline sees a request (SPEC 7)."""
        app = self._runtime.open()
        refused: HTTPError | None = None
        if head_size(method, target, headers) > self._runtime.max_header_size:
            refused = HTTPError(431, close=True)
        elif len(headers) > self._runtime.max_headers:
            limit = self._runtime.max_headers
            refused = HTTPError(431, detailed=f"at most {limit} header fields", close=True)
        elif (framing := _framing(headers)) is not None:
            refused = framing
        elif len(hosts := [value for name, value in headers if name == "host"]) != 1:
            refused = HTTPError(
                400, detailed="the request needs exactly one Host header", close=True
            )
        elif not valid_host_field(hosts[0].strip(" \t")):
            refused = HTTPError(
                400, detailed="the Host header must be host[:port] and nothing else", close=True
            )
        else:
            coding = ",".join(v for n, v in headers if n == "content-encoding")
            if body and coding:
                refused = coded_body(coding)  # 415 before the body limit, as the engine
            limit = app.body_limit(target, len(body), False)
            if refused is None and len(body) > limit:
                refused = HTTPError(
                    413, detailed=f"the body may be at most {limit} bytes", close=True
                )
        if refused is None:
            return None
        # as the engine answers: the request's id, the port's headers of every answer, its
        # location's (CORS, rate limits), and no content for a HEAD
        reply = refusal(refused, request_id_of(headers), app.engine_headers)
        head = Request(method, target, headers, b"", self._client_address, app.port_number)
        reply = app.refused(head, reply)
        if method == "HEAD":
            head_answer(reply)
        return reply

    def close(self) -> None:
        self._runtime.close()


class Client(httpx.Client):
    """An ``httpx.Client`` served by one port's pipeline in this process (SPEC 14.3).

    Args:
        config: the service's configuration, as :func:`fwrest.start` takes it (a file path
            or a mapping of sections).
        server: the server section (port) to talk to; the first one of
            ``[HTTPSERVER] Servers`` when omitted.
        client_address: the address the service sees the requests come from.
        **kwargs: passed to :class:`httpx.Client` (``headers``, ``auth``, ``timeout``...).

    Raises:
        ConfigError: the configuration is invalid; entering it (``with``, the first request):
            a pool's ``OnStart`` raised (its traceback logged), as :func:`fwrest.start` says.
        ValueError: it has no server section named ``server``.
    """

    def __init__(
        self,
        config: str | Path | Mapping[str, Any],
        server: str | None = None,
        *,
        client_address: str = "127.0.0.1",
        **kwargs: Any,
    ) -> None:
        self._runtime = _Runtime(config, server)
        kwargs.setdefault("base_url", self._runtime.base_url)
        super().__init__(transport=_PipelineTransport(self._runtime, client_address), **kwargs)

    def __enter__(self) -> Client:
        super().__enter__()
        self._runtime.open()
        return self
