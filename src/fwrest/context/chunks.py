"""``rest.setChunkedResponse`` / ``rest.setLastChunkedResponse`` (SPEC 10.5): a ``def`` handler
sends its answer in pieces while it runs.

The first piece answers the request at once (the status and headers set so far, then the
pieces chunked as they come); the handler goes on in its pool thread, and each further piece
waits while :data:`AHEAD` pieces are still unsent (the client reads slowly), so that the
worker never holds the whole answer. ``setLastChunkedResponse`` (or the handler's return)
ends it; an exception of the handler after the first piece cuts it (no last chunk).

The pool that runs the handler (``fwrest.server.pool``) says which call is running on the
thread through :data:`running`; this module knows it only as a :class:`Caller`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any, Protocol

__all__ = ["AHEAD", "Caller", "ChunkFeed", "ChunkedAnswer", "running"]

AHEAD = 16  # pieces a handler may be ahead of its client


class Caller(Protocol):
    """The pool call running on this thread, as the chunked answer needs it."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def answer_early(self, value: ChunkedAnswer) -> None:
        """Hand ``value`` to the request as the call's result now; the call's own result (or
        exception) then goes to ``value.end``."""
        ...


running = threading.local()  # .caller: the Caller of the pool call on this thread (or None)
_END = object()


class ChunkFeed:
    """The pieces a handler thread sends, read by the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._room = threading.Semaphore(AHEAD)
        self._closed = False
        self.ended = False

    def put(self, piece: bytes) -> None:
        """From the handler's thread: one piece (waits while AHEAD pieces are unsent)."""
        if self.ended:
            raise RuntimeError("the chunked answer has ended (setLastChunkedResponse)")
        self._room.acquire()
        if not self._closed:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, piece)

    def end(self, ok: bool = True, error: BaseException | None = None) -> None:
        """From any thread: the answer is complete (``ok``), or cut short by ``error``."""
        if self.ended and ok:
            return
        self.ended = True
        if not self._closed:
            marker = _END if ok else error or RuntimeError("the handler failed")
            self._loop.call_soon_threadsafe(self._queue.put_nowait, marker)

    async def pieces(self) -> AsyncIterator[bytes]:
        """On the loop: the pieces until the end (an error raised as the stream's own)."""
        try:
            while True:
                piece = await self._queue.get()
                self._room.release()
                if piece is _END:
                    return
                if isinstance(piece, BaseException):
                    raise RuntimeError(f"the handler failed during its chunked answer: {piece!r}")
                yield piece
        finally:
            # the client went away, or the end: a handler still sending never blocks again
            self._closed = True
            for _ in range(AHEAD):
                self._room.release()


class ChunkedAnswer:
    """The result a chunked handler's request gets when its first piece is sent."""

    __slots__ = ("feed",)

    def __init__(self, feed: ChunkFeed) -> None:
        self.feed = feed

    def end(self, ok: bool, value: Any) -> None:
        self.feed.end(ok, None if ok else value)
