"""Compression (SPEC 10.4): a server's ``Compression=gzip`` or ``gzip, br``, an outgoing stage.

An answer is compressed when its body has at least ``CompressionMinSize`` bytes, its media type
is compressible (text, JSON, XML, JavaScript, SVG), it has no ``Content-Encoding`` yet, and the
request's ``Accept-Encoding`` accepts a configured coding (q-values honoured; ``br`` preferred at
equal q). Compressible answers of at least the minimum size carry ``Vary: Accept-Encoding``
whether compressed or not, so a cache keeps the two apart; a smaller answer is the same for
every client, so it has none (as nginx's ``gzip_vary``), and costs the stage a look at the
request's ``Accept-Encoding`` only. A request that refuses the uncompressed form
(``identity;q=0``) gets a compressed answer below the minimum size too.

A compressed answer's strong ``ETag`` becomes weak (``W/"..."``, as nginx's gzip): a strong
tag names one sequence of bytes, so an ``If-Range`` with it must never get the identity bytes.
The stage leaves every 304 alone: a static file's 304 asks it (:meth:`Compression.variant`)
for the ``Vary`` and the weak tag its 200 would carry (RFC 9110 15.4.5).

Never compressed, whatever the config (BREACH, a secret and an attacker's text in one compressed
answer): the token route's answers, the settings page and any answer with
``Cache-Control: no-store``.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator, Callable

import brotli

from fwrest.context.codings import choose_coding
from fwrest.context.request import RequestContext
from fwrest.routing import TOKEN_ROUTE
from fwrest.wire import Reply, Request, close_stream

__all__ = ["GZIP_LEVEL", "SLICE", "VARY", "Compression", "compressible", "weakened"]

# the levels: fast ones, as the request waits for them (gzip 6 and brotli 11 cost several
# times more for a few per cent less)
GZIP_LEVEL = 5
_BROTLI_QUALITY = 4
_SETTINGS_ROUTE = "/fw/rest/config"
SLICE = 1 << 16  # bytes of a stream's input compressed between two turns of the loop

_COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": lambda body: gzip.compress(body, GZIP_LEVEL, mtime=0),
    "br": lambda body: bytes(brotli.compress(body, quality=_BROTLI_QUALITY)),
}
_PREFERENCE = ("br", "gzip")  # at equal q
VARY = ("vary", "Accept-Encoding")
# statuses whose answers are never compressed: interim, no content, a range, not modified
_BARE = frozenset((*range(100, 200), 204, 206, 304))


async def _compressed(stream: AsyncIterator[bytes], coding: str) -> AsyncIterator[bytes]:
    """``stream`` compressed with ``coding``, each piece flushed as it comes.

    The loop gets a turn after every :data:`SLICE` bytes of input (a big piece is compressed
    a slice at a time): an iterator that never awaits, of pieces that compress to almost
    nothing, would otherwise hold the loop until the client's socket buffers fill, which for
    such pieces is gigabytes of input later."""
    compress: Callable[[bytes | memoryview], bytes]
    flush: Callable[[], bytes]
    finish: Callable[[], bytes]
    if coding == "gzip":
        gz = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: the gzip wrapper
        compress, flush, finish = gz.compress, lambda: gz.flush(zlib.Z_SYNC_FLUSH), gz.flush
    else:
        br = brotli.Compressor(quality=_BROTLI_QUALITY)
        compress, flush, finish = br.process, br.flush, br.finish
    taken = 0  # input since the loop's last turn
    try:
        async for piece in stream:
            size = len(piece)
            if taken + size <= SLICE:
                out = compress(piece) + flush()
                taken += size
            else:
                view = memoryview(piece)
                parts = []
                for start in range(0, size, SLICE):
                    part = view[start : start + SLICE]
                    parts.append(compress(part))
                    taken += len(part)
                    if taken >= SLICE:
                        await asyncio.sleep(0)
                        taken = 0
                parts.append(flush())
                out = b"".join(parts)
            if out:
                yield out
            if taken >= SLICE:
                await asyncio.sleep(0)
                taken = 0
        yield finish()
    finally:
        await close_stream(stream)


def compressible(media_type: str) -> bool:
    """Whether a ``Content-Type`` value names a type worth compressing.

    >>> [compressible(t) for t in ("text/html; charset=utf-8", "application/problem+json",
    ...  "image/svg+xml", "image/png", "application/octet-stream")]
    [True, True, True, False, False]
    """
    kind = media_type.partition(";")[0].strip().lower()
    main, _, sub = kind.partition("/")
    if main == "text":
        return True
    return sub in ("json", "xml", "javascript", "ecmascript", "svg+xml") or sub.endswith(
        ("+json", "+xml")
    )


class Compression:
    """The compression stage of one port: ``codings`` among ``gzip`` and ``br``."""

    def __init__(self, codings: tuple[str, ...], min_size: int) -> None:
        self.offered = tuple(c for c in _PREFERENCE if c in codings)
        self.min_size = min_size
        self._types: dict[str, bool] = {}

    def _compressible(self, media_type: str) -> bool:
        found = self._types.get(media_type)
        if found is None:
            found = compressible(media_type)
            if len(self._types) >= 64:
                self._types.clear()
            self._types[media_type] = found
        return found

    def __call__(self, req: Request, ctx: RequestContext, reply: Reply) -> Reply:
        if reply.status in _BARE:
            return reply
        stream = reply.stream
        size = len(reply.body) if stream is None else reply.length  # -1: not known
        if not size:
            return reply
        accepted = None
        for name, value in req.headers:
            if name == "accept-encoding":
                accepted = value if accepted is None else f"{accepted},{value}"
        coding: str | None = None
        small = 0 <= size < self.min_size
        if small:
            # the same for every client: compressed only for one that refuses it uncompressed
            if accepted is None:
                return reply
            coding, identity_refused = choose_coding(accepted, self.offered)
            if coding is None or not identity_refused:
                return reply
        headers = reply.headers
        vary_at = -1
        if len(headers) == 1:  # the common answer: a handler's JSON or text, its type alone
            name, media = headers[0]
            worth = self._types.get(media)
            if worth is None:
                worth = self._compressible(media)
            if not worth or name != "content-type":
                return reply
        else:
            found = None
            for i, (name, value) in enumerate(headers):
                if name == "content-type":
                    found = value
                elif name == "content-encoding" or (
                    name == "cache-control" and "no-store" in value.lower()
                ):
                    return reply
                elif name == "vary":
                    vary_at = i
            if found is None or not self._compressible(found):
                return reply
        handler = ctx.handler
        if (
            handler is not None
            and handler.endpoint.source == "native"
            and handler.endpoint.path in (TOKEN_ROUTE, _SETTINGS_ROUTE)
        ):
            return reply
        if vary_at < 0:
            headers.append(VARY)
        elif "accept-encoding" not in headers[vary_at][1].lower():
            headers[vary_at] = ("vary", f"{headers[vary_at][1]}, Accept-Encoding")
        if not small:
            coding = choose_coding(accepted, self.offered)[0]
            if coding is None:
                return reply
        assert coding is not None
        if stream is not None:
            # piece by piece, each flushed: a stream's reader gets each item as it comes
            reply.stream = _compressed(stream, coding)
            reply.length = -1
        else:
            reply.body = _COMPRESSORS[coding](reply.body)
        reply.headers = weakened(headers)
        reply.headers.append(("content-encoding", coding))
        return reply

    def variant(self, req: Request, media_type: str, size: int) -> tuple[bool, str | None]:
        """What the stage does to a 200 of ``size`` bytes of ``media_type`` (one of no other
        reason to be left alone: a static file's) for ``req``: whether it carries ``Vary``,
        and its coding (None: sent uncompressed). A static file's 304 carries what its 200
        would (RFC 9110 15.4.5), which the stage, leaving every 304 alone, cannot tell."""
        if size <= 0 or not self._compressible(media_type):
            return False, None
        accepted = None
        for name, value in req.headers:
            if name == "accept-encoding":
                accepted = value if accepted is None else f"{accepted},{value}"
        if size < self.min_size:
            coding, identity_refused = choose_coding(accepted, self.offered)
            if coding is None or not identity_refused:
                return False, None
            return True, coding
        return True, choose_coding(accepted, self.offered)[0]


def weakened(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A compressed answer's headers: no ``Content-Length`` (the identity body's), and its
    ``ETag``, when strong, made weak (``W/"..."``, as nginx's gzip): a strong tag names one
    sequence of bytes (RFC 9110 8.8.1), which the compressed body is not, so that an
    ``If-Range`` with it (the strong comparison) never splices the identity file's bytes
    into a compressed download, while ``If-None-Match`` (the weak comparison) still matches.

    >>> weakened([("etag", '"1-a"'), ("content-length", "10"), ("content-type", "text/plain")])
    [('etag', 'W/"1-a"'), ('content-type', 'text/plain')]
    >>> weakened([("etag", 'W/"1-a"')])
    [('etag', 'W/"1-a"')]
    """
    kept = []
    for name, value in headers:
        if name == "content-length":
            continue
        if name == "etag" and value.startswith('"'):
            value = "W/" + value
        kept.append((name, value))
    return kept
