"""Brute-force throttle shared by all workers and hosts through the state store (SPEC 4.2).

Failures are counted per user name and per client address in the store, under keys of the
port (:func:`port_keys`: each port has its own ``Authorization`` object and ``maxFailures``, so
failures on one port never count toward another's); past ``maxFailures`` within the window the
key is locked until the window ends. The check on the request path never
waits on the store (a Basic port keeps working, unthrottled, while the store is unreachable),
so it reads two things in memory:

* the :class:`LockBoard` of this host: the worker whose failure crosses the threshold writes
  the lock there before it answers, so every worker of the host refuses the very next attempt
  (after ``maxFailures`` failures the user's further attempts are throttled on every worker),
  without a store round trip on any request;
* a copy of the store's lock list, refreshed every 0.5 s, for the locks of other hosts
  sharing a Redis store (they arrive within that half second).

With ``StateStore=memory`` the store is one process's, so the failures themselves are counted
on the lock board too (:meth:`LockBoard.hit_failure`): the workers of ``--workers N`` share
the count as they would through sqlite or Redis, instead of each allowing ``maxFailures``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from multiprocessing.sharedctypes import RawArray
from typing import Any

from fwrest import log
from fwrest.errors import HTTPError
from fwrest.store import StateStore, StoreError

__all__ = ["WINDOW_S", "LockBoard", "Throttle", "crossed", "port_keys"]

WINDOW_S = 300.0
_DEADLINE_S = 1.4


def port_keys(port_name: str) -> tuple[str, str]:
    """The prefixes of the failure counters and lock keys of one port: ``(user, address)``.

    The port is the server section's name, folded as section names are (hosts sharing a Redis
    store share the counters of a port of the same name: the same service). The user name and
    the address follow the prefix: ``"<port>|user:<name>"``, ``"<port>|ip:<address>"``.
    """
    namespace = port_name.strip().lower()
    return f"{namespace}|user:", f"{namespace}|ip:"


def crossed(count: int, max_failures: int) -> bool:
    """Whether the failure that made the window's count ``count`` started a lock-out: the
    count went from below ``maxFailures`` to ``maxFailures`` or more. Counters are atomic, so
    exactly one failure of a window does so, on whichever worker or host: the lock-out's
    warning is logged once, even when concurrent failures push the count past the threshold."""
    return count - 1 < max_failures <= count


def _tag(key: str) -> int:
    """A 63-bit tag of a lock key (never 0, which marks a free entry)."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 1) or 1


class LockBoard:
    """Lock-outs that every worker of one host sees at once: memory the supervisor maps
    before it forks the workers, which inherit it (as they inherit the heartbeat array).

    One region per worker slot, written only by that worker's event loop, so no lock is
    shared between processes (a worker killed mid-write cannot leave one held). The array
    starts with one header per region, the latest end of any lock written in it (together,
    so that the check of every request reads them in one slice); then each region's ``slots``
    entries of (tag, end), ends in epoch milliseconds. A key lives in one of the ``PROBE`` entries after
    ``tag % slots``: the one holding its tag, else a free or expired one, else the one that
    ends first (that lock is then known to its own worker and to the store's list only).
    A writer clears an entry's end before it changes the tag, so a reader that finds a tag
    reads that key's end or 0, never another key's. A replacement worker takes over its
    slot's region, locks included.
    """

    SLOTS = 512
    FAILURE_SLOTS = 4096
    PROBE = 8

    def __init__(self, regions: int, slots: int = SLOTS, failure_slots: int = FAILURE_SLOTS):
        self.regions = regions
        self.slots = slots
        self._stride = 2 * slots
        self._mem: Any = RawArray("q", regions + regions * self._stride)
        self._headers = memoryview(self._mem).cast("B").cast("q")[:regions]
        # failure counts of an in-process (memory) store: per region ``failure_slots``
        # entries of (tag, window start in epoch ms, count), written by that region's worker
        self.failure_slots = failure_slots
        self._fails: Any = RawArray("q", regions * 3 * failure_slots)

    def latest(self) -> int:
        """The latest end (epoch ms) of any lock written here; in the past, none is in force
        (the common case: one C-level pass over the region headers, through a memoryview,
        as a ctypes slice costs ten times more)."""
        return max(self._headers)

    def until(self, key: str, now_ms: int) -> int:
        """When the lock of ``key`` ends (epoch ms), or 0."""
        tag = _tag(key)
        mem, stride, slots = self._mem, self._stride, self.slots
        start = tag % slots
        found = 0
        for r in range(self.regions):
            if mem[r] <= now_ms:
                continue
            base = self.regions + r * stride
            for i in range(self.PROBE):
                j = base + 2 * ((start + i) % slots)
                if mem[j] == tag:
                    end = mem[j + 1]
                    if end > found:
                        found = end
        return found if found > now_ms else 0

    def publish(self, region: int, key: str, until_ms: int) -> None:
        """Write the lock of ``key`` into this worker's ``region`` (its only writer)."""
        tag = _tag(key)
        mem, slots = self._mem, self.slots
        base = self.regions + region * self._stride
        now_ms = int(time.time() * 1000)
        start = tag % slots
        choice, choice_end = -1, 0
        for i in range(self.PROBE):
            j = base + 2 * ((start + i) % slots)
            if mem[j] == tag:
                mem[j + 1] = max(mem[j + 1], until_ms)
                break
            end = mem[j + 1]
            if mem[j] == 0 or end <= now_ms:
                end = 0  # free or expired: the best choice
            if choice < 0 or end < choice_end:
                choice, choice_end = j, end
        else:
            mem[choice + 1] = 0
            mem[choice] = tag
            mem[choice + 1] = until_ms
        if until_ms > mem[region]:
            mem[region] = until_ms

    def hit_failure(self, region: int, key: str, window_s: float) -> tuple[int, float]:
        """Count a failure of ``key`` in this worker's ``region`` (its only writer), as
        ``StateStore.hit_failure`` does: ``(failures of key within their windows, over every
        worker; seconds until the latest of those windows ends)``. A window starts at a
        worker's first failure of the key and the count restarts when it has passed."""
        tag = _tag(key)
        mem, slots = self._fails, self.failure_slots
        probe = min(self.PROBE, slots)  # each entry once (a sum would count one twice)
        now_ms = time.time_ns() // 1_000_000
        window_ms = int(window_s * 1000)
        start = tag % slots
        base = region * 3 * slots
        choice, choice_start = -1, 0
        for i in range(probe):
            j = base + 3 * ((start + i) % slots)
            if mem[j] == tag:
                if mem[j + 1] + window_ms <= now_ms:  # its window has passed: a new one
                    mem[j + 2] = 0
                    mem[j + 1] = now_ms
                mem[j + 2] += 1
                break
            began = mem[j + 1]
            if mem[j] == 0 or began + window_ms <= now_ms:
                began = 0  # free or ended: the best choice
            if choice < 0 or began < choice_start:
                choice, choice_start = j, began
        else:
            # a new key: its count cleared before its tag is written, so that a reader
            # finding the tag reads this key's count, never the one it replaces
            mem[choice + 2] = 0
            mem[choice] = tag
            mem[choice + 1] = now_ms
            mem[choice + 2] = 1
        count, end = 0, now_ms
        for r in range(self.regions):
            rbase = r * 3 * slots
            for i in range(probe):
                j = rbase + 3 * ((start + i) % slots)
                if mem[j] == tag:
                    window_end = mem[j + 1] + window_ms
                    if window_end > now_ms:
                        count += mem[j + 2]
                        end = max(end, window_end)
        return count, (end - now_ms) / 1000


class Throttle:
    def __init__(
        self,
        store: StateStore,
        max_failures: int,
        port_name: str,
        window_s: float = WINDOW_S,
        *,
        board: LockBoard | None = None,
        region: int = 0,
    ) -> None:
        self.store = store
        self.max_failures = max_failures
        self.window_s = window_s
        self.port_name = port_name
        self._user_key, self._ip_key = port_keys(port_name)
        self._own = self._user_key.rpartition("|")[0] + "|"  # the prefix of this port's locks
        self.locked: dict[str, float] = {}
        self.board = board
        self.region = region
        # an in-process (memory) store under a supervisor: failures are counted on the board,
        # which every worker of the host shares (the store is this worker's only)
        self._board_counts = board is not None and store.in_process
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
                # this port's locks only: another port's lock-out leaves this port's check on
                # its fast path
                own = self._own
                self.locked = {k: u for k, u in fresh.items() if k.startswith(own)}
            except (StoreError, TimeoutError) as exc:
                log.auth_log.debug(
                    "lock-out list not refreshed: %s",
                    str(exc) or f"no answer within {_DEADLINE_S:g} s",
                )
            await asyncio.sleep(0.5)

    def check(self, user: str, client_ip: str) -> None:
        """Raise 429 with ``Retry-After`` while the user or the address is locked out."""
        locked, board = self.locked, self.board
        now_ms = time.time_ns() // 1_000_000
        if not locked and (board is None or board.latest() <= now_ms):
            return
        now = now_ms / 1000
        user_key, ip_key = self._user_key + user, self._ip_key + client_ip
        until = max(locked.get(user_key, 0.0), locked.get(ip_key, 0.0)) if locked else 0.0
        if board is not None and until <= now:
            until = max(board.until(user_key, now_ms), board.until(ip_key, now_ms)) / 1000
        if until > now:
            raise HTTPError(
                429,
                detailed="too many failed attempts",
                headers=(("retry-after", str(max(int(until - now + 0.999), 1))),),
            )

    async def failed(self, user: str, client_ip: str) -> None:
        """Count a failure; lock the user or address once it reaches ``maxFailures``."""
        for key, shown in (
            (self._user_key + user, "user:" + user),
            (self._ip_key + client_ip, "ip:" + client_ip),
        ):
            try:
                if self._board_counts:
                    assert self.board is not None
                    count, remaining = self.board.hit_failure(self.region, key, self.window_s)
                else:
                    count, remaining = await asyncio.wait_for(
                        asyncio.to_thread(self.store.hit_failure, key, self.window_s),
                        _DEADLINE_S,
                    )
            except (StoreError, TimeoutError) as exc:
                log.auth_log.warning(
                    "[%s] failure not counted, state store unavailable: %s",
                    self.port_name,
                    str(exc) or f"no answer within {_DEADLINE_S:g} s",
                )
                return
            if count >= self.max_failures:
                until = time.time() + remaining
                if crossed(count, self.max_failures):
                    # once per lock-out: the store's count crosses the threshold once (a count
                    # pushed past it by a concurrent failure is not a new lock-out), whereas a
                    # worker that has not yet refreshed its lock list would log it again
                    log.auth_log.warning(
                        "[%s] %d failed attempts for %s within %.0f s: locked out for %.0f s",
                        self.port_name,
                        count,
                        log.escape(shown),
                        self.window_s,
                        remaining,
                    )
                self.locked[key] = until
                if self.board is not None:
                    # before this refusal is answered: the next attempt, on any worker of this
                    # host, finds the lock
                    self.board.publish(self.region, key, int(until * 1000))
                with contextlib.suppress(StoreError, TimeoutError):
                    await asyncio.wait_for(
                        asyncio.to_thread(self.store.add_lock, key, until), _DEADLINE_S
                    )
