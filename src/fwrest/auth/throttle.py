"""Brute-force throttle shared by all workers and hosts through the state store (SPEC 4.2).

Failures are counted per user name and per client address; past ``maxFailures`` within the
window the key is locked until the window ends, and every worker learns it within a second
(a background refresh of the lock list). The check on the request path reads only the local
copy: a Basic port keeps working, unthrottled, while the store is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from fwrest import log
from fwrest.errors import HTTPError
from fwrest.store import StateStore, StoreError

__all__ = ["WINDOW_S", "Throttle"]

WINDOW_S = 300.0
_DEADLINE_S = 1.4


class Throttle:
    def __init__(
        self, store: StateStore, max_failures: int, port_name: str, window_s: float = WINDOW_S
    ) -> None:
        self.store = store
        self.max_failures = max_failures
        self.window_s = window_s
        self.port_name = port_name
        self.locked: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._refresh())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _refresh(self) -> None:
        while True:
            try:
                fresh = await asyncio.wait_for(asyncio.to_thread(self.store.locks), _DEADLINE_S)
                self.locked = fresh
            except (StoreError, TimeoutError) as exc:
                log.auth_log.debug("lock-out list not refreshed: %s", exc)
            await asyncio.sleep(0.5)

    def check(self, user: str, client_ip: str) -> None:
        """Raise 429 with ``Retry-After`` while the user or the address is locked out."""
        if not self.locked:
            return
        now = time.time()
        until = max(self.locked.get(f"user:{user}", 0.0), self.locked.get(f"ip:{client_ip}", 0.0))
        if until > now:
            raise HTTPError(
                429,
                detailed="too many failed attempts",
                headers=(("retry-after", str(max(int(until - now + 0.999), 1))),),
            )

    async def failed(self, user: str, client_ip: str) -> None:
        """Count a failure; lock the user or address once it reaches ``maxFailures``."""
        for key in (f"user:{user}", f"ip:{client_ip}"):
            try:
                count, remaining = await asyncio.wait_for(
                    asyncio.to_thread(self.store.hit_failure, key, self.window_s), _DEADLINE_S
                )
            except (StoreError, TimeoutError) as exc:
                log.auth_log.warning(
                    "[%s] failure not counted, state store unavailable: %s",
                    self.port_name,
                    exc or "timeout",
                )
                return
            if count >= self.max_failures:
                until = time.time() + remaining
                if count == self.max_failures:
                    # once per lock-out: the store's count crosses the threshold once, whereas
                    # a worker that has not yet refreshed its lock list would log it again
                    log.auth_log.warning(
                        "[%s] %d failed attempts for %s within %.0f s: locked out for %.0f s",
                        self.port_name,
                        count,
                        log.escape(key),
                        self.window_s,
                        remaining,
                    )
                self.locked[key] = until
                with contextlib.suppress(StoreError, TimeoutError):
                    await asyncio.wait_for(
                        asyncio.to_thread(self.store.add_lock, key, until), _DEADLINE_S
                    )
