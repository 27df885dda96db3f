"""A location's thread pool for ``def`` handlers, per worker process (SPEC 9).

Bounded by ``MaxThreads``; a request that waits longer than ``AcceptTimeout`` for a thread
gets 503 "Server Busy"; threads above ``MinThreads`` that stay idle for ``InactiveTimeout``
end; the pool grows by ``GrowthFactor`` threads and keeps ``MinFreeThreads`` ready.
Work runs in a copy of the caller's context, as ``asyncio.to_thread`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from fwrest.config.model import ThreadPoolConfig
from fwrest.context import chunks
from fwrest.context.chunks import ChunkedAnswer
from fwrest.errors import ClientDisconnected, RaisedInThread, ServiceUnavailable
from fwrest.log import app_log, escape, server_log
from fwrest.server.failures import log_failure

__all__ = ["ThreadPool"]


class _State(enum.Enum):
    """Where a submitted call is: waiting for a thread, running, or given up (503)."""

    QUEUED = 0
    RUNNING = 1
    EXPIRED = 2


_QUEUED, _RUNNING, _EXPIRED = _State.QUEUED, _State.RUNNING, _State.EXPIRED


class _Item:
    """A submitted call; on its thread also the ``chunks.Caller`` that ``setChunkedResponse``
    answers the request early through."""

    __slots__ = ("args", "ctx", "early", "fn", "future", "kwargs", "loop", "state", "timer")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        future: asyncio.Future[Any],
    ) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.future = future
        self.timer: asyncio.TimerHandle | None = None
        self.ctx = contextvars.copy_context()
        self.state = _QUEUED
        # the result handed over before the call returned (a chunked answer's first piece):
        # the call's own result then ends it (context/chunks.py)
        self.early: ChunkedAnswer | None = None
        self.loop = future.get_loop()

    def answer_early(self, value: ChunkedAnswer) -> None:
        """From the call's thread: ``value`` is the request's result now (its first piece)."""
        self.early = value
        self.loop.call_soon_threadsafe(_early, self, value)


def _early(item: _Item, value: ChunkedAnswer) -> None:
    """On the loop: a chunked answer's first piece is the call's result; a request that
    no longer waits for it (given up: ``ActiveTimeout``) never reads its pieces, so the
    handler is told at its next one."""
    if item.future.done():
        value.feed.close()
    _finish(item, True, value)


def _chunked_failed(answer: ChunkedAnswer, exc: BaseException) -> None:
    """In the request's context (its id on the lines): a handler failed after its chunked
    answer's first piece went out (SPEC 7.1: logged as any handler's failure); what was
    sent stays sent, cut short unless the handler had sent its last piece."""
    outcome = "the answer sent stands" if answer.feed.ended else "its answer is cut short"
    log_failure(
        answer.method,
        answer.path,
        exc,
        "unhandled exception in the handler after its chunked answer's first piece",
        outcome,
    )


# the calls (a route's, in a pool) whose value returned after a chunked answer began was
# said to be ignored: once each, not once per request
_IGNORED_SAID: set[Callable[..., Any]] = set()


def _returned_ignored(fn: Callable[..., Any], answer: ChunkedAnswer, value: Any) -> None:
    """In the request's context: a handler that began a chunked answer returned a value too,
    which the answer cannot take (its head and pieces are out); said once per route."""
    _IGNORED_SAID.add(fn)
    app_log.warning(
        "%s %s: the handler returned a %s after setChunkedResponse began its answer; the "
        "value is ignored (send it with setChunkedResponse, or return None); said once for "
        "this route",
        answer.method,
        escape(answer.path),
        type(value).__name__,
    )


def _finish(item: _Item, ok: bool, value: Any) -> None:
    """On the loop: cancel the AcceptTimeout timer (it would keep the request alive) and
    hand the result over."""
    if item.timer is not None:
        item.timer.cancel()
        item.timer = None
    _deliver(item.future, ok, value)


def _deliver(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
        return
    if isinstance(value, (StopIteration, GeneratorExit)):
        # a Future refuses the first (and the request never answered); the second, thrown
        # into the awaiting coroutines, would close them past their handlers
        value = RaisedInThread(value)
    future.set_exception(value)


class ThreadPool:
    """Runs blocking calls for the event loop of one worker."""

    def __init__(self, config: ThreadPoolConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.name = config.name
        self.config = config
        self._loop = loop
        self._min = config.min_threads
        self._max = config.max_threads
        self._min_free = min(config.min_free_threads, config.max_threads)
        self._growth = config.growth_factor
        self._accept_s = config.accept_timeout_ms / 1000
        self._idle_s = config.inactive_timeout_ms / 1000
        self._queue: deque[_Item] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._threads = 0
        self._idle = 0
        self._busy = 0
        self._stopping = False
        self._serial = 0
        with self._cond:
            self._grow(max(self._min, self._min_free))

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def busy(self) -> int:
        return self._busy

    def _grow(self, count: int) -> None:
        # called with the lock held
        count = min(count, self._max - self._threads)
        for _ in range(max(count, 0)):
            self._threads += 1
            self._idle += 1
            self._serial += 1
            thread = threading.Thread(
                target=self._run, name=f"fwrest-{self.name}-{self._serial}", daemon=True
            )
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """Queue ``fn(*args, **kwargs)``; the future fails with 503 after ``AcceptTimeout``."""
        future: asyncio.Future[Any] = self._loop.create_future()
        item = _Item(fn, args, kwargs, future)
        self._enqueue(item)
        item.timer = self._loop.call_later(self._accept_s, self._expire, item)
        return future

    def submit_untimed(
        self, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> asyncio.Future[Any]:
        """Queue ``fn(*args, **kwargs)`` with no ``AcceptTimeout``: a worker's own hook
        (``OnStop``), which its caller bounds, and which a request's abandoned thread must
        not cost its run."""
        future: asyncio.Future[Any] = self._loop.create_future()
        self._enqueue(_Item(fn, args, kwargs, future))
        return future

    def _enqueue(self, item: _Item) -> None:
        with self._cond:
            self._queue.append(item)
            if self._idle < len(self._queue):
                self._grow(self._growth)
            self._cond.notify()

    def _expire(self, item: _Item) -> None:
        with self._cond:
            if item.state is not _QUEUED:
                return
            item.state = _EXPIRED
            with contextlib.suppress(ValueError):
                self._queue.remove(item)
        server_log.warning(
            "thread pool %s: a request waited %.0f ms for a free thread (MaxThreads=%d); "
            "answered 503 Server Busy",
            self.name,
            self._accept_s * 1000,
            self._max,
        )
        _deliver(item.future, False, ServiceUnavailable(message="Server Busy"))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    idle_out = not self._cond.wait(self._idle_s) and not self._queue
                    if idle_out and self._threads > max(self._min, self._min_free):
                        self._threads -= 1
                        self._idle -= 1
                        return
                if self._stopping and not self._queue:
                    self._threads -= 1
                    self._idle -= 1
                    return
                item = self._queue.popleft()
                taken = item.state is _QUEUED  # not: timed out or cancelled while queued
                if taken:
                    item.state = _RUNNING
                    self._idle -= 1
                    self._busy += 1
                    if self._idle < self._min_free:
                        self._grow(self._growth)
            if not taken:  # (no `continue` inside `with`: the compiled build cannot)
                continue
            chunks.running.caller = item
            try:
                value = item.ctx.run(item.fn, *item.args, **item.kwargs)
                ok = True
            except BaseException as exc:
                value, ok = exc, False
            chunks.running.caller = None
            item.args, item.kwargs = (), {}
            with self._cond:
                self._busy -= 1
                self._idle += 1
            early = item.early
            if early is not None:
                # the request has its answer: end what it streams; a failure is logged here
                # (nothing else can: the status went out with the first piece), but the
                # ClientDisconnected of an answer that could no longer be sent
                if not ok and not isinstance(value, ClientDisconnected):
                    item.ctx.run(_chunked_failed, early, value)
                elif ok and value is not None and item.fn not in _IGNORED_SAID:
                    item.ctx.run(_returned_ignored, item.fn, early, value)
                early.end(ok, None if ok else value)
                continue
            try:
                self._loop.call_soon_threadsafe(_finish, item, ok, value)
            except RuntimeError:
                return  # the loop is closed: the worker is going away

    def shutdown(self) -> None:
        """Let idle threads end; running calls finish on their own (threads are daemons)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
