"""Streamed answers (SPEC 10.5): a handler's iterator or async iterator of ``bytes``/``str``
(or a ``Response`` with one as its body) sent as its items come, chunked.

An async iterator is advanced on the loop; a plain iterator (a ``def`` generator) in the
location's thread pool, one item per call, so that a generator that waits for its data never
holds the loop. The engine closes the stream when it ends early (``aclose``: the client went
away, see ``server/http.py``); closing here closes the application's iterator (``aclose()`` /
``close()``): a plain iterator in the pool, by the step running then as soon as it returns.

Whatever the application's iterator raises, ``SystemExit`` and the other ``BaseException``s
included (SPEC 7.1), leaves it as :class:`StreamFailed`, an ``Exception``: the tasks that
advance a stream (an event stream's, ``ActiveTimeout``'s) would pass those to the event loop,
which would end the worker. Only a cancellation of the task that advances it travels on.

The engine sends a stream after the pipeline returned, so :class:`Sending` (the outermost
wrapper, put on by the port) gives each of its steps and its close the request's id (SPEC
13.4: the records of its iterator, of a ``def`` generator's steps in the pool, of its failure),
logs a failure as a handler's (SPEC 3: the traceback, whole with ``rest_error_full=1``) and
hands the engine a :class:`~fwrest.errors.StreamCut` for it.
"""

from __future__ import annotations

import asyncio
import codecs
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import Any

from fwrest import log
from fwrest.auth.blocking import settled
from fwrest.context import chunks
from fwrest.context.charsets import Charset
from fwrest.context.events import IDLE_S, KEEP_ALIVE, encode_event
from fwrest.context.request import RequestContext, current
from fwrest.context.views import UsageKey
from fwrest.errors import HTTPError, StreamCut, is_cancellation
from fwrest.server.failures import log_failure
from fwrest.server.usage import UsageTable
from fwrest.wire import close_stream

__all__ = ["Sending", "StreamFailed", "events", "is_stream", "pieces", "pieces_of", "prepend"]

_END = object()
_STEP_END_S = 5.0  # how long a closed event stream waits for its iterator's cancelled step


class StreamFailed(Exception):
    """A streamed answer's iterator raised ``inner``, a ``BaseException`` that is no
    ``Exception`` (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, a
    ``CancelledError`` fwrest did not cause): the stream is cut as for any error."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(f"the iterator raised {inner!r}")
        self.inner = inner


def _carried(exc: BaseException) -> BaseException:
    """What leaves a stream when its iterator raised ``exc``: ``exc`` itself when it is an
    ``Exception`` or a cancellation of this task, else :class:`StreamFailed`."""
    if isinstance(exc, Exception) or is_cancellation(exc):
        return exc
    return StreamFailed(exc)


def is_stream(value: Any) -> bool:
    """Whether a handler's result is to be streamed: an iterator or async iterator (a
    ``str``, ``bytes``, dict or list is an answer of its own, never a stream).

    >>> is_stream(iter([b"a"])), is_stream((x for x in "ab")), is_stream("ab"), is_stream([1])
    (True, True, False, False)
    """
    return isinstance(value, AsyncIterator | Iterator) and not isinstance(value, str | bytes)


def _bytes(item: Any, encode: Callable[[str], bytes]) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return encode(item)
    if isinstance(item, bytearray | memoryview):
        return bytes(item)
    raise TypeError(f"a streamed answer's item is a {type(item).__name__}, not bytes or str")


async def pieces(source: Any, submit: Any, charset: Charset) -> AsyncIterator[bytes]:
    """The items of ``source`` as bytes; ``submit`` runs a plain iterator's steps in the pool
    (None: on the loop)."""
    items = pieces_of(source, submit)
    encode = codecs.getincrementalencoder(charset.codec)().encode  # one byte order mark
    try:
        async for item in items:
            yield _bytes(item, encode)
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
        await _end_events(items, waiting)


async def _end_events(items: AsyncGenerator[Any, None], waiting: asyncio.Task[Any] | None) -> None:
    """Close an event stream's items; the wait for the next one, if any, ends first (a
    generator that runs cannot be closed), and ends the iterator's running step."""
    if waiting is not None:
        waiting.cancel()
        await asyncio.wait({waiting}, timeout=_STEP_END_S)
        if not waiting.done():  # an iterator that ignores its cancellation: left to it
            log.app_log.error("an event stream's iterator did not end when cancelled")
            return
        if not waiting.cancelled():
            waiting.exception()  # retrieved: the stream ended for another reason
    await items.aclose()


async def pieces_of(source: Any, submit: Any) -> AsyncGenerator[Any, None]:
    """The items of an iterator (a plain one's steps through ``submit``) or async iterator;
    what the iterator raises as :func:`_carried` says."""
    if isinstance(source, AsyncIterator):
        try:
            while True:
                try:
                    item = await anext(source)
                except StopAsyncIteration:
                    return
                except BaseException as exc:
                    raise _carried(exc) from None
                yield item
        finally:
            await _close_async(source)
    elif submit is None:  # an async def handler's plain iterator: on the loop
        try:
            while True:
                try:
                    item = next(source, _END)
                except BaseException as exc:
                    raise _carried(exc) from None
                if item is _END:
                    return
                yield item
        finally:
            _close_plain(source)
    else:
        steps = _Steps(source)
        ended = False
        try:
            while True:
                try:
                    # through settled: a failure keeps its traceback (the application's
                    # frames) past the compiled engine's coroutines (rest_error_full=1)
                    item = await settled(submit(steps.step))
                except BaseException as exc:
                    raise _carried(exc) from None
                if item is _END:
                    ended = True
                    return
                yield item
        finally:
            if ended:
                _close_plain(source)  # ran out: nothing of the application's runs on close
            elif not steps.end():  # else the step running closes it as it returns
                try:
                    await submit(steps.close)
                except HTTPError:  # no thread free within AcceptTimeout: here, then
                    steps.close()


class _Steps:
    """A plain iterator advanced in a pool, one item per job, closed there too (SPEC 10.5):
    by the step that runs when the stream ends, as soon as that step returns (``close()``
    of a generator that runs fails), else by a job of its own."""

    __slots__ = ("_closed", "_ending", "_lock", "_running", "source")

    def __init__(self, source: Iterator[Any]) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._running = False
        self._ending = False
        self._closed = False

    def step(self) -> Any:
        """In a pool thread: the next item, or ``_END``. The pool's job is not a handler's:
        ``setChunkedResponse`` in the iterator raises (the answer is already this stream)."""
        with self._lock:
            if self._ending:
                return _END  # a step queued before the stream ended
            self._running = True
        caller = getattr(chunks.running, "caller", None)
        chunks.running.caller = None
        try:
            return next(self.source, _END)
        except Exception:
            raise
        except BaseException as exc:
            # never on the pool's future: thrown into the coroutines that await it, a
            # GeneratorExit would close them instead (and no CancelledError here is fwrest's)
            raise StreamFailed(exc) from None
        finally:
            chunks.running.caller = caller
            with self._lock:
                self._running = False
                ending = self._ending
            if ending:
                self.close()

    def end(self) -> bool:
        """On the loop: the stream ended early; True when a step runs (it closes the
        iterator as it returns), False when nothing runs (the caller closes it)."""
        with self._lock:
            self._ending = True
            return self._running

    def close(self) -> None:
        """Close the iterator, once; what that raises is logged."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _close_plain(self.source)


def _close_plain(source: Any) -> None:
    """Close a plain iterator (a generator runs its ``finally``); what that raises is logged."""
    close = getattr(source, "close", None)
    if close is None:
        return
    try:
        close()
    except BaseException as exc:
        _close_failed(exc)


async def _close_async(source: Any) -> None:
    """``aclose()`` an async iterator; what that raises is logged."""
    try:
        await close_stream(source)
    except BaseException as exc:
        _close_failed(exc)


def _close_failed(exc: BaseException) -> None:
    if is_cancellation(exc):
        raise exc
    log.app_log.error("closing a streamed answer failed: %s", log.escape(repr(exc)))


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


class Sending:
    """``stream`` as the engine sends it: each step and its close with the request's id
    ``rid`` and the REST object's request ``ctx`` (the pipeline has returned: the engine's
    task no longer has them; a ``def`` generator's steps take them into the pool, an async
    generator's run in the task, so ``rest`` reads the request in either), what it raises
    logged as a handler's failure (``method path``) and raised as :class:`StreamCut`, the
    request's usage figures recorded in ``usage`` when it is closed (the engine closes every
    stream it took, whole or not), and then ``ended`` told when (``perf_counter_ns``) and
    whether it was cut: ``""`` it ran out, ``"failed"`` its iterator (or its chunked handler)
    failed, ``"closed"`` it was closed before its end (the client gone, a deadline, a stop).
    A class rather than an async generator, so that closing it closes ``stream`` also when no
    piece was asked for."""

    __slots__ = (
        "_closed",
        "_ctx",
        "_cut",
        "_ended",
        "_method",
        "_path",
        "_rid",
        "_route_key",
        "_started",
        "_stream",
        "_usage",
    )

    def __init__(
        self,
        stream: AsyncIterator[bytes],
        usage: UsageTable,
        route_key: UsageKey,
        started: int,
        rid: str | int,
        method: str,
        path: str,
        ctx: RequestContext | None = None,
        ended: Callable[[int, str], None] | None = None,
    ) -> None:
        self._stream = stream
        self._ctx = ctx
        self._ended = ended
        self._cut = "closed"  # until it runs out or fails
        self._usage = usage
        self._route_key = route_key
        self._started = started
        self._rid = rid
        self._method = method
        self._path = path
        self._closed = False

    def __aiter__(self) -> Sending:
        return self

    async def __anext__(self) -> bytes:
        token = log.request_id.set(self._rid)
        request = current.set(self._ctx) if self._ctx is not None else None
        try:
            return await anext(self._stream)
        except StopAsyncIteration:
            self._cut = ""
            raise
        except StreamCut:
            self._cut = "failed"  # a chunked handler's failure, logged by its pool
            raise
        except BaseException as exc:
            if is_cancellation(exc):
                raise  # the client went away (or a deadline): not the application's failure
            self._cut = "failed"
            inner = exc.inner if isinstance(exc, StreamFailed) else exc
            log_failure(self._method, self._path, inner, "the streamed answer failed", "cut short")
            raise StreamCut("the streamed answer failed", inner) from None
        finally:
            if request is not None:
                current.reset(request)
            log.request_id.reset(token)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        token = log.request_id.set(self._rid)
        request = current.set(self._ctx) if self._ctx is not None else None
        try:
            await close_stream(self._stream)
        except Exception as exc:  # the application's cleanup: logged with the id
            _close_failed(exc)
        finally:
            at = time.perf_counter_ns()
            self._usage.record(self._route_key, (at - self._started) // 1000)
            if self._ended is not None:
                self._ended(at, self._cut)
            if request is not None:
                current.reset(request)
            log.request_id.reset(token)
