"""The brute-force throttle of both schemes (SPEC 4.1, 4.2, 7.1): Basic's ``OnAuth`` and the
token route's password grant use this one implementation, with one window (:data:`WINDOW_S`),
the keys of their port (:func:`port_keys`: each port has its own ``Authorization`` object and
``maxFailures``), one lock-out, one 429 with ``Retry-After`` and one warning per lock-out.

**Exact under concurrency.** An attempt is counted *before* its password is checked
(:meth:`Throttle.admit`): an attempt whose count passes ``maxFailures`` is refused with 429
and its password is never checked, so however many attempts arrive at once, at most
``maxFailures`` wrong passwords are checked in a window. What becomes of that count:

* the password was wrong: it stays, a failure (:meth:`Throttle.failed`), and the failure that
  takes the count to ``maxFailures`` locks the key until its window ends;
* in the store an attempt is counted under its user's and its address's keys together, and
  only while both are below ``maxFailures`` (``FailureStore.hit_failures``, atomic): one
  refused for one key never sits in the other's count meanwhile, where another attempt would
  find it (two hosts' attempts counted the keys one after the other, a refused one took its
  count back; the count at ``maxFailures`` was reached twice, its lock-out announced twice,
  or by an attempt counted over another's that was never checked: locked a failure early);
* the password was right, or it was never checked (refused over the limit, an exception in
  the validator, a full pool, a client gone): it is taken back (:meth:`Throttle.succeeded`,
  :meth:`Throttle.abandon`). So the count is the failures plus the checks in progress, and a
  right password is never locked out by its own count (docs/decisions.md, "Brute force").

**Keys.** User names are counted case-folded and NFKC-normalised (``Alice``, ``ALICE`` and
their fullwidth forms are one user: :func:`user_key`); IPv6 addresses per /64 (one host
usually holds a whole /64), an IPv4-mapped address as the IPv4 address (:func:`address_key`).

**Where an attempt is counted** depends on what the port may wait on:

* the token route (``strict``) counts in the state store, under the request's store
  deadline: every worker and host shares the count at once, and a store that does not answer
  is a 503 (token issuance fails closed, SPEC 7);
* a Basic port counts in the state store too, before ``OnAuth``, so that the hosts sharing
  it check at most ``maxFailures`` passwords between them (SPEC 7.1, 8); but it never fails
  on the store (Basic keeps working, throttled, while the store is away): when the store does
  not answer within the background deadline, the port counts on the host's
  :class:`LockBoard` (memory the supervisor shares with its workers, no I/O) for the next
  :data:`_AWAY_S`. A failure counted there is settled by the host's count at once (nothing
  waits on a store this worker knows is away) and written to the store behind the answer,
  whose count then locks what the host's did not, if it answers (a failure it does not take
  keeps the board counting for another :data:`_AWAY_S`; a lock-out the host made meanwhile
  is written to the store when it answers again, with the failures that made it,
  :meth:`Throttle._write_unwritten`). A header
  ``OnAuth`` accepted lately is not counted at all (:meth:`Throttle.known`), so a client's
  requests do not wait on the store;
* with ``StateStore=memory`` the store is one process's: attempts are counted on the board
  when there is one (``--workers N`` share it), else in the store itself.

**The check before counting** never waits on the store either; it reads two things in memory:
the :class:`LockBoard` of this host (the worker whose failure locks a key writes the lock
there before it answers, so every worker of the host refuses the very next attempt) and a
copy of the store's lock list, refreshed every 0.5 s, for the locks of other hosts sharing a
Redis store.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import hashlib
import ipaddress
import itertools
import time
import unicodedata
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from multiprocessing.sharedctypes import RawArray
from typing import Any, Protocol, TypeVar

from fwrest import log
from fwrest.errors import HTTPError, TooManyRequests, store_unavailable
from fwrest.store import StateStore, StoreError
from fwrest.store.audit import AuditEvent, AuditLog
from fwrest.store.calls import BACKGROUND_DEADLINE_S, GIVEN, StoreClient, StoreTimeout, runs

__all__ = [
    "BASIC_WORDING",
    "TOKEN_WORDING",
    "WAIT_S",
    "WINDOW_S",
    "Attempt",
    "LockBoard",
    "StoreRun",
    "Throttle",
    "Wording",
    "address_key",
    "port_keys",
    "shown_user",
    "user_key",
]

T = TypeVar("T")

WINDOW_S = 300.0  # maxFailures within 5 minutes (SPEC 4.2)
_DEADLINE_S = BACKGROUND_DEADLINE_S
# An attempt that finds the count full of checks in progress waits this long at most for one
# of them to end without a failure, polling at growing steps (see Throttle.admit).
WAIT_S = 1.0
_FIRST_STEP_S = 0.005
_LAST_STEP_S = 0.1
_ADDRESS_KEYS_MAX = 4096  # address keys remembered per process (parsing costs microseconds)
# A Basic port counts an attempt in the store when the store answers within _DEADLINE_S (a
# store busy under a burst of attempts may take most of it); else on the host's board, and
# goes on doing so for _AWAY_S before it asks the store again (Basic keeps working while the
# store is away, without waiting on it at every attempt).
_AWAY_S = 5.0
# lock-outs made while the store was away, written to it per refresh at most (one trip of
# that many writes, well within the store deadline even when each write takes 50 ms)
_WRITE_BATCH = 16
# how often a lock made on the board looks whether its failures' store writes have ended
_WRITES_POLL_S = 0.02


def port_keys(port_name: str) -> tuple[str, str]:
    """The prefixes of the failure counters and lock keys of one port: ``(user, address)``.

    The port is the server section's name, folded as section names are (hosts sharing a Redis
    store share the counters of a port of the same name: the same service). The user name and
    the address follow the prefix: ``"<port>|user:<name>"``, ``"<port>|ip:<address>"``.
    """
    namespace = port_name.strip().lower()
    return f"{namespace}|user:", f"{namespace}|ip:"


def shown_user(user: str) -> str:
    """A user name the client gave, as the log shows it: cut to ``rest_log_stringsize``
    characters as every other value a client gives (an 11 KB name was written whole); the
    caller writes it with ``%r`` (CR, LF and ESC escaped)."""
    from fwrest.server.state import tunables  # here: fwrest.server imports fwrest.auth

    return log.truncate(user, tunables.current.rest_log_stringsize)


def user_key(name: str) -> str:
    """A user name as the throttle counts it: NFKC-normalised and case-folded (NFKC again
    after folding, which can undo it), so that spellings of one name count as one.

    >>> {user_key(n) for n in ("Alice", "ALICE", "\uff21\uff4c\uff49\uff43\uff45")}
    {'alice'}
    """
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


_address_keys: dict[str, str] = {}


def address_key(address: str) -> str:
    """A client address as the throttle counts it: IPv4 as is, IPv6 per /64, an IPv4-mapped
    IPv6 address (a dual-stack socket's IPv4 client) as its IPv4 address.

    >>> address_key("2001:db8:1:2::a"), address_key("::ffff:192.0.2.7")
    ('2001:db8:1:2::/64', '192.0.2.7')
    """
    if ":" not in address:
        return address  # IPv4 (or not an address at all): itself
    found = _address_keys.get(address)
    if found is not None:
        return found
    try:
        ip = ipaddress.IPv6Address(address)
    except ValueError:
        found = address
    else:
        mapped = ip.ipv4_mapped
        if mapped is not None:
            found = str(mapped)
        else:
            found = str(ipaddress.IPv6Network(((int(ip) >> 64) << 64, 64)))
    if len(_address_keys) >= _ADDRESS_KEYS_MAX:
        _address_keys.clear()
    _address_keys[address] = found
    return found


@runs(GIVEN)
def _both(fn: Callable[..., T], first: str, second: str, window: float, *more: Any) -> tuple[T, T]:
    """``fn`` for the user's key and the address's key, in one trip to the store's thread."""
    return fn(first, window, *more), fn(second, window, *more)


# a count's deadline (``before`` of ``hit_failure``, ``hit_failures``) this much before its
# caller stops waiting: the count is taken while the caller still waits for it, or not at all
_BEFORE_MARGIN_S = 0.05


@runs(GIVEN)
def _counted_by(
    count: Callable[[float], Sequence[tuple[int, float]]], budget: float
) -> Sequence[tuple[int, float]]:
    """``count(before)`` on a store thread, ``before`` the deadline of its caller's wait that
    starts now (``budget`` seconds, counted from the thread's start): a count the caller gave
    up on (a sqlite lock held past it, Redis frozen) is not taken later, and raises
    :class:`StoreTimeout` as the caller's wait would have (decisions.md)."""
    found = count(time.time() + budget - _BEFORE_MARGIN_S)
    if any(n == 0 for n, _ in found):
        raise StoreTimeout(f"no count within {budget:g} s")
    return found


@runs("add_lock")
def _add_locks(store: StateStore, locks: dict[str, tuple[float, int]], window_s: float) -> None:
    """``locks`` (key -> until, the failures that made it on the host's board) added to the
    store's lock list, in one trip to its thread."""
    for key, (until, failures) in locks.items():
        store.add_lock(key, until, failures, window_s)


def _tag(key: str) -> int:
    """A 63-bit tag of a lock key (never 0, which marks a free entry)."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 1) or 1


class LockBoard:
    """Lock-outs that every worker of one host sees at once, and the attempt counts of a
    Basic port (or of any port on a memory store): memory the supervisor maps before it forks
    the workers, which inherit it (as they inherit the heartbeat array).

    One region per worker slot, written only by that worker's event loop, so no lock is
    shared between processes (a worker killed mid-write cannot leave one held). The array
    starts with one header per region, the latest end of any lock written in it (together,
    so that the check of every request reads them in one slice); then each region's ``slots``
    entries of (tag, end), ends in epoch milliseconds. A key lives in one of the ``PROBE``
    entries after ``tag % slots``: the one holding its tag, else a free or expired one, else the one that
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
        # attempt counts (Basic ports; every port on a memory store): per region
        # ``failure_slots`` entries of (tag, window start in epoch ms, count), written by that
        # region's worker; an entry whose count is taken back to 0 is free again
        self.failure_slots = failure_slots
        self._fails: Any = RawArray("q", regions * 3 * failure_slots)
        # read and written through a memoryview: every attempt is counted here before its
        # check (SPEC 7.1), and a memoryview's item costs a fraction of a ctypes item
        self._fv = memoryview(self._fails).cast("B").cast("q")

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

    def withdraw(self, region: int, key: str) -> None:
        """End the lock of ``key`` in this worker's ``region`` (its only writer) and forget
        its count there: a lock-out lifted in the store (``fwrest lockouts clear``)."""
        tag = _tag(key)
        mem, slots = self._mem, self.slots
        base = self.regions + region * self._stride
        for i in range(self.PROBE):
            j = base + 2 * ((tag % slots + i) % slots)
            if mem[j] == tag:
                mem[j + 1] = 0
        fv, fslots = self._fv, self.failure_slots
        fbase = region * 3 * fslots
        for i in range(min(self.PROBE, fslots)):
            j = fbase + 3 * ((tag % fslots + i) % fslots)
            if fv[j] == tag:
                fv[j + 2] = 0
                fv[j] = 0

    def hit_failure(self, region: int, key: str, window_s: float) -> tuple[int, float]:
        """Count a failure of ``key`` in this worker's ``region`` (its only writer), as
        ``StateStore.hit_failure`` does: ``(failures of key within their windows, over every
        worker; seconds until the latest of those windows ends)``. A window starts at a
        worker's first failure of the key and the count restarts when it has passed."""
        tag = _tag(key)
        mem, slots = self._fv, self.failure_slots
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

    def release_failure(self, region: int, key: str, window_s: float) -> None:
        """Take back one count of ``key`` in this worker's ``region`` (an attempt counted by
        :meth:`hit_failure` before its check, whose password was right or never checked),
        within its window, never below zero; an entry back at zero is free again."""
        tag = _tag(key)
        mem, slots = self._fv, self.failure_slots
        probe = min(self.PROBE, slots)
        now_ms = time.time_ns() // 1_000_000
        start = tag % slots
        base = region * 3 * slots
        for i in range(probe):
            j = base + 3 * ((start + i) % slots)
            if mem[j] == tag:
                if mem[j + 1] + int(window_s * 1000) > now_ms and mem[j + 2] > 0:
                    mem[j + 2] -= 1
                    if mem[j + 2] == 0:
                        mem[j] = 0  # after its count: a reader finding the tag reads 0
                return


@dataclass(frozen=True, slots=True)
class Wording:
    """How one scheme's lock-out warning names what failed and the keys it locked."""

    attempts: str  # "failed attempts", "failed sign-ins (password grant or login page)"
    user: str  # a format of the user name
    address: str  # a format of the address


BASIC_WORDING = Wording("failed attempts", "user:{}", "ip:{}")
# an oAuth2 port's budget is shared by the password grant and the login page (SPEC 16.1)
TOKEN_WORDING = Wording("failed sign-ins (password grant or login page)", "user {!r}", "client {}")


class StoreRun(Protocol):
    """How a strict caller runs a store call: under its request's deadline, a store that does
    not answer raising the 503 (the token service's ``store_call``)."""

    def __call__(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...

    def budget(self) -> float:
        """Seconds the next call may take once a store thread runs it."""
        ...


class _Where(enum.Enum):
    """Where a port's attempts are counted (see the module's docstring)."""

    STORE = "the state store, before the check"
    INLINE = "an in-process store, before the check"
    BOARD = "the host's lock board (a memory store's workers)"
    BOARD_THEN_STORE = "the state store, the host's lock board while the store is away"


@dataclass(slots=True)
class Attempt:
    """One attempt admitted by :meth:`Throttle.admit`, counted under both its keys (or by
    :meth:`Throttle.known`, not counted); settled once by :meth:`Throttle.failed`,
    :meth:`Throttle.succeeded` or :meth:`Throttle.abandon`."""

    user: str  # the user's key
    address: str  # the address's key
    counts: tuple[int, int]  # the counts with this attempt in them
    remaining: tuple[float, float]  # seconds until each key's window ends
    counted: bool = True
    settled: bool = False
    in_store: bool = False  # counted in the store (else on the board or inline)


class Throttle:
    """The brute-force throttle of one port in one worker (see the module's docstring).

    Args:
        store: the state store.
        max_failures: the port's ``maxFailures``.
        port_name: the server section's name (the keys' prefix).
        window_s: the window.
        board: the lock board the workers of the host share (None: this worker's own).
        region: this worker's region on the board.
        strict: count in the store before the check and fail closed (the token route);
            else never wait on the store before the check (Basic).
        wording: how the lock-out warning reads.
        client: how the store is called (the worker's; else one of its own).
        audit: the audit trail, where each lock-out is recorded (SPEC 13.5).
    """

    def __init__(
        self,
        store: StateStore,
        max_failures: int,
        port_name: str,
        window_s: float = WINDOW_S,
        *,
        board: LockBoard | None = None,
        region: int = 0,
        strict: bool = False,
        wording: Wording = BASIC_WORDING,
        client: StoreClient | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self.store = store
        self.audit = audit
        self._own_client = client is None
        self._client = client if client is not None else StoreClient(store)
        self.max_failures = max_failures
        self.window_s = window_s
        self.port_name = port_name
        self.wording = wording
        self._user_key, self._ip_key = port_keys(port_name)
        self._own = self._user_key.rpartition("|")[0] + "|"  # the prefix of this port's locks
        self.locked: dict[str, float] = {}
        self._listed: dict[str, float] = {}  # the store's list at the last refresh
        # this worker's locks written to the store: key -> (until, monotonic time written);
        # judged by the first list asked for after the write (see _lifted)
        self._written: dict[str, tuple[float, float]] = {}
        # this worker's locks the store has not taken yet (it did not answer): key -> (until,
        # the failures counted on the board that made it, which the store's count is raised
        # to: ``fwrest lockouts list`` shows them); written again before each refresh's list
        # until it takes them or they end
        self._unwritten: dict[str, tuple[float, int]] = {}
        # per key, this worker's failures counted on the board whose write to the store has
        # not ended yet: a lock made on the board is written once they have (_write_lock)
        self._writing: dict[str, int] = {}
        if store.in_process:
            # a memory store is this process's: under a supervisor, the board is what the
            # workers share
            where = _Where.BOARD if board is not None else _Where.INLINE
        elif strict:
            where = _Where.STORE
        else:
            where = _Where.BOARD_THEN_STORE
            if board is None:  # no supervisor (fwrest.start): this worker's own board
                board, region = LockBoard(1), 0
        self._where = where
        self.board = board
        self.region = region
        self._away_until = 0.0  # monotonic: till then a Basic port counts on the board
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._refresh())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for task in list(self._background):
            task.cancel()
        if self._own_client:
            self._client.close()

    async def _refresh(self) -> None:
        while True:
            if self._unwritten:
                try:
                    await self._write_unwritten()
                except (StoreError, TimeoutError) as exc:
                    # the list is read all the same: a store that takes no write (full,
                    # read-only) must not keep this worker from seeing lifts and other
                    # hosts' lock-outs
                    log.auth_log.debug(
                        "lock-outs made while the store was away not written yet: %s",
                        str(exc) or f"no answer within {_DEADLINE_S:g} s",
                    )
                except Exception:
                    log.auth_log.exception("lock-outs made while the store was away not written")
            try:
                asked = time.monotonic()
                fresh = await self._client.call(self.store.locks, deadline=_DEADLINE_S)
                # this port's locks only: another port's lock-out leaves this port's check on
                # its fast path
                own = self._own
                locked = {k: u for k, u in fresh.items() if k.startswith(own)}
                self._lifted(locked, asked)
                self.locked = locked
            except (StoreError, TimeoutError) as exc:
                log.auth_log.debug(
                    "lock-out list not refreshed: %s",
                    str(exc) or f"no answer within {_DEADLINE_S:g} s",
                )
            except Exception:
                # never a silent end: a dead refresh would stop lifting lock-outs for good
                log.auth_log.exception("lock-out list not refreshed (retried in 0.5 s)")
            await asyncio.sleep(0.5)

    async def _write_unwritten(self) -> None:
        """Write to the store this worker's locks it did not take when they were made (a
        store away: the lock-out of a Basic port counted on the host's board), those still
        in force: so every host honours them, ``fwrest lockouts`` lists and lifts them
        (SPEC 4.2, 13.6). Raises what the store call raises (the refresh retries)."""
        now = time.time()
        self._unwritten = {key: lock for key, lock in self._unwritten.items() if lock[0] > now}
        # a copy (each write taken pops its key), of a bounded size: a trip within the
        # deadline; a lock whose failures' writes have not ended waits for them (_write_lock)
        ready = ((k, lock) for k, lock in self._unwritten.items() if not self._writing.get(k))
        due = dict(itertools.islice(ready, _WRITE_BATCH))
        if due:
            await self._client.call(
                _add_locks, self.store, due, self.window_s, deadline=_DEADLINE_S
            )
            for key, (until, _) in due.items():
                self._lock_written(key, until)

    def _lifted(self, fresh: dict[str, float], asked: float) -> None:
        """Withdraw from this worker's region of the board the locks in force that the store
        no longer lists: lifted (``fwrest lockouts clear``, SPEC 13.6). Those are the locks
        it listed at the last refresh, and this worker's own locks written to it before
        ``fresh`` was asked for (at monotonic time ``asked``), listed or not yet: one lifted
        before any refresh saw it is lifted too. A lock of this worker's whose write is still
        on its way is neither: it is no lock-out lifted (and withdrawing it would wipe the
        count that made it)."""
        now = time.time()
        board = self.board
        judged = [key for key, (_, written) in self._written.items() if written <= asked]
        if board is not None:
            candidates = dict(self._listed)
            for key in judged:
                candidates.setdefault(key, self._written[key][0])
            for key, until in candidates.items():
                if key not in fresh and until > now:
                    board.withdraw(self.region, key)
        for key in judged:
            del self._written[key]
        # a copy: ``fresh`` becomes ``self.locked``, where :meth:`_lock` adds this worker's
        # own locks before the store lists them
        self._listed = dict(fresh)

    # -- the check before counting (in memory only) ----------------------------------------------
    def keys(self, user: str, client_ip: str) -> tuple[str, str]:
        """The counter keys of a user name and a client address on this port."""
        return self._user_key + user_key(user), self._ip_key + address_key(client_ip)

    def check(self, user: str, client_ip: str) -> None:
        """Raise 429 with ``Retry-After`` while the user or the address is locked out."""
        self._check(*self.keys(user, client_ip))

    def _check(self, user_key: str, ip_key: str) -> None:
        locked, board = self.locked, self.board
        now_ms = time.time_ns() // 1_000_000
        if not locked and (board is None or board.latest() <= now_ms):
            return
        now = now_ms / 1000
        until = max(locked.get(user_key, 0.0), locked.get(ip_key, 0.0)) if locked else 0.0
        if board is not None and until <= now:
            until = max(board.until(user_key, now_ms), board.until(ip_key, now_ms)) / 1000
        if until > now:
            raise _refusal(until - now)

    # -- counting -----------------------------------------------------------------------------
    async def admit(
        self,
        user: str,
        client_ip: str,
        run: StoreRun | None = None,
        known: Callable[[], bool] | None = None,
    ) -> Attempt:
        """Count an attempt before its password is checked.

        An attempt whose count would pass ``maxFailures`` is not checked. When the key is
        locked (``maxFailures`` failures) that is a 429 at once. Otherwise the count is full
        of checks still in progress, whose passwords may well be right (a client sending
        several requests at once, many users behind one address): the attempt waits for them,
        up to :data:`WAIT_S`, and is counted as soon as one of them ends without a failure;
        the failure that fills the count locks the key, and the waiting attempts get their
        429. Past :data:`WAIT_S`, a 429 with ``Retry-After: 1``. ``known`` tells whether the
        attempt's credentials have meanwhile been found right (by a request sent with it):
        it then goes on as :meth:`known` admits it.

        Raises:
            HTTPError: 429 with ``Retry-After`` (see above); 503 when a strict throttle's
                store does not answer.
        """
        user_key, ip_key = self.keys(user, client_ip)
        limit = self.max_failures
        waited, step = 0.0, _FIRST_STEP_S
        while True:
            self._check(user_key, ip_key)  # locked: 429
            attempt = await self._count(user_key, ip_key, run)
            if attempt.counts[0] <= limit and attempt.counts[1] <= limit:
                return attempt
            # full: this attempt is not checked, so it is not a failure either
            await self._take_back(attempt, run, quiet=True)
            while True:
                if waited >= WAIT_S:
                    raise _refusal(1.0)
                await asyncio.sleep(step)
                waited += step
                step = min(2 * step, _LAST_STEP_S)
                self._check(user_key, ip_key)
                if known is not None and known():
                    return self.uncounted(user, client_ip)
                if not attempt.in_store:
                    break  # counting again costs nothing
                # in the store, a read tells whether counting again may succeed (a write)
                if self._where is _Where.STORE:
                    (n_user, _), (n_ip, _) = await self._strict(
                        run, _both, self.store.failures, user_key, ip_key, self.window_s
                    )
                else:
                    try:
                        (n_user, _), (n_ip, _) = await self._lenient(
                            _both, self.store.failures, user_key, ip_key, self.window_s
                        )
                    except (StoreError, TimeoutError):
                        break  # counting again counts on the board
                if n_user < limit and n_ip < limit:
                    break

    def known(self, user: str, client_ip: str) -> None:
        """Admit, without counting it before its check, an attempt whose credentials were
        right when last checked (a Basic client repeats its header on every request): it is
        no guess, and its client may send many at once. Should it be wrong now (the password
        changed), :meth:`failed` counts it then (with :meth:`uncounted`'s attempt). While no
        lock-out is in force anywhere (the common case) the user's and address's keys are not
        even made.

        Raises:
            HTTPError: 429 while the user or the address is locked out (the right password
                too, as for any attempt).
        """
        board = self.board
        if not self.locked and (board is None or board.latest() <= time.time_ns() // 1_000_000):
            return
        self._check(*self.keys(user, client_ip))

    def uncounted(self, user: str, client_ip: str) -> Attempt:
        """An attempt of ``user`` from ``client_ip`` that is not counted (yet)."""
        user_key, ip_key = self.keys(user, client_ip)
        return Attempt(user_key, ip_key, (0, 0), (0.0, 0.0), counted=False)

    async def _count(
        self, user_key: str, ip_key: str, run: StoreRun | None, *, failure: bool = False
    ) -> Attempt:
        """One attempt counted under both keys, where this port counts (see the module's
        docstring): before its check, only while both keys are below ``maxFailures``
        (``hit_failures``); a ``failure`` (a password checked and wrong, :meth:`failed`)
        always, as it happened (a count the store refused, taken for counted, locked and
        announced what the store did not hold: another host announced it again)."""
        where, window, keys = self._where, self.window_s, (user_key, ip_key)
        # a count past its caller's deadline is not taken (_counted_by)
        call: Callable[[float], Sequence[tuple[int, float]]]
        if failure:
            call = functools.partial(_both, self.store.hit_failure, user_key, ip_key, window)
        else:
            call = functools.partial(self.store.hit_failures, keys, window, self.max_failures)
        if where is _Where.STORE:
            budget = run.budget() if run is not None else _DEADLINE_S
            found = await self._strict(run, _counted_by, call, budget)
            return self._in_store(user_key, ip_key, found, failure)
        if where is _Where.BOARD_THEN_STORE and time.monotonic() >= self._away_until:
            # every host's count, before the check (SPEC 7.1, 8), when the store answers
            try:
                found = await self._lenient(_counted_by, call, _DEADLINE_S)
                return self._in_store(user_key, ip_key, found, failure)
            except (StoreError, TimeoutError) as exc:
                self._away_until = time.monotonic() + _AWAY_S
                log.auth_log.warning(
                    "[%s] attempts counted on this host for %g s: the state store is "
                    "unavailable (%s)",
                    self.port_name,
                    _AWAY_S,
                    str(exc) or f"no answer within {_DEADLINE_S:g} s",
                )
        if where is _Where.INLINE:
            (n_user, w_user), (n_ip, w_ip) = _both(self.store.hit_failure, user_key, ip_key, window)
        else:
            board = self.board
            assert board is not None
            n_user, w_user = board.hit_failure(self.region, user_key, window)
            n_ip, w_ip = board.hit_failure(self.region, ip_key, window)
        return Attempt(user_key, ip_key, (n_user, n_ip), (w_user, w_ip))

    def _in_store(
        self, user_key: str, ip_key: str, found: Sequence[tuple[int, float]], failure: bool
    ) -> Attempt:
        """The attempt the store's :meth:`~fwrest.store.base.FailureStore.hit_failures`
        answered: counted under both keys, or (a key at ``maxFailures``) under neither; a
        ``failure`` is counted whatever the counts."""
        (n_user, w_user), (n_ip, w_ip) = found
        limit = self.max_failures
        counted = failure or (n_user <= limit and n_ip <= limit)
        return Attempt(
            user_key, ip_key, (n_user, n_ip), (w_user, w_ip), counted=counted, in_store=True
        )

    async def succeeded(self, attempt: Attempt, run: StoreRun | None = None) -> None:
        """The password was right: its count is taken back (a strict throttle's store that
        does not answer raises the 503)."""
        await self._take_back(attempt, run, quiet=False)

    def abandon(self, attempt: Attempt) -> None:
        """The check did not finish (an exception, a full pool, a client gone): its count is
        taken back, without waiting (in the background where the count is in the store)."""
        if self._settled_here(attempt):
            return
        self._in_background(
            _both, self.store.release_failure, attempt.user, attempt.address, self.window_s
        )

    async def failed(self, attempt: Attempt, run: StoreRun | None = None) -> None:
        """The password was wrong: the attempt stays counted (one admitted by :meth:`known`
        is counted now); the failure that takes a key's count to ``maxFailures`` locks it
        until its window ends and logs the warning."""
        attempt.settled = True
        if not attempt.counted:
            now_counted = await self._count(attempt.user, attempt.address, run, failure=True)
            attempt.counts, attempt.remaining = now_counted.counts, now_counted.remaining
            attempt.in_store = now_counted.in_store  # counted there now: not again below
        if self._where is _Where.BOARD_THEN_STORE and not attempt.in_store:
            # counted on the board: the store did not answer the count, and this worker
            # counts on the board while it is away (SPEC 7: Basic does not wait on it). The
            # host's count decides now; the failure is written to the store behind the
            # answer, so that every host's count has it, and the store's count locks what the
            # host's did not, when it answers
            for key in (attempt.user, attempt.address):  # before _settle's lock writes
                self._writing[key] = self._writing.get(key, 0) + 1
            locked = self._settle(attempt, attempt.counts, attempt.remaining, on_board=True)
            self._spawn(self._write_failure(attempt, locked))
            return
        self._settle(attempt, attempt.counts, attempt.remaining)

    async def _write_failure(self, attempt: Attempt, locked: set[str]) -> None:
        """Count in the store a failure counted on the board (:meth:`failed`); its count
        settles the keys the host's count did not lock (``locked``)."""
        try:
            call = functools.partial(
                _both, self.store.hit_failure, attempt.user, attempt.address, self.window_s
            )
            (n_user, w_user), (n_ip, w_ip) = await self._lenient(_counted_by, call, _DEADLINE_S)
        except (StoreError, TimeoutError) as exc:
            # still away: the board counts on (the next attempts do not ask it either)
            self._away_until = max(self._away_until, time.monotonic() + _AWAY_S)
            log.auth_log.warning(
                "[%s] failure not counted in the state store, unavailable: %s; this "
                "host's count decided",
                self.port_name,
                str(exc) or f"no answer within {_DEADLINE_S:g} s",
            )
            return
        finally:
            self._written_failure(attempt)
        self._settle(attempt, (n_user, n_ip), (w_user, w_ip), locked)

    def _written_failure(self, attempt: Attempt) -> None:
        """The store write of a failure counted on the board has ended, taken or not."""
        for key in (attempt.user, attempt.address):
            left = self._writing.get(key, 1) - 1
            if left > 0:
                self._writing[key] = left
            else:
                self._writing.pop(key, None)

    def _settle(
        self,
        attempt: Attempt,
        counts: tuple[int, int],
        remaining: tuple[float, float],
        skip: set[str] | frozenset[str] = frozenset(),
        *,
        on_board: bool = False,
    ) -> set[str]:
        """Lock the keys of a failure whose count (``counts``, with it) is at ``maxFailures``
        or more, but those of ``skip``; a key not locked yet (that this worker knows of: its
        host's board at once, another host's at the next read of the store's list) is
        announced: the warning and the audit event, once per lock-out. Not "the failure that
        crossed the threshold": counted before its check, exactly one does (``hit_failures``),
        but a known Basic header's failures are counted after theirs, many at once past it,
        and one counted past it could lock the key before the crossing one was settled, which
        then found it locked and announced nothing. ``on_board``: the counts are the host's
        board's, which the store did not take (it is away). Returns the keys locked."""
        limit = self.max_failures
        now = time.time()
        labels = []
        locked = []  # "user", "address": what this failure locked out
        done = set()
        for key, count, left, prefix, form in (
            (attempt.user, counts[0], remaining[0], self._user_key, self.wording.user),
            (attempt.address, counts[1], remaining[1], self._ip_key, self.wording.address),
        ):
            if count < limit or key in skip:
                continue
            if not self._in_force(key, now):
                labels.append(
                    (form.format(log.escape(shown_user(key[len(prefix) :]))), count, left)
                )
                locked.append("user" if key is attempt.user else "address")
            self._lock(key, now + left, count if on_board else 0)
            done.add(key)
        if labels:
            # once per lock-out: the failure whose count crosses maxFailures (counters are
            # atomic: one per window does so), one line for every key it locked
            log.auth_log.warning(
                "[%s] %d %s within %.0f s for %s: locked out for %.0f s, further attempts get 429",
                self.port_name,
                max(count for _, count, _ in labels),
                self.wording.attempts,
                self.window_s,
                " and ".join(label for label, _, _ in labels),
                max(left for _, _, left in labels),
                extra=log.OWN,  # written whatever the request sent (its 1001 pwd= values)
            )
            if self.audit is not None:
                self._record(attempt, locked, labels)
        return done

    def _in_force(self, key: str, now: float) -> bool:
        """Whether this worker knows a lock of ``key`` in force: a count at ``maxFailures``
        or more again in its window (a right password in progress at the crossing, taken back
        after it; a known header's failures settled after the first) locks what is locked
        already, and is not announced again."""
        if self.locked.get(key, 0.0) > now:
            return True
        board = self.board
        return board is not None and board.until(key, int(now * 1000)) > 0

    def _record(
        self, attempt: Attempt, locked: list[str], labels: list[tuple[str, int, float]]
    ) -> None:
        """The lock-out's audit event: the user name the attempts gave (case-folded, as
        counted) is its actor, the address (an IPv6 one per /64) its client."""
        assert self.audit is not None
        user = attempt.user[len(self._user_key) :]
        address = attempt.address[len(self._ip_key) :]
        details = {
            "locked": locked,
            "user": user,
            "address": address,
            "failures": max(count for _, count, _ in labels),
            "seconds": round(max(left for _, _, left in labels)),
        }
        self.audit.record(AuditEvent("lockout", user, address, self.port_name, details))

    def _lock(self, key: str, until: float, failures: int = 0) -> None:
        """Lock ``key``: in this worker at once, on the host's board before the refusal is
        answered (the next attempt on any worker of the host finds it), and in the store's
        list for other hosts (in the background: nothing on a host waits for it). ``failures``:
        the host's count that made it, on its board (the store away), see
        :meth:`_write_lock`."""
        self.locked[key] = until
        if self.board is not None:
            self.board.publish(self.region, key, int(until * 1000))
        if self.store.in_process:
            self._client.at_once(self.store.add_lock, key, until)
            self._lock_written(key, until)
        else:
            # kept until the store has it: a store away now gets it when it answers again
            before, counted = self._unwritten.get(key, (0.0, 0))
            self._unwritten[key] = (max(until, before), max(counted, failures))
            self._spawn(self._write_lock(key, until, failures))

    async def _write_lock(self, key: str, until: float, failures: int) -> None:
        """Write a lock of :meth:`_lock` to the store at once. A lock made on the board
        (``failures``, the host's count) is written with it, which the store's count is
        raised to, once this worker's writes of the key's failures have ended, the locking
        one's included: the store's count then holds those it took, and is raised by those it
        did not (a store back during the writes took the later ones only, and listed 6 for 10;
        raised before a write that lands after it, it would hold that one twice). When the
        store does not take it, the lock is written at a refresh with its failures
        (:meth:`_write_unwritten`; else ``fwrest lockouts list`` shows it with 0 failures)."""
        while failures and self._writing.get(key):
            await asyncio.sleep(_WRITES_POLL_S)  # each write ends by twice its deadline
        try:
            await self._lenient(self.store.add_lock, key, until, failures, self.window_s)
        except (StoreError, TimeoutError):
            return  # kept in _unwritten, with its failures
        self._lock_written(key, until)

    def _lock_written(self, key: str, until: float) -> None:
        """The store has this worker's lock of ``key``: the next list asked for judges it."""
        self._written[key] = (until, time.monotonic())
        if self._unwritten.get(key, (until, 0))[0] <= until:
            self._unwritten.pop(key, None)

    # -- taking a count back ----------------------------------------------------------------------
    def _settled_here(self, attempt: Attempt) -> bool:
        """Settle ``attempt``; False when its count, in the store, is still to be released."""
        if attempt.settled or not attempt.counted:
            attempt.settled = True
            return True
        if not attempt.in_store:
            self._release_here(attempt)
            return True
        attempt.settled = True
        return False

    async def _take_back(self, attempt: Attempt, run: StoreRun | None, *, quiet: bool) -> None:
        if self._settled_here(attempt):
            return
        if self._where is not _Where.STORE:
            # a Basic port's count in the store: taken back, never failing the request (a
            # store that does not answer keeps this window's count one higher)
            with contextlib.suppress(StoreError, TimeoutError):
                await self._lenient(
                    _both, self.store.release_failure, attempt.user, attempt.address, self.window_s
                )
            return
        try:
            await self._strict(
                run,
                _both,
                self.store.release_failure,
                attempt.user,
                attempt.address,
                self.window_s,
            )
        except HTTPError:
            if not quiet:
                raise
            # the store is away: this window's count stays one higher (the 429 stands)

    def _release_here(self, attempt: Attempt) -> None:
        attempt.settled = True
        if self._where is _Where.INLINE:
            _both(self.store.release_failure, attempt.user, attempt.address, self.window_s)
            return
        board = self.board
        assert board is not None
        board.release_failure(self.region, attempt.user, self.window_s)
        board.release_failure(self.region, attempt.address, self.window_s)

    # -- store calls --------------------------------------------------------------------------
    async def _strict(self, run: StoreRun | None, fn: Callable[..., T], *args: Any) -> T:
        """A store call that fails closed: the caller's (its deadline, its 503), else 503
        after ``_DEADLINE_S``."""
        if run is not None:
            return await run(fn, *args)
        try:
            return await self._lenient(fn, *args)
        except (StoreError, TimeoutError) as exc:
            log.auth_log.error(
                "[%s] state store unavailable: %s; answered 503",
                self.port_name,
                str(exc) or f"no answer within {_DEADLINE_S:g} s",
            )
            raise store_unavailable() from None

    async def _lenient(self, fn: Callable[..., T], *args: Any) -> T:
        """A store call off the loop under ``_DEADLINE_S`` (StoreError, TimeoutError)."""
        return await self._client.call(fn, *args, deadline=_DEADLINE_S)

    def _in_background(self, fn: Callable[..., Any], *args: Any) -> None:
        """A store write nothing waits for (a failure of it only costs exactness)."""

        async def write() -> None:
            with contextlib.suppress(StoreError, TimeoutError):
                await self._lenient(fn, *args)

        self._spawn(write())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background (cancelled by :meth:`stop`)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _refusal(wait: float) -> TooManyRequests:
    """The 429 of both schemes: ``Retry-After`` in whole seconds, at least 1."""
    return TooManyRequests(wait, "too many failed attempts")
