"""Streamed answers (SPEC 10.5): a handler's iterator or async iterator of ``bytes``/``str``
(or a ``Response`` with one as its body) sent as its items come, chunked.

An async iterator is advanced on the loop; a plain iterator (a ``def`` generator) in the
location's thread pool, one item per call, so that a generator that waits for its data never
holds the loop. The engine closes the stream when it ends early (``aclose``: the client went
away, see ``server/http.py``); closing here closes the application's iterator (``aclose()`` /
``close()``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

from fwrest.context.charsets import Charset
from fwrest.context.events import IDLE_S, KEEP_ALIVE, encode_event
from fwrest.context.views import UsageKey
from fwrest.server.usage import UsageTable
from fwrest.wire import close_stream

__all__ = ["events", "is_stream", "pieces", "pieces_of", "prepend", "timed"]

_END = object()


def is_stream(value: Any) -> bool:
    """Whether a handler's result is to be streamed: an iterator or async iterator (a
    ``str``, ``bytes``, dict or list is an answer of its own, never a stream).

    >>> is_stream(iter([b"a"])), is_stream((x for x in "ab")), is_stream("ab"), is_stream([1])
    (True, True, False, False)
    """
    return isinstance(value, AsyncIterator | Iterator) and not isinstance(value, str | bytes)


def _bytes(item: Any, charset: Charset) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode(charset.codec)
    if isinstance(item, bytearray | memoryview):
        return bytes(item)
    raise TypeError(f"a streamed answer's item is a {type(item).__name__}, not bytes or str")


async def pieces(source: Any, submit: Any, charset: Charset) -> AsyncIterator[bytes]:
    """The items of ``source`` as bytes; ``submit`` runs a plain iterator's steps in the pool
    (None: on the loop)."""
    items = pieces_of(source, submit)
    try:
        async for item in items:
            yield _bytes(item, charset)
    finally:
        await items.aclose()


async def events(source: Any, submit: Any) -> AsyncIterator[bytes]:
    """An :class:`~fwrest.EventStream`'s items as events, a comment line while none comes for
    ``IDLE_S`` seconds (the next item is awaited meanwhile, never given up)."""
    items = pieces_of(source, submit)
    waiting: asyncio.Task[Any] | None = None
    try:
        while True:
            if waiting is None:
                waiting = asyncio.ensure_future(anext(items, _END))
            done, _ = await asyncio.wait({waiting}, timeout=IDLE_S)
            if not done:
                yield KEEP_ALIVE
                continue
            item = waiting.result()
            waiting = None
            if item is _END:
                return
            yield encode_event(item)
    finally:
        if waiting is not None:
            waiting.cancel()
        await items.aclose()


async def pieces_of(source: Any, submit: Any) -> AsyncGenerator[Any, None]:
    """The items of an iterator (a plain one's steps through ``submit``) or async iterator."""
    try:
        if isinstance(source, AsyncIterator):
            async for item in source:
                yield item
        else:
            while True:
                item = next(source, _END) if submit is None else await submit(next, source, _END)
                if item is _END:
                    break
                yield item
    finally:
        await close_stream(source)


# The pipeline's own stream wrappers live here rather than in server/app.py: async
# generators stay out of the modules the compiled build turns into C (mypyc cannot build them).
async def prepend(first: bytes | None, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A stream whose first piece was read ahead."""
    try:
        if first is None:
            return
        yield first
        async for piece in rest:
            yield piece
    finally:
        await close_stream(rest)


async def timed(
    stream: AsyncIterator[bytes], usage: UsageTable, route_key: UsageKey, started: int
) -> AsyncIterator[bytes]:
    """``stream``, its request's usage figures recorded in ``usage`` when it ends."""
    try:
        async for piece in stream:
            yield piece
    finally:
        await close_stream(stream)
        usage.record(route_key, (time.perf_counter_ns() - started) // 1000)
