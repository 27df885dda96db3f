"""Where an application's ``def`` callback (OnAuth, onAuth, onAuthparams) runs: in the port's
thread pool when the worker gave one (as the original product runs it in the request's
thread; a full pool answers 503 Server Busy, an ``HTTPError`` the callers let through), else
in asyncio's default executor (``fwrest.start()`` without a worker pool, tests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

__all__ = ["Pool", "off_loop"]

T = TypeVar("T")


class Pool(Protocol):
    """What :func:`off_loop` needs of ``fwrest.server.pool.ThreadPool``."""

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]: ...


def off_loop(pool: Pool | None, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
    """``fn(*args)`` off the event loop, to be awaited (no coroutine of its own: the caller
    awaits the pool's future or ``to_thread`` directly)."""
    if pool is not None:
        return pool.submit(fn, *args)
    return asyncio.to_thread(fn, *args)
