"""``rest.setChunkedResponse`` / ``rest.setLastChunkedResponse`` (SPEC 10.5): a ``def`` handler
sends its answer in pieces while it runs.

The first piece answers the request at once (the status and headers set so far, then the
pieces chunked as they come); the handler goes on in its pool thread, and each further piece
waits while :data:`AHEAD` pieces are still unsent (the client reads slowly), so that the
worker never holds the whole answer. ``setLastChunkedResponse`` (or the handler's return)
ends it; an exception of the handler after the first piece cuts it (no last chunk: the pool
logs it, and the stream raises :class:`~fwrest.errors.StreamCut`).

Once the answer cannot be sent any more (its stream closed before its end: the client went
away, took nothing for ``BodyTimeout``, the answer was given up), the next piece, and one
waiting for room, raises :class:`~fwrest.errors.ClientDisconnected` in the handler at once, so
that its thread goes back to the pool. An answer that sends no content (a HEAD request's, a
204, 205 or 304) is :meth:`ChunkFeed.drop`-ped: its pieces are taken and thrown away.

The pool that runs the handler (``fwrest.server.pool``) says which call is running on the
thread through :data:`running`; this module knows it only as a :class:`Caller`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Protocol

from fwrest.errors import ClientDisconnected, StreamCut

__all__ = ["AHEAD", "Caller", "ChunkFeed", "ChunkedAnswer", "running"]

AHEAD = 16  # pieces a handler may be ahead of its client
_RECHECK_S = 1.0  # a wait for room looks again at least this often (a notice never lost)


class Caller(Protocol):
    """The pool call running on this thread, as the chunked answer needs it."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def answer_early(self, value: ChunkedAnswer) -> None:
        """Hand ``value`` to the request as the call's result now; the call's own result (or
        exception) then goes to ``value.end``."""
        ...


running = threading.local()  # .caller: the Caller of the pool call on this thread (or None)
_END = object()  # the answer is complete: the last chunk
_CUT = object()  # the handler failed (logged by the pool): cut, no last chunk
# where the pieces go: to the client; nowhere, the answer cannot be sent (the handler is
# told); nowhere, the answer has no content (the handler is not told)
_OPEN, _GONE, _DROPPED = 0, 1, 2


class ChunkFeed:
    """The pieces a handler thread sends, read by the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, encode: Callable[[str], bytes]) -> None:
        self._loop = loop
        self.encode = encode  # the answer's str pieces, in its charset
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        # re-entrant: a FeedPieces collected (its __del__) while this thread holds it
        self._room = threading.Condition(threading.RLock())
        self._unsent = 0  # pieces put and not yet taken by the stream
        self._state = _OPEN
        self.ended = False
        self._failure: BaseException | None = None  # the handler's, when it failed

    def put(self, piece: bytes) -> None:
        """From the handler's thread: one piece (waits while AHEAD pieces are unsent).

        Raises:
            RuntimeError: after the last piece.
            ClientDisconnected: the answer can no longer be sent.
        """
        if self.ended:
            raise RuntimeError("the chunked answer has ended (setLastChunkedResponse)")
        with self._room:
            while self._unsent >= AHEAD and self._state == _OPEN:
                self._room.wait(_RECHECK_S)
            state = self._state
            if state == _OPEN:
                self._unsent += 1
        if state == _OPEN:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, piece)
        elif state == _GONE:
            raise ClientDisconnected(
                "the chunked answer cannot be sent any more: its client went away, took "
                "nothing of it for BodyTimeout, or it was given up"
            )

    def end(self, ok: bool = True, failure: BaseException | None = None) -> None:
        """From any thread: the answer is complete (``ok``), or cut short (the handler
        failed, raising ``failure``); once only: a failure after the last piece changes
        nothing sent."""
        if self.ended:
            return
        self.ended = True
        self._failure = failure
        with self._room:
            sending = self._state == _OPEN
        if sending:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, _END if ok else _CUT)

    def close(self) -> None:
        """The stream ended (whole, or early: the handler is told at its next piece, and at
        once if it waits for room)."""
        with self._room:
            if self._state == _OPEN:
                self._state = _GONE
            self._room.notify_all()

    def drop(self) -> None:
        """The answer sends no content: the handler's pieces are thrown away, never waited
        for."""
        with self._room:
            self._state = _DROPPED
            self._room.notify_all()

    def pieces(self) -> FeedPieces:
        """The stream of the pieces, for the engine."""
        return FeedPieces(self)

    async def next_piece(self) -> bytes:
        """On the loop: the next piece (StopAsyncIteration at the end, :class:`StreamCut`
        when the handler failed)."""
        piece = await self._queue.get()
        if piece is _END:
            raise StopAsyncIteration
        if piece is _CUT:
            raise StreamCut("the handler failed during its chunked answer", self._failure)
        with self._room:
            self._unsent -= 1
            self._room.notify()
        return piece  # type: ignore[no-any-return]


class FeedPieces:
    """A feed's pieces as an async iterator. A class rather than an async generator, so that
    closing it ends the feed even when no piece was asked for (an async generator's
    ``finally`` would not run then), and so does dropping it unclosed (a reply given up before
    its head went out)."""

    __slots__ = ("_feed",)

    def __init__(self, feed: ChunkFeed) -> None:
        self._feed: ChunkFeed | None = feed

    def __aiter__(self) -> FeedPieces:
        return self

    async def __anext__(self) -> bytes:
        feed = self._feed
        if feed is None:
            raise StopAsyncIteration
        try:
            return await feed.next_piece()
        except BaseException:  # the end, a cut, or a cancellation (the client went away)
            self._close()
            raise

    async def aclose(self) -> None:
        self._close()

    def _close(self) -> None:
        feed, self._feed = self._feed, None
        if feed is not None:
            feed.close()

    def __del__(self) -> None:
        self._close()


class ChunkedAnswer:
    """The result a chunked handler's request gets when its first piece is sent; ``method``
    and ``path`` name the request in the lines of a failure of the handler after it.
    ``status`` and ``headers`` are the answer's head as they were at the first piece: what
    the REST object is told after it (``OnSend``, the handler's later calls) changes nothing,
    however soon the loop writes the head (docs/hooks.md)."""

    __slots__ = ("_ended", "_lock", "_on_end", "feed", "headers", "method", "path", "status")

    def __init__(
        self, feed: ChunkFeed, method: str, path: str, status: int, headers: dict[str, str]
    ) -> None:
        self.feed = feed
        self.method = method
        self.path = path
        self.status = status
        self.headers = headers
        self._lock = threading.Lock()
        self._ended: tuple[BaseException | None] | None = None  # (its failure,) once ended
        self._on_end: Callable[[BaseException | None], None] | None = None

    def end(self, ok: bool, failure: BaseException | None = None) -> None:
        """(the pool's thread) The handler returned (``ok``) or raised ``failure``."""
        self.feed.end(ok, failure)
        with self._lock:
            self._ended = (failure,)
            told, self._on_end = self._on_end, None
        if told is not None:
            told(failure)

    def on_end(self, told: Callable[[BaseException | None], None]) -> None:
        """Have ``told`` called with the handler's failure (None: it returned) when it
        ends, at once if it has (a trace's ``fwrest.handler`` span ends then)."""
        with self._lock:
            ended = self._ended
            if ended is None:
                self._on_end = told
                return
        told(ended[0])
