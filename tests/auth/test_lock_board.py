"""The brute-force throttle's lock board (SPEC 4.2, issue 9): Basic lock-outs every worker of a host
sees at once, no store round trip per request (over ``fwrest serve``:
tests/faults/test_brute_force.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fwrest.auth.throttle import LockBoard, Throttle
from fwrest.errors import HTTPError
from fwrest.store.base import StoreError
from fwrest.store.memory import MemoryStore
from fwrest.store.sqlite import SqliteStore
from tests.conftest import wait_for


def now_ms() -> int:
    return int(time.time() * 1000)


@contextlib.contextmanager
def one_throttle(tmp_path: Path) -> Iterator[tuple[SqliteStore, Throttle]]:
    """A Basic port's throttle (maxFailures 3) on a sqlite store and a lock board of its own."""
    store = SqliteStore(tmp_path / "state.db")
    throttle = Throttle(store, 3, "BASIC", board=LockBoard(2), region=0)
    try:
        yield store, throttle
    finally:
        throttle.stop()
        store.close()


def announced(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lock-outs the throttle announced (its warnings)."""
    return [r.getMessage() for r in caplog.records if "locked out for" in r.getMessage()]


def test_a_lock_written_by_a_forked_worker_is_seen_by_its_sibling() -> None:
    board = LockBoard(2)
    assert board.latest() <= now_ms()
    until = now_ms() + 60_000
    pid = os.fork()
    if pid == 0:  # the other worker
        code = 1
        try:
            board.publish(1, "user:victim", until)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # the latest end of the lock written, read from the region headers only (not the tags)
    assert board.latest() == until
    assert board.until("user:victim", now_ms()) == until
    assert board.until("user:other", now_ms()) == 0
    assert board.until("ip:127.0.0.1", now_ms()) == 0


def test_expired_locks_leave_the_board_quiet() -> None:
    board = LockBoard(2)
    board.publish(0, "user:a", now_ms() - 1)
    assert board.latest() <= now_ms()
    assert board.until("user:a", now_ms()) == 0


def test_a_full_probe_window_evicts_the_lock_that_ends_first_never_mixes_keys() -> None:
    board = LockBoard(1, slots=1)  # every key probes the same single entry
    soon, later = now_ms() + 10_000, now_ms() + 20_000
    board.publish(0, "user:a", later)
    board.publish(0, "user:b", soon)
    assert board.until("user:a", now_ms()) == 0  # evicted (the store's list still has it)
    assert board.until("user:b", now_ms()) == soon  # never a's end under b's name
    board.publish(0, "user:b", later)  # the same key again: extended in place
    assert board.until("user:b", now_ms()) == later


@pytest.mark.anyio
async def test_failures_of_a_memory_store_are_counted_across_the_workers() -> None:
    """The memory store is one process's: two workers alternating lock at ``maxFailures`` in all."""
    board = LockBoard(2)
    # each worker has its own MemoryStore, as each forked worker has
    first = Throttle(MemoryStore(), 3, "BASIC", board=board, region=0)
    second = Throttle(MemoryStore(), 3, "BASIC", board=board, region=1)
    await first.failed(await first.admit("u1", "127.0.0.7"))
    await second.failed(await second.admit("u2", "127.0.0.7"))
    first.check("u3", "127.0.0.7")  # two failures so far: served
    await first.failed(await first.admit("u3", "127.0.0.7"))
    with pytest.raises(HTTPError) as info:
        second.check("u4", "127.0.0.7")
    assert info.value.status == 429
    second.check("u4", "127.0.0.8")  # another address, another user: served


def test_board_failure_windows_restart_and_count_per_key() -> None:
    board = LockBoard(2, failure_slots=4)  # few entries: every key probes all of them
    assert board.hit_failure(0, "ip:a", 300)[0] == 1
    assert board.hit_failure(1, "ip:a", 300)[0] == 2
    count, remaining = board.hit_failure(0, "ip:b", 300)
    assert count == 1 and 299 <= remaining <= 300
    assert board.hit_failure(1, "ip:a", 300)[0] == 3
    assert board.hit_failure(0, "ip:c", 0.001)[0] == 1
    time.sleep(0.01)
    assert board.hit_failure(0, "ip:c", 0.001)[0] == 1  # its window had passed: a new one


class SlowLockWrites(SqliteStore):
    """A store under load: ``add_lock`` waits until ``arrive`` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.arrive = threading.Event()

    def add_lock(self, key: str, until: float, *counted: Any) -> None:
        self.arrive.wait(10)
        super().add_lock(key, until, *counted)


@pytest.mark.anyio
async def test_a_lock_whose_store_write_is_late_stays_on_the_board_with_its_count(
    tmp_path: Path,
) -> None:
    """Refreshed every 0.5 s: this worker's lock, not yet stored, stays on the board."""
    store = SlowLockWrites(tmp_path / "state.db")
    board = LockBoard(2)
    throttle = Throttle(store, 3, "BASIC", board=board, region=0)
    user_key, ip_key = throttle.keys("bob", "127.0.0.5")
    throttle.start()
    try:
        await asyncio.sleep(0.1)  # the first refresh: the store lists no lock
        for _ in range(3):
            await throttle.failed(await throttle.admit("bob", "127.0.0.5"))
        assert board.until(user_key, now_ms()) > 0
        await asyncio.sleep(1.2)  # two refreshes while the lock's write is on its way
        assert board.until(user_key, now_ms()) > 0
        # the failures counted in the store before each check (every host's count)
        assert store.failures(user_key, 300)[0] == 3
        with pytest.raises(HTTPError) as info:
            throttle.check("bob", "127.0.0.9")
        assert info.value.status == 429
    finally:
        store.arrive.set()
        throttle.stop()
    # the write arrives at last (its thread finishes on its own)
    wait_for(lambda: store.locks().keys() == {user_key, ip_key}, 10, "the locks in the store")


class RefusesLockWrites(SqliteStore):
    """Counts and lists, takes no lock write (Redis under ``noeviction``, a read-only replica)."""

    def add_lock(self, key: str, until: float, *counted: Any) -> None:
        raise StoreError("this store takes no write")


@pytest.mark.anyio
async def test_a_lock_the_store_will_not_take_leaves_the_list_read(tmp_path: Path) -> None:
    """Retried each refresh, the list still read: another host's lock-out holds (it did not)."""
    store = RefusesLockWrites(tmp_path / "state.db")
    other_host = SqliteStore(tmp_path / "state.db")
    throttle = Throttle(store, 3, "BASIC", board=LockBoard(2), region=0)
    throttle.start()
    try:
        for _ in range(3):
            await throttle.failed(await throttle.admit("bob", "127.0.0.5"))
        with pytest.raises(HTTPError):
            throttle.check("bob", "127.0.0.9")  # on this host's board
        await asyncio.sleep(0.6)  # a refresh whose write of bob's lock failed
        carl = throttle.keys("carl", "127.0.0.7")[0]
        other_host.add_lock(carl, time.time() + 60)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                throttle.check("carl", "127.0.0.8")
            except HTTPError as exc:
                assert exc.status == 429
                return
            await asyncio.sleep(0.05)
        raise AssertionError("another host's lock-out unseen while a write is refused")
    finally:
        throttle.stop()
        other_host.close()


class CountsNoAttempt(SqliteStore):
    """Away for the count before a check, back for the writes behind the answers (a blip)."""

    def hit_failures(self, *args: Any) -> list[tuple[int, float]]:
        raise StoreError("away")


@pytest.mark.anyio
async def test_a_lock_out_counted_on_the_board_is_stored_with_its_failures_once(
    tmp_path: Path,
) -> None:
    """`fwrest lockouts list` reads the store's count: the host's, the locking failure once."""
    store = CountsNoAttempt(tmp_path / "state.db")
    throttle = Throttle(store, 3, "BASIC", board=LockBoard(2), region=0)
    keys = throttle.keys("bob", "127.0.0.5")
    try:
        for _ in range(3):
            await throttle.failed(await throttle.admit("bob", "127.0.0.5"))
        for _ in range(100):
            if store.locks().keys() == set(keys):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # a write still behind them
        assert [store.failures(key, 300)[0] for key in keys] == [3, 3]
    finally:
        throttle.stop()


@pytest.mark.anyio
async def test_a_known_header_refused_now_is_counted_once_in_the_store(tmp_path: Path) -> None:
    """A Basic header ``OnAuth`` accepted lately is admitted uncounted; refused now (the password
    changed), its failure is counted then: once, in the store (it was counted there twice)."""
    with one_throttle(tmp_path) as (store, throttle):
        user_key, ip_key = throttle.keys("bob", "127.0.0.5")
        throttle.known("bob", "127.0.0.5")
        await throttle.failed(throttle.uncounted("bob", "127.0.0.5"))
        assert store.failures(user_key, 300)[0] == 1
        assert store.failures(ip_key, 300)[0] == 1


@pytest.mark.anyio
async def test_a_count_that_crosses_again_behind_a_right_password_is_not_announced_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A right password in progress when the failure crossing ``maxFailures`` was counted, taken
    back after it: another worker's attempt counted meanwhile reaches ``maxFailures`` too. Its
    failure locks what is locked already: one warning for the lock-out, not two."""
    caplog.set_level("WARNING", logger="fwrest.auth")
    store = SqliteStore(tmp_path / "state.db")
    board = LockBoard(2)
    first = Throttle(store, 3, "BASIC", board=board, region=0)
    second = Throttle(store, 3, "BASIC", board=board, region=1)
    try:
        right = await first.admit("bob", "127.0.0.5")  # its check in progress
        await first.failed(await first.admit("bob", "127.0.0.5"))
        crossing = await first.admit("bob", "127.0.0.5")
        assert crossing.counts == (3, 3)
        await first.succeeded(right)
        again = await second.admit("bob", "127.0.0.5")  # before the crossing's failure
        assert again.counts == (3, 3)
        await first.failed(crossing)
        await second.failed(again)
    finally:
        first.stop()
        second.stop()
        store.close()
    assert len(announced(caplog)) == 1, announced(caplog)


@pytest.mark.anyio
async def test_a_known_headers_failure_is_counted_in_the_store_even_when_a_count_is_full(
    tmp_path: Path,
) -> None:
    """A known header's failure, counted when its check fails, is a failure whatever the counts
    hold: the store counts it (``hit_failures`` counted nothing with a key full of checks in
    progress, and the throttle locked and announced a count the store did not hold)."""
    with one_throttle(tmp_path) as (store, throttle):
        user_key, _ = throttle.keys("ada", "127.0.0.6")
        for _ in range(2):
            await throttle.failed(await throttle.admit("ada", "127.0.0.6"))
        for _ in range(3):  # three checks from another address, in progress
            await throttle.admit("eve", "127.0.0.7")
        _, busy_key = throttle.keys("eve", "127.0.0.7")
        throttle.known("ada", "127.0.0.7")
        await throttle.failed(throttle.uncounted("ada", "127.0.0.7"))
        assert store.failures(user_key, 300)[0] == 3
        assert store.failures(busy_key, 300)[0] == 4


@pytest.mark.anyio
async def test_a_failure_settled_past_the_threshold_before_the_crossing_one_is_announced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A known Basic header's failures are counted after their checks, many at once: the one
    counted 4th (maxFailures 3) may be settled before the 3rd. It locks and announces; the
    3rd finds the lock in force and announces nothing. (Announced by the crossing failure
    only, a review saw lock-outs never logged nor audited.)"""
    caplog.set_level("WARNING", logger="fwrest.auth")
    with one_throttle(tmp_path) as (_, throttle):
        late, crossing = (
            throttle.uncounted("ada", "127.0.0.8"),
            throttle.uncounted("ada", "127.0.0.8"),
        )
        throttle._settle(late, (4, 4), (300.0, 300.0))  # the race, made in order
        throttle._settle(crossing, (3, 3), (300.0, 300.0))
    warnings = announced(caplog)
    assert len(warnings) == 1 and "ada" in warnings[0], warnings
