"""Calling the (blocking) store from the event loop: off the loop, under a deadline.

Every store call of fwrest runs in a thread and is awaited with one of two deadlines, so that a
hung store costs a bounded wait (SPEC 7: what needs the store answers 503 within 1.5 s):

* :data:`REQUEST_DEADLINE_S` for what a client waits on (a token request's calls share it, a
  settings change has it);
* :data:`BACKGROUND_DEADLINE_S` for background refreshes and native routes (Redis's own client
  timeout of about 1 s, and a margin for the thread hop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["BACKGROUND_DEADLINE_S", "REQUEST_DEADLINE_S", "call_store"]

T = TypeVar("T")

REQUEST_DEADLINE_S = 1.0
BACKGROUND_DEADLINE_S = 1.4


async def call_store(
    fn: Callable[..., T], *args: Any, deadline: float = BACKGROUND_DEADLINE_S
) -> T:
    """``fn(*args)`` in a thread, awaited at most ``deadline`` seconds.

    Raises:
        TimeoutError: past the deadline (the thread finishes on its own).
        StoreError: what ``fn`` raises.
    """
    return await asyncio.wait_for(asyncio.to_thread(fn, *args), deadline)
