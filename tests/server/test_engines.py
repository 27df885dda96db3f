"""The native engine against the pure one (docs/engine.md): the same byte streams (every framing,
pipelined, mutated, random), split at random points, fed in process to ``HttpProtocol`` with each
parser; both must write the same answers (date and ids aside) and close alike. The port echoes what
it was handed, so a difference in the request built shows in the bytes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fwrest import _native
from fwrest.config.model import ServerConfig
from fwrest.server import http
from fwrest.server.http import ConnectionSet, HttpProtocol
from fwrest.wire import Keep, Reply, Request, encode_reply
from tests.conftest import APP_SOURCE, FWREST, ROOT, free_config, serving
from tests.server.rawhttp import RawConnection

NATIVE = _native.native_parser()
ENCODER = _native.native_encoder()
pytestmark = pytest.mark.skipif(NATIVE is None, reason="the native engine is not built here")

# small limits, so that the streams reach them: 431, 413, the chunk extensions
CFG = ServerConfig(
    name="HTTP_REST",
    host="127.0.0.1",
    port=8080,
    locations=(),
    max_header_size=600,
    max_headers=12,
    max_body_size=4096,
    header_timeout_ms=600_000,  # no deadline fires in a test: they are the same code
    body_timeout_ms=600_000,
    keep_alive_timeout_ms=600_000,
)


class Port:
    """The port: says what it was handed; a few targets ask for a limit, a refusal, a close."""

    engine_headers = (("x-port", "p"),)

    def body_limit(self, target: bytes, length: int, chunked: bool) -> int:
        return 32 if target.startswith(b"/small") else 4096

    async def admit(self, head: Request) -> Reply | None:
        if b"deny" in head.target:
            return Reply(403, [("content-type", "text/plain")], b"denied", close=True)
        return None

    def refused(self, head: Request, reply: Reply) -> Reply:
        # what the engine knew of a refused request (its method and target) shows in the bytes
        reply.headers.append(("x-refused", repr((head.method, head.target))))
        return reply

    async def handle(self, req: Request) -> Reply:
        said = repr((req.method, req.target, req.headers, req.body, req.authorization))
        return Reply(200, [("content-type", "text/plain")], said.encode(), b"close" in req.target)


class Recorder:
    """Records writes, closes and read pauses; holds the client's bytes while paused."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.events: list[tuple[str, bytes]] = []
        self.closing = False
        self.paused = False
        self.backlog = b""
        self.proto: HttpProtocol | None = None

    def _event(self, kind: str, data: bytes = b"") -> None:
        if kind == "write" and self.events and self.events[-1][0] == "write":
            self.events[-1] = ("write", self.events[-1][1] + data)
        elif not self.events or self.events[-1][0] != kind or kind == "write":
            self.events.append((kind, data))

    # -- what the engine calls ---------------------------------------------------------------
    def write(self, data: bytes) -> None:
        assert not self.closing, "a write after close"
        self._event("write", data)

    def close(self) -> None:
        self._end("close")

    def can_write_eof(self) -> bool:
        return False  # a refusal closes at once (the lingering close is a socket's)

    def abort(self) -> None:
        self._end("abort")

    def _end(self, kind: str) -> None:
        if not self.closing:
            self.closing = True
            self._event(kind)
            self.loop.call_soon(self._lost)

    def _lost(self) -> None:
        if self.proto is not None:
            proto, self.proto = self.proto, None
            proto.connection_lost(None)

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False
        if self.backlog:
            self.loop.call_soon(self._deliver)

    def set_write_buffer_limits(self, high: int = 0, low: int = 0) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    # -- the client ---------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.backlog += data
        self._deliver()

    def _deliver(self) -> None:
        if self.paused or self.closing or not self.backlog or self.proto is None:
            return
        data, self.backlog = self.backlog, b""
        self.proto.data_received(data)


DATE = re.compile(rb"\r\ndate: [^\r]*\r\n")
# a new id (the client's own, "client-N", stays: which one an answer carries is compared)
RID = re.compile(rb"\r\nx-request-id: [0-9a-f]{32}\r\n")


def run(
    parser: Any, pieces: list[bytes], eof: bool = True, port: Any = None
) -> list[tuple[str, bytes]]:
    """What the engine with ``parser`` (None: httptools) did with ``pieces``."""
    loop = asyncio.new_event_loop()
    saved = http._NATIVE_PARSER, http._ENCODE_REPLY
    http._NATIVE_PARSER = parser
    http._ENCODE_REPLY = ENCODER if parser is not None else encode_reply
    try:
        transport = Recorder(loop)
        proto = HttpProtocol(port or Port(), CFG, ConnectionSet(), loop)  # type: ignore[arg-type]
        transport.proto = proto
        proto.connection_made(transport)  # type: ignore[arg-type]
        assert (type(proto._parser) is parser) if parser is not None else not proto._native

        async def settle() -> None:
            for _ in range(20):
                await asyncio.sleep(0)

        for piece in pieces:
            if transport.closing:
                break
            transport.send(piece)
            loop.run_until_complete(settle())
        if eof and not transport.closing and transport.proto is not None:
            if not proto.eof_received():
                transport.close()
            loop.run_until_complete(settle())
        if not transport.closing:
            transport._event("open")
            transport.close()
        loop.run_until_complete(settle())
        if transport.backlog and not transport.closing:
            transport._event("unread")
        return [
            (kind, RID.sub(b"\r\nx-request-id: R\r\n", DATE.sub(b"\r\n", data)))
            for kind, data in transport.events
        ]
    finally:
        http._NATIVE_PARSER, http._ENCODE_REPLY = saved
        loop.close()


def assert_same(pieces: list[bytes], eof: bool = True) -> list[tuple[str, bytes]]:
    pure = run(None, pieces, eof)
    native = run(NATIVE, pieces, eof)
    assert native == pure, f"the engines differ on {pieces!r}"
    return pure


# -- a corpus: requests of every framing the engine reads --------------------------------------
VALID = [
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /x?q=1 HTTP/1.1\r\nHost: a\r\nX-Request-ID: client-1\r\nAuthorization: Basic eDp5\r\nX-A: 1\r\n\r\n",
    b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;e=1\r\nabc\r\n0\r\nT-Rail: v\r\n\r\n",
    b"POST /small HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n"
    + b"z" * 32
    + b"\r\n0\r\n\r\n",
    b"POST /small HTTP/1.1\r\nHost: a\r\nX-Request-ID: client-4\r\nContent-Length: 40\r\n\r\n"
    + b"y" * 40,
    b"PUT /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
    b"PUT /deny HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
    b"GET / HTTP/1.0\r\n\r\n",
    b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"GET http://h.example:81/abs HTTP/1.1\r\nHost: other\r\n\r\n",
    b"GET /u HTTP/1.1\r\nHost: a\r\nX_Under: 1\r\nX-Ok: 2\r\n\r\n",
    b"GET /close HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    b"POST /up HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: h2c\r\nContent-Length: 4\r\n\r\nbody",
    b"GET /up HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    b"POST /z HTTP/1.1\r\nHost: a\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nzz",
    b"GET /h HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nX-B: \r\n\r\n",
    b"GET /many HTTP/1.1\r\nHost: a\r\n"
    + b"".join(b"X-%d: v\r\n" % i for i in range(11))
    + b"\r\n",
    b"GET /long HTTP/1.1\r\nHost: a\r\nX-Request-ID: client-3\r\nX-Long: "
    + b"L" * 560
    + b"\r\n\r\n",
    b"GET /" + b"p" * 590 + b" HTTP/1.1\r\nHost: a\r\n\r\n",
    # the head's checks (docs/engine.md, "The reading states"), each refused or passed alike
    b"GET /h2 HTTP/1.1\r\nHost: a\r\nX-Request-ID: client-5\r\nHost: b\r\n\r\n",
    b"GET /h0 HTTP/1.1\r\nX-Request-ID: client-6\r\n\r\n",
    b"GET /hb HTTP/1.1\r\nHost: user@a\r\n\r\n",
    b"GET /hp HTTP/1.1\r\nHost:  a.example:8443 \r\n\r\n",
    b"GET /hp HTTP/1.1\r\nHost: a:99999\r\n\r\n",
    b"GET http://u@h.example/abs HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET HTTPS://h.example?q HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET http://h.example/abs HTTP/1.0\r\n\r\n",
    b"GET /a2 HTTP/1.1\r\nHost: a\r\nAuthorization: Basic eDp5\r\nX-Request-ID: client-7\r\n"
    b"authorization: Basic eDp5\r\n\r\n",
    b"POST /ex HTTP/1.1\r\nHost: a\r\nExpect: nope\r\nContent-Length: 3\r\n\r\nabc",
    b"GET /ex HTTP/1.1\r\nHost: a\r\nExpect:  100-Continue \r\n\r\n",
    b"PUT /ex HTTP/1.1\r\nHost: a\r\nExpect: 100-CONTINUE\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n0\r\n\r\n",
    # the first fault among the fields is answered: Expect before a repeated Authorization
    b"GET /f HTTP/1.1\r\nHost: a\r\nExpect: x\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n",
    b"GET /f HTTP/1.1\r\nHost: a\r\nAuthorization: a\r\nAuthorization: b\r\nExpect: x\r\n\r\n",
    # a limit a later field reaches is answered before a fault of an earlier one
    b"GET /f HTTP/1.1\r\nHost: a\r\nAuthorization: a\r\nAuthorization: b\r\n"
    + b"".join(b"X-%d: v\r\n" % i for i in range(11))
    + b"\r\n",
    b"POST /t HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"POST /t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"POST /t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  Chunked \r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    # refusals of a HEAD: no content; of a request line not read to its target: the body
    b"HEAD /big HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n",
    b"HEAD /" + b"q" * 600 + b" HTTP/1.1\r\nHost: a\r\n\r\n",
    b"HEAD /h0 HTTP/1.1\r\nX-Request-ID: client-9\r\n\r\n",
    b"HEAD /te HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HEAD /small HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + b"z" * 64,
    b"HEAX /m HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /v HTTP/2.0\r\nHost: a\r\n\r\n",
    b"GET /v HTTP/0.9\r\nHost: a\r\n\r\n",
    b"GET /v HTTP/1.2\r\nHost: a\r\n\r\n",
    b"POST /big HTTP/1.1\r\nHost: a\r\nX-Request-ID: client-8\r\nContent-Length: 5000\r\n\r\nabc",
    b"POST /z HTTP/1.1\r\nHost: a\r\nContent-Encoding: identity\r\nContent-Length: 2\r\n\r\nzz",
    b"POST /z HTTP/1.1\r\nHost: a\r\nContent-Encoding:\r\nContent-Encoding: br\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n2\r\nzz\r\n0\r\n\r\n",
    b"GET /z HTTP/1.1\r\nHost: a\r\nContent-Encoding: gzip\r\n\r\n",
    b"POST /up HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: h2c\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n",
    b"CONNECT h.example:443 HTTP/1.1\r\nHost: h.example:443\r\n\r\n",
    b"HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
    b"DELETE /d HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nAuthorization: Bearer t\r\n\r\n",
]
# edges of request line, fields, framing and limits (refused by llhttp or the head's checks)
EDGES = [
    # the request line
    b"get / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"FROB / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"PROPFIND /d HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
    b"PROPFINDXXXXXXXXXXXXXXXXXXXXXXXX / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /\tx HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
    b"GET /\r\nHost: a\r\n\r\n",
    b"GET / http/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.9\r\nHost: a\r\n\r\n",
    b"GET / HTTP/11.1\r\nHost: a\r\n\r\n",
    b"\r\n\r\nGET /lead HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /a%20b%zz?q=%C3%A9&r=%00 HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET http://h.example:8080/p HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET http://[::1]:8080/p?q HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET http:///p HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET ftp://h/p HTTP/1.1\r\nHost: a\r\n\r\n",
    b"CONNECT / HTTP/1.1\r\nHost: h\r\n\r\n",
    b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\nContent-Length: 3\r\n\r\nabc",
    # the header fields
    b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n  2\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX-A\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x00b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x01b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x7fb\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX-A: caf\xc3\xa9\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n",
    b"GET / HTTP/1.1\nHost: a\nX-A: ab\n\n",
    b"GET / HTTP/1.1\r\nHost: a\nX-A: ab\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: a \r\nX-Request-ID: client-9 \t\r\nX-A: a b  \r\nX-B: \t\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: a\r\nAuthorization:   Basic eDp5   \r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nAuthorization:\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost:\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n",
    b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 003\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:  3  \r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 3\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551615\r\n\r\nabc",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
    b"3\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"
    b"\r\n3\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close, keep-alive\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
    b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
    b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
    b"POST / HTTP/1.0\r\nConnection: Keep-Alive\r\nConnection: close\r\nContent-Length: 2\r\n\r\nab",
    b"GET / HTTP/1.0\r\nConnection: KEEP-ALIVE, Upgrade\r\n\r\n",
    b"GET / HTTP/1.0\r\nProxy-Connection: keep-alive\r\n\r\n",
    b"POST / HTTP/1.0\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nab",
    b"POST / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\nab",
    b"POST / HTTP/1.0\r\n\r\nab",
    b"POST / HTTP/1.1\r\nHost: a\r\n\r\nab",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, foo\r\nContent-Length: 1\r\n\r\na",
    b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nExpect: 100-continue\r\n"
    b"Content-Length: 1\r\n\r\na",
    b"POST /deny HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Encoding: identity, gzip\r\nContent-Length: 2\r\n\r\nzz",
    b"POST /up HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: h2c\r\n"
    b"Content-Encoding: gzip\r\nContent-Length: 4\r\n\r\nbody",
    b"GET /up HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n",
    b"POST /up HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\nab",
    b"GET /up HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n",
    b"POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    # chunked framing
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0003\r\nabc\r\n000\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nabc\r\n"
    b"0\r\n\r\n",
    b'POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;a="x;y"\r\nabc\r\n'
    b"0;b\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3 ;a=1\r\nabc\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
    b"Content-Length: 5\r\nAuthorization: x\r\nHost: b\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
    + b"".join(b"T%d: v \r\n" % i for i in range(30))
    + b"\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT_x: 1\r\n\r\n",
    b"POST /small HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: "
    + b"v" * 40
    + b"\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
    # pipelining, and what follows a refusal
    b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET /after-head HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /small HTTP/1.1\r\nHost: a\r\nContent-Length: 40\r\n\r\n"
    + b"y" * 40
    + b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nExpect: x\r\nContent-Length: 3\r\n\r\nabc"
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /up HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: h2c\r\nContent-Length: 4\r\n"
    b"\r\nbodyGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n" + b"\x00\x01garbage\r\n\r\n",
    b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\nX-Request-ID: client-15\r\n"
    b"X-Bad\x01: 1\r\n\r\n",
    b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nX-Request-ID: client-16\r\n"
    b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhel",
    b"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX: 1\r\n",
    # not HTTP/1.x: an HTTP/2 preface, a TLS ClientHello on a plain port
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    # the limits (MaxHeaderSize 600, MaxHeaders 12): at them and one past
    b"GET / HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(12)) + b"\r\n",
    *(
        b"GET / HTTP/1.1\r\nHost: a\r\nX-L: " + b"L" * (566 + extra) + b"\r\n\r\n"
        for extra in (-1, 0, 1)
    ),
    *(
        b"GET / HTTP/1.1\r\nHost: a\r\nX-L:" + b" " * 100 + b"L" * (466 + extra) + b"\r\n\r\n"
        for extra in (0, 1, 2)
    ),
]
# what the mutations put in (as test_mutation's)
INTERESTING = [
    b"\r", b"\n", b"\r\n", b"\r\n\r\n", b" ", b"\t", b"\x00", b"\xff", b":", b";", b"_", b"0",
    b"ffffffffffffffff", b"Content-Length: 5\r\n", b"Transfer-Encoding: chunked\r\n",
    b"Authorization: Basic eDp5\r\n", b"Expect: 100-continue\r\n", b"Host: x\r\n",
    b"Connection: close\r\n", b"0\r\n\r\n", b"GET / HTTP/1.1\r\n", b"HTTP/1.0", b"HTTP/2.0",
    b"Expect: nope\r\n", b"Transfer-Encoding: gzip, chunked\r\n",
]  # fmt: skip


@st.composite
def mutated(draw: Callable[..., Any]) -> bytes:
    data = bytearray(draw(st.sampled_from(VALID + EDGES)))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "flip"]))
        if kind == "insert":
            data[at:at] = draw(st.sampled_from(INTERESTING))
        elif kind == "delete":
            data[at : at + draw(st.integers(1, 8))] = b""
        elif at < len(data):
            data[at] = draw(st.integers(0, 255))
    return bytes(data)


@st.composite
def streams(draw: Callable[..., Any]) -> list[bytes]:
    """Requests (some mutated, some random bytes) in one stream, split at random points."""
    parts = draw(
        st.lists(
            st.one_of(st.sampled_from(VALID + EDGES), mutated(), st.binary(max_size=64)),
            min_size=1,
            max_size=4,
        )
    )
    stream = b"".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    return [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True) if b > a]


@pytest.mark.parametrize(
    ("request_bytes", "written"),
    [*((r, True) for r in VALID), *((r, False) for r in EDGES)],
    ids=[*(f"valid-{i}" for i in range(len(VALID))), *(f"edge-{i}" for i in range(len(EDGES)))],
)
def test_each_request_and_edge_whole_and_byte_by_byte(request_bytes: bytes, written: bool) -> None:
    """Whole, byte by byte, then pipelined twice: the same answers and closes."""
    whole = assert_same([request_bytes])
    assert whole and (whole[0][0] == "write" or not written), whole
    assert_same([request_bytes[i : i + 1] for i in range(len(request_bytes))])
    assert_same([request_bytes * 2])


def test_long_target_and_many_pipelined_requests_in_random_pieces() -> None:
    """A 64 KiB target (431) and 60 small pipelined requests (a HEAD among them), cut at random."""
    long_target = b"GET /" + b"t" * 65536 + b" HTTP/1.1\r\nHost: a\r\n\r\n"
    answers = assert_same([long_target])
    assert answers[0][1].startswith(b"HTTP/1.1 431 "), answers
    assert_same([long_target[i : i + 1000] for i in range(0, len(long_target), 1000)])
    one = b"GET /p HTTP/1.1\r\nHost: a\r\n\r\nHEAD /h HTTP/1.1\r\nHost: a\r\n\r\n"
    stream = one * 30
    rng = random.Random(9112)
    for _ in range(5):
        cuts = sorted(rng.sample(range(1, len(stream)), 50))
        pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        answers = assert_same(pieces)
        assert answers[0][1].count(b"HTTP/1.1 200 ") == 60, answers


# database=None: no example database in the work tree; a failure prints its seed to rerun
@settings(
    max_examples=1000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(streams())
def test_same_answers_and_closes(pieces: list[bytes]) -> None:
    assert_same(pieces)


def test_header_names_of_one_letter_leave_the_process_bytes_alone() -> None:
    """CPython shares one-byte bytes objects: a name lower-cased in place turned ``b"E"`` into
    ``b"e"`` for the whole process (a query value ``E`` was answered ``e`` in later tests)."""
    upper = bytes(range(65, 91))
    head = b"".join(b"%c: 1\r\n" % c for c in upper)
    answers = assert_same([b"GET / HTTP/1.1\r\nHost: a\r\n" + head + b"\r\n"])
    assert answers[0][1].startswith(b"HTTP/1.1 4")  # more fields than max_headers: 431
    answers = assert_same([b"GET / HTTP/1.1\r\nHost: a\r\nE: 1\r\nQ: 2\r\n\r\n"])
    assert b"('e', '1'), ('q', '2')" in answers[0][1]
    assert [bytes([c])[0] for c in upper] == list(upper)
    assert [bytes([c]).decode() for c in upper] == [chr(c) for c in upper]


def test_field_values_lose_their_surrounding_whitespace() -> None:
    """RFC 9110 5.5: the value excludes surrounding whitespace (llhttp keeps the trailing one); an
    ``X-Request-ID`` with a trailing space stays the client's on a refusal."""
    answers = assert_same(
        [
            b"GET /ws HTTP/1.1\r\nHost: a \r\nX-Request-ID: client-9 \t\r\nX-A: a b  \r\n"
            b"X-B: \t\r\nAuthorization:  Basic eDp5 \r\n\r\n"
        ]
    )
    assert (
        b"[('host', 'a'), ('x-request-id', 'client-9'), ('x-a', 'a b'), ('x-b', ''), "
        b"('authorization', 'Basic eDp5')], b'', 'Basic eDp5')" in answers[0][1]
    ), answers
    answers = assert_same([b"GET /nohost HTTP/1.1\r\nX-Request-ID: client-10  \r\n\r\n"])
    assert answers[0][1].startswith(b"HTTP/1.1 400 "), answers
    assert b"\r\nx-request-id: client-10\r\n" in answers[0][1], answers


def test_large_read_in_slices() -> None:
    """Reads above a slice (8 KiB) are parsed in slices: requests pipelined in one read."""
    stream = b"".join(VALID[:4]) * 120
    assert len(stream) > 3 * 8192
    answers = assert_same([stream])
    assert answers[0][1].count(b"HTTP/1.1 200 ") >= 4


# -- the reply encoder: wire.encode_reply in C, byte for byte ---------------------------------
NAMES = st.one_of(
    st.sampled_from(
        [
            "content-type",
            "content-length",
            "x-content-type-options",
            "www-authenticate",
            "cache-control",
            "set-cookie",
            "x-request-id",
            "connection",
            "date",
        ]
    ),
    st.text(st.characters(max_codepoint=0x17F), max_size=12),
)
VALUES = st.text(st.characters(max_codepoint=0x17F), max_size=40)


class _Watched:
    """A stream that says whether it was read and closed."""

    def __init__(self) -> None:
        self.read = self.closed = False

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> bytes:
        if self.read:
            raise StopAsyncIteration
        self.read = True
        return b"a body that must not be sent"

    async def aclose(self) -> None:
        self.closed = True


@settings(max_examples=2000, deadline=None, database=None)
@given(
    status=st.one_of(
        st.sampled_from([200, 201, 204, 304, 100, 101, 401, 500]), st.integers(0, 1200)
    ),
    headers=st.lists(st.tuples(NAMES, VALUES), max_size=6),
    body=st.binary(max_size=300),
    request_id=st.one_of(st.just(0), st.integers(1, 2**128 - 1), st.integers(-(2**64), 2**140)),
    keep=st.sampled_from(list(Keep)),
    chunked=st.booleans(),
    streamed=st.integers(-2, 3),
    head_only=st.booleans(),
)
def test_reply_encoder_byte_for_byte(
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
    request_id: int,
    keep: Keep,
    chunked: bool,
    streamed: int,
    head_only: bool,
) -> None:
    """Byte for byte as wire.encode_reply (the date aside)."""
    reply = Reply(status, headers, body, request_id=request_id, head_only=head_only)
    if streamed >= -1:  # a stream's head, its length known (>= 0) or not
        reply = Reply(
            status, headers, b"", stream=_Watched(), length=streamed, request_id=request_id
        )
    native = ENCODER(reply, keep, chunked)
    pure = encode_reply(reply, keep, chunked)
    assert DATE.sub(b"\r\n", native) == DATE.sub(b"\r\n", pure)


def test_reply_encoder_takes_what_wire_takes() -> None:
    """A status without a phrase, an id over 128 bits, an IntEnum status, a non-latin-1 char."""
    cases = [
        Reply(600, [("a", "b")], b"xy", request_id=2**130),
        Reply(HTTPStatus.OK, [("a", "b")], b"xy"),
        Reply(200, [("a", "\u20ac")], b"xy", request_id=5),
    ]
    for reply in cases:
        for keep in Keep:
            native, pure = ENCODER(reply, keep, True), encode_reply(reply, keep, True)
            assert DATE.sub(b"\r\n", native) == DATE.sub(b"\r\n", pure)
    answered = ENCODER(
        Reply(404, [("content-type", "text/plain")], b"no", request_id=255), Keep.OPEN, True
    )
    assert answered.startswith(b"HTTP/1.1 404 Not Found\r\ndate: ")
    assert answered.endswith(
        b"x-content-type-options: nosniff\r\ncontent-type: text/plain\r\n"
        b"x-request-id: 000000000000000000000000000000ff\r\ncontent-length: 2\r\n\r\nno"
    )


class QuietPort(Port):
    """Answers ``/quiet/N`` with a streamed answer of status N."""

    def __init__(self) -> None:
        self.streams: list[_Watched] = []

    async def handle(self, req: Request) -> Reply:
        if not req.target.startswith(b"/quiet/"):
            return await super().handle(req)
        self.streams.append(_Watched())
        status = int(req.target.rsplit(b"/", 1)[1])
        return Reply(status, [("content-type", "text/plain")], b"", stream=self.streams[-1])


@pytest.mark.parametrize("engine", ["pure", "native"])
def test_a_streamed_answer_without_content_is_sent_without_a_body(engine: str) -> None:
    """A PortHandler's streamed 204/304 (ports make none: PortApp._finish) goes without
    Transfer-Encoding (RFC 9112 6.1) or body, and the next pipelined answer reads right."""
    port = QuietPort()
    pieces = [
        b"GET /quiet/204 HTTP/1.1\r\nHost: a\r\n\r\nGET /quiet/304 HTTP/1.1\r\nHost: a\r\n\r\n"
        b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
    ]
    events = run(NATIVE if engine == "native" else None, pieces, port=port)
    written = b"".join(data for kind, data in events if kind == "write")
    answers = written.split(b"HTTP/1.1 ")
    assert answers[0] == b"" and len(answers) == 4, written
    for answer, status in zip(answers[1:3], (b"204", b"304"), strict=True):
        head, _, rest = answer.partition(b"\r\n\r\n")
        assert head.startswith(status) and rest == b"", written
        assert b"transfer-encoding" not in head and b"content-length" not in head, written
    assert answers[3].startswith(b"200 OK") and b"/next" in answers[3], written
    assert [(s.read, s.closed) for s in port.streams] == [(False, True), (False, True)]


def underscore_said(engine: str) -> list[str]:
    """Two '_' requests' logs in a fresh process (the native engine notes once per process)."""
    import logging

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("fwrest.server").addHandler(handler)
    logging.getLogger("fwrest.server").setLevel(logging.INFO)
    pieces = [
        b"GET /u HTTP/1.1\r\nHost: a\r\nX_" + b"n" * 150 + b": 1\r\nX-Ok: 2\r\n\r\n",
        b"GET /v HTTP/1.1\r\nHost: a\r\nY_Other: 1\r\n\r\n",
    ]
    events = run(NATIVE if engine == "native" else None, pieces)
    assert b"x-ok" in events[0][1] and b"x_" not in events[0][1].lower(), events
    return [line for line in said if "'_' in its name" in line]


@pytest.mark.parametrize("engine", ["pure", "native"])
def test_a_dropped_underscore_field_is_said_once_per_worker(engine: str) -> None:
    """Dropped by either engine and said once per worker (escaped, cut to 100 characters)."""
    code = (
        "import json, sys; from tests.server.test_engines import underscore_said; "
        "print(json.dumps(underscore_said(sys.argv[1])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, engine],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    name = "X_" + "n" * 98
    assert json.loads(done.stdout) == [
        f"a request header field with '_' in its name was dropped ({name}; and any later "
        "ones, not logged): send it with '-' instead"
    ], done.stdout


@pytest.mark.parametrize("engine", ["pure", "native"])
def test_a_refusal_s_line_names_the_method_and_path_read(
    engine: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal after the head's target was read: its line names the method and the path
    (escaped, without the query); one before it: ``- -``."""
    over = b"POST /small/up%0a?password=s3cret HTTP/1.1\r\nHost: a\r\nContent-Length: 99\r\n\r\n"
    with caplog.at_level(logging.INFO, "fwrest.access"):
        run(NATIVE if engine == "native" else None, [over])
        run(NATIVE if engine == "native" else None, [b"\x01GET / HTTP/1.1\r\n\r\n"])
    said = [r.getMessage() for r in caplog.records if "protocol error" in r.getMessage()]
    assert said[0].startswith("POST /small/up%0a 413 protocol error (the body may"), said
    assert said[1].startswith("- - 400 protocol error ("), said
    assert "s3cret" not in caplog.text


def test_flags_agree() -> None:
    """The bits the native parser tells a head with are the ones server/http.py reads."""
    from fwrest._native import engine

    for flag in ("BEGIN", "HTTP10", "KEEP", "UPGRADE", "CHUNKED", "EXPECT"):
        assert getattr(engine, f"FLAG_{flag}") == getattr(http, f"_N_{flag}"), flag


# -- what both engines answer over a socket, each in a service of its own ---------------------
PIECES = """
@get("/pieces")
def pieces():
    return (f"p{n}" for n in range(3))
"""


@pytest.fixture(scope="module", params=["pure", "native"])
def engine_port(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    """The port of a ``fwrest serve`` with ``FWREST_ENGINE`` the parameter, as its start says."""
    engine = request.param
    config = free_config(tmp_path_factory.mktemp(f"engine_{engine}"), app=APP_SOURCE + PIECES)
    with serving(config, env={"FWREST_ENGINE": engine}) as proc:
        proc.wait_log(
            f"HTTP engine: {engine} (" + ("llhttp 9.4.3, C)" if engine == "native" else "")
        )
        yield proc.ports["HTTP_REST"]


# -- which engine serves: said at start and by fwrest check -----------------------------------
@pytest.mark.parametrize(
    ("wanted", "said"),
    [
        ("native", "HTTP engine: native (llhttp 9.4.3, C)"),
        ("", "HTTP engine: native (llhttp 9.4.3, C)"),  # the default, where it was built
        ("pure", "HTTP engine: pure (httptools; FWREST_ENGINE=pure)"),
        ("quick", "HTTP engine: pure (FWREST_ENGINE='quick' is no engine: use pure or native)"),
    ],
)
def test_check_says_which_engine(tmp_path: Path, wanted: str, said: str) -> None:
    config = free_config(tmp_path)
    answered = subprocess.run(
        [*FWREST, "check", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "FWREST_ENGINE": wanted},
    )
    assert answered.returncode == 0, answered.stderr
    assert f"  {said}\n" in answered.stdout, answered.stdout


# what a wheel without the native engine imports: its module absent (sitecustomize runs first)
_NOT_BUILT = 'import sys\nsys.modules["fwrest._native.engine"] = None\n'


@pytest.mark.parametrize(
    ("wanted", "level", "said"),
    [
        ("native", "WARNING", "pure (httptools; FWREST_ENGINE=native, but the native engine"),
        ("quick", "WARNING", "pure (FWREST_ENGINE='quick' is no engine"),
        ("", "INFO", "pure (httptools; the default, the native engine was not built"),
        ("pure", "INFO", "pure (httptools; FWREST_ENGINE=pure)"),
    ],
)
def test_an_engine_asked_for_that_does_not_serve_is_a_warning(
    tmp_path: Path, wanted: str, level: str, said: str
) -> None:
    """``FWREST_ENGINE=native`` on a wheel without the native engine: the start line says so
    at WARNING, so that ``rest_log_level`` 2 still shows it; the default's quiet fallback and
    an explicit ``pure`` stay INFO."""
    (tmp_path / "unbuilt").mkdir()
    (tmp_path / "unbuilt" / "sitecustomize.py").write_text(_NOT_BUILT)
    config = free_config(tmp_path, general={"rest_log_level": 2})
    env = {"FWREST_ENGINE": wanted, "PYTHONPATH": str(tmp_path / "unbuilt")}
    with serving(config, env=env) as proc:
        assert httpx.get(proc.url() + "/hello", timeout=10).status_code == 200
        proc.signal()
        proc.proc.wait(timeout=30)
        log = proc.log()
    lines = [line for line in log.splitlines() if "HTTP engine: " in line]
    if level == "WARNING":  # shown at rest_log_level 2
        assert len(lines) == 1, log
        assert " WARNING fwrest.server [" in lines[0], lines[0]
        assert f"HTTP engine: {said}" in lines[0], lines[0]
    else:
        assert lines == [], log  # INFO: not at rest_log_level 2
    # the same start at rest_log_level 3 says it at its level
    config = free_config(tmp_path, general={"rest_log_level": 3})
    with serving(config, env=env) as proc:
        line = proc.wait_log("HTTP engine: ").split("HTTP engine: ")[0].rsplit("\n", 1)[-1]
        assert f" {level} fwrest.server [" in line, line
        assert said in proc.wait_log(said)


def test_a_stream_is_framed_by_its_own_request_s_version(engine_port: int) -> None:
    """RFC 9112 6.1, 9.3: an HTTP/1.1 stream is chunked and the pipelined HTTP/1.0 request
    after it answered; an HTTP/1.0 stream is not chunked and ends with the connection. A fuzz
    run saw both framed by the request read last (the HTTP/1.0 request lost, chunks sent to
    an HTTP/1.0 client)."""
    host = f"Host: 127.0.0.1:{engine_port}\r\n".encode()
    with RawConnection(engine_port) as conn:
        conn.send(b"GET /rest/pieces HTTP/1.1\r\n" + host + b"\r\nGET /rest/hello HTTP/1.0\r\n\r\n")
        data = conn.read_all()
    first, _, rest = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in first.lower(), data
    assert rest.startswith(b"2\r\np0\r\n") and b"0\r\n\r\nHTTP/1.1 200 " in rest, data
    assert b'"hello"' in rest
    with RawConnection(engine_port) as conn:
        conn.send(b"GET /rest/pieces HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
                  b"GET /rest/hello HTTP/1.1\r\n" + host + b"\r\n")  # fmt: skip
        data = conn.read_all()
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower() and b"connection: close" in head.lower()
    assert body == b"p0p1p2", data
