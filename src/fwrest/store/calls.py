"""Calling the (blocking) store from the event loop: :class:`StoreClient`, the one way to.

Every store call of fwrest runs on the client's own threads (a hung store holds a thread for
Redis's whole client timeout; on asyncio's default executor such threads would starve the
application's ``def`` callbacks) and is awaited under one of two deadlines, so that a hung
store costs a bounded wait (SPEC 7: what needs the store answers 503 within 1.5 s):

* :data:`REQUEST_DEADLINE_S` for what a client waits on (a token request's calls share it, a
  settings change has it);
* :data:`BACKGROUND_DEADLINE_S` for background refreshes and native routes (Redis's own client
  timeout of about 1 s, and a margin for the thread hop).

A deadline that passes is a :class:`StoreTimeout`, a :class:`StoreError` (callers catch one
type) that names the deadline. A store that answers in this process at once (``in_process``:
memory) is called inline, without a thread hop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from fwrest.store.base import StoreBase, StoreError

__all__ = [
    "BACKGROUND_DEADLINE_S",
    "REQUEST_DEADLINE_S",
    "STORE_THREADS",
    "StoreClient",
    "StoreTimeout",
    "call_store",
]

T = TypeVar("T")

REQUEST_DEADLINE_S = 1.0
BACKGROUND_DEADLINE_S = 1.4
STORE_THREADS = 4  # per client; threads start lazily, in the worker


class StoreTimeout(StoreError, TimeoutError):
    """The store gave no answer within the call's deadline."""


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
        stopped waiting (a refresh token's spend that may land after its 503)."""
        return self._pool.submit(fn, *args)

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
        return await self.wait(self._pool.submit(fn, *args), deadline)

    @staticmethod
    async def wait(job: Future[T], deadline: float) -> T:
        """Await a submitted call at most ``deadline`` seconds (:class:`StoreTimeout` past it)."""
        try:
            return await asyncio.wait_for(asyncio.wrap_future(job), deadline)
        except TimeoutError:
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
