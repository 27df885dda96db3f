"""Failure counts and lock-outs of ended windows are pruned in memory and sqlite (Redis keys have
TTLs): else a spray of names or addresses failing once grows the store for good."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

from fwrest.store.memory import MemoryStore
from fwrest.store.sqlite import SqliteStore
from tests.store.support import in_one_window, unstarved

WINDOW_S = 0.3


def test_memory_store_forgets_ended_failure_windows() -> None:
    unstarved(lambda _n: _memory_store_forgets_ended_failure_windows())


def _memory_store_forgets_ended_failure_windows() -> None:
    store = MemoryStore()
    for i in range(3000):
        assert store.hit_failure(f"x|user:old{i}", WINDOW_S)[0] == 1
    time.sleep(WINDOW_S + 0.05)
    with in_one_window(WINDOW_S):  # the new windows live until the end
        for i in range(3000):
            store.hit_failure(f"x|user:new{i}", WINDOW_S)
        held = store._failures
        assert len(held) <= 3000 + 1024, len(held)  # without sweeping: 6000
        assert not any(key.startswith("x|user:old") for key in held)
        # the live windows keep counting
        assert store.hit_failure("x|user:new7", WINDOW_S)[0] == 2
        assert store.failures("x|user:new7", WINDOW_S)[0] == 2


def test_memory_store_forgets_ended_locks_when_adding() -> None:
    store = MemoryStore()
    now = time.time()
    for i in range(1500):
        store.add_lock(f"x|ip:10.0.{i // 256}.{i % 256}", now - 1)  # already ended
    store.add_lock("x|ip:192.0.2.1", now + 60)
    assert len(store._locks) < 1500  # swept as they were added: 1501 without
    assert store.locks() == {"x|ip:192.0.2.1": now + 60}


def test_sqlite_store_forgets_ended_failure_windows_and_locks(tmp_path: Path) -> None:
    unstarved(lambda n: _sqlite_store_forgets_ended_failure_windows_and_locks(tmp_path, n))


def _sqlite_store_forgets_ended_failure_windows_and_locks(tmp_path: Path, n: int) -> None:
    path = tmp_path / f"state-{n}.sqlite3"
    with contextlib.closing(SqliteStore(path)) as store:
        for i in range(200):
            store.hit_failure(f"x|user:old{i}", WINDOW_S)
        store.add_lock("x|user:old1", time.time() + WINDOW_S)
        time.sleep(WINDOW_S + 0.05)
        with in_one_window(WINDOW_S):
            assert store.hit_failure("x|user:new", WINDOW_S)[0] == 1
            assert store.hit_failure("x|user:new", WINDOW_S)[0] == 2
        store.add_lock("x|user:new", time.time() + 60)
        with sqlite3.connect(path) as db:
            failures = db.execute("SELECT key FROM failures").fetchall()
            locks = db.execute("SELECT key FROM locks").fetchall()
        assert failures == [("x|user:new",)]
        assert locks == [("x|user:new",)]
