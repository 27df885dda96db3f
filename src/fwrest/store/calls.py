"""Calling the (blocking) store from the event loop: :class:`StoreClient`, the one way to.

Every store call of fwrest runs on the client's own threads (a hung store holds a thread for
Redis's whole client timeout; on asyncio's default executor such threads would starve the
application's ``def`` callbacks) and is awaited under one of two deadlines, so that a hung
store costs a bounded wait (SPEC 7: what needs the store answers 503 within 1.5 s):

* :data:`REQUEST_DEADLINE_S` for what a client waits on (a token request's calls share it, a
  settings change has it);
* :data:`BACKGROUND_DEADLINE_S` for background refreshes and native routes (Redis's own client
  timeout of about 1 s, and a margin for the thread hop).

A call's deadline measures the store: it runs from the moment a store thread starts the call,
not from the moment it was asked for, so that a burst of calls queued behind each other on a
healthy store is not taken for a dead one (issue 34). A call that no thread starts within its
deadline (every thread is busy: a store that hangs holds them all) is a :class:`StoreBusy`,
and a call that started late still ends by twice its deadline at most. Both are a
:class:`StoreError` (callers catch one type); each names what happened. A store that answers
in this process at once (``in_process``: memory) is called inline, without a thread hop.

A call names the :class:`~fwrest.store.base.StateStore` operation it runs
(:func:`operation_of`: a trace's ``fwrest.store.operation``): the store method called, through
a :func:`functools.partial` too; a helper that makes one trip to the store's thread for
several calls says which operation it runs with :func:`runs`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from fwrest.store.base import StoreBase, StoreError

__all__ = [
    "BACKGROUND_DEADLINE_S",
    "REQUEST_DEADLINE_S",
    "STORE_THREADS",
    "Started",
    "StoreBusy",
    "StoreClient",
    "StoreTimeout",
    "call_store",
    "operation_of",
    "runs",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

REQUEST_DEADLINE_S = 1.0
BACKGROUND_DEADLINE_S = 1.4
# per client; threads start lazily, in the worker. Enough that a burst of token requests on a
# healthy store does not queue its calls for long (a store that hangs holds them all: then a
# call waits at most its queue bound, StoreBusy)
STORE_THREADS = 16


# :func:`runs`'s mark: the attribute, and its value for "the store method given first"
_OPERATION = "fwrest_store_operation"
GIVEN = "(the store method given first)"


def runs(operation: str) -> Callable[[F], F]:
    """Mark a helper that calls the store (one trip to its thread for several calls) with the
    :class:`~fwrest.store.base.StateStore` operation it runs, for :func:`operation_of`;
    :data:`GIVEN`: the store method it is given as its first argument, which it calls."""

    def mark(fn: F) -> F:
        setattr(fn, _OPERATION, operation)
        return fn

    return mark


def operation_of(fn: Callable[..., Any], args: tuple[Any, ...] = ()) -> str:
    """The :class:`~fwrest.store.base.StateStore` operation that ``fn(*args)`` runs: a store
    method's name, a :func:`functools.partial`'s function's, a helper's mark (:func:`runs`).

    >>> class Store:
    ...     def hit_failure(self, key: str, window: float) -> None: ...
    >>> @runs(GIVEN)
    ... def both(fn, first, second, window): ...
    >>> store = Store()
    >>> operation_of(functools.partial(both, store.hit_failure, "u", "a"), (60.0,))
    'hit_failure'
    >>> operation_of(runs("add_lock")(lambda locks: None)), operation_of(store.hit_failure)
    ('add_lock', 'hit_failure')
    """
    while isinstance(fn, functools.partial):
        args = (*fn.args, *args)
        fn = fn.func
    marked = getattr(fn, _OPERATION, None)
    if marked == GIVEN and args and callable(args[0]):
        return operation_of(args[0], args[1:])
    if isinstance(marked, str):
        return marked
    return getattr(fn, "__name__", "?")


class StoreTimeout(StoreError, TimeoutError):
    """The store gave no answer within the call's deadline."""


class StoreBusy(StoreTimeout):
    """No store thread of this worker was free to start the call within its deadline: the
    calls before it were still running (a store that hangs holds every thread), so the store
    may be healthy and this worker overloaded."""


class Started:
    """When a store thread started a call and when it ended (``time.monotonic()``; 0.0 until
    then): the call's time on the store, without the time it waited for a thread nor the
    time the event loop took to look at its answer."""

    __slots__ = ("at", "ended")

    def __init__(self) -> None:
        self.at = 0.0
        self.ended = 0.0

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        self.at = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.ended = time.monotonic()

    def took(self) -> float:
        """Seconds on the store so far (0.0 when no thread started it)."""
        if not self.at:
            return 0.0
        return (self.ended or time.monotonic()) - self.at


class StoreClient:
    """Calls one store off the event loop, on threads of its own, under a deadline.

    Args:
        store: the store (its ``in_process`` decides whether calls hop to a thread).
        threads: the most store calls in progress at once.
    """

    def __init__(self, store: StoreBase, threads: int = STORE_THREADS) -> None:
        self.store = store
        self.inline = store.in_process
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="fwrest-store")

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """``fn(*args)`` on a store thread, for a caller that needs the outcome even after it
        stopped waiting (the readiness check's ping).

        Raises:
            StoreError: the client is closed (the service stops).
        """
        try:
            return self._pool.submit(fn, *args)
        except RuntimeError:  # the pool is shut down: a store call after close
            raise StoreError("the store client is closed (the service stops)") from None

    def submit_timed(self, fn: Callable[..., T], *args: Any) -> tuple[Future[T], Started]:
        """:meth:`submit`, with the moment a thread starts it, for :meth:`wait` (a refresh
        token's spend, whose outcome matters even after its 503).

        Raises:
            StoreError: the client is closed (the service stops).
        """
        started = Started()
        return self.submit(started.run, fn, *args), started

    def at_once(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` of an in-process store (memory), on the caller's thread (a traced
        worker's client gives it its span)."""
        return fn(*args)

    async def call(
        self, fn: Callable[..., T], *args: Any, deadline: float = BACKGROUND_DEADLINE_S
    ) -> T:
        """``fn(*args)``, awaited at most ``deadline`` seconds.

        Raises:
            StoreTimeout: past the deadline (the thread finishes on its own).
            StoreError: what ``fn`` raises.
        """
        if self.inline:
            return fn(*args)
        return await self.wait(*self.submit_timed(fn, *args), deadline)

    @staticmethod
    async def wait(
        job: Future[T], started: Started, deadline: float, queue: float | None = None
    ) -> T:
        """Await a call of :meth:`submit_timed` until ``deadline`` seconds after a thread
        started it (:class:`StoreTimeout` past it), or :class:`StoreBusy` (the call
        cancelled) when no thread has started it within ``queue`` seconds (``deadline`` when
        not given)."""
        queue = deadline if queue is None else queue
        waiting = asyncio.wrap_future(job)
        submitted = time.monotonic()
        end = submitted + min(queue, deadline)
        while True:
            try:
                return await asyncio.wait_for(
                    asyncio.shield(waiting), max(end - time.monotonic(), 0.0)
                )
            except TimeoutError:
                pass
            except asyncio.CancelledError:
                waiting.cancel()  # the caller is gone: so is the call, unless it runs
                raise
            if job.done():  # answered; the loop had not yet looked (a busy loop)
                return await waiting
            now = time.monotonic()
            if started.at == 0.0:
                if now < submitted + queue:
                    end = submitted + queue
                    continue
                if job.cancel():
                    waiting.cancel()
                    raise StoreBusy(
                        f"no store thread of this worker was free within {queue:g} s "
                        "(the calls before it still running)"
                    ) from None
            # started: its own deadline counts from its start
            end = (started.at or now) + deadline
            if end <= now:
                waiting.cancel()
                raise StoreTimeout(f"no answer within {deadline:g} s") from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


async def call_store(
    fn: Callable[..., T], *args: Any, deadline: float = BACKGROUND_DEADLINE_S
) -> T:
    """``fn(*args)`` in a thread of asyncio's executor, awaited at most ``deadline`` seconds:
    for a rare call of a native route that has no client at hand (the health check).

    Raises:
        StoreTimeout: past the deadline.
        StoreError: what ``fn`` raises.
    """
    try:
        return await asyncio.wait_for(asyncio.to_thread(fn, *args), deadline)
    except TimeoutError:
        raise StoreTimeout(f"no answer within {deadline:g} s") from None
