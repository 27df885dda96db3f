"""Where an application's ``def`` callback (OnAuth, onAuth, onAuthparams) runs: in the port's
thread pool when the worker gave one (as the original product runs it in the request's
thread; a full pool answers 503 Server Busy, an ``HTTPError`` the callers let through), else
in asyncio's default executor (``fwrest.start()`` without a worker pool, tests).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

__all__ = ["Pool", "off_loop", "settled"]

T = TypeVar("T")


class Pool(Protocol):
    """What :func:`off_loop` needs of ``fwrest.server.pool.ThreadPool``."""

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]: ...


def off_loop(pool: Pool | None, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
    """``fn(*args)`` off the event loop, to be awaited (no coroutine of its own: the caller
    awaits the future directly). Without a pool, the default executor's future, the
    context copied as ``to_thread`` copies it; never a coroutine, which :func:`settled` would
    run as a task of its own, and a task re-raises a ``SystemExit`` or ``KeyboardInterrupt``
    of the thread into the event loop itself, ending it (SPEC 7.1)."""
    if pool is not None:
        return pool.submit(fn, *args)
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return asyncio.get_running_loop().run_in_executor(None, call)


async def settled(job: Awaitable[T]) -> T:
    """``job``'s result, its exception raised here, in a Python frame, with the traceback it
    was raised with (the frames of the thread that ran the application's function, which
    ``rest_error_full=1`` logs). Awaited directly, a thread's failed future reaches the
    coroutines above it through ``throw``, and the compiled build's coroutines (mypyc) drop
    the exception's traceback there; so they await a thread's result through this, which only
    ever waits for the future to end. This module is never compiled."""
    job = asyncio.ensure_future(job)
    if not job.done():
        ended = job.get_loop().create_future()
        job.add_done_callback(functools.partial(_wake, ended))
        try:
            await ended
        except asyncio.CancelledError:
            job.cancel()  # the request was cancelled: so is the wait for its thread
            raise
    return job.result()


def _wake(ended: asyncio.Future[None], _job: asyncio.Future[Any]) -> None:
    if not ended.done():  # cancelled with its request
        ended.set_result(None)
