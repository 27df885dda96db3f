"""Fixtures of the authorization tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fwrest.store import StateStore
from fwrest.store.memory import MemoryStore
from fwrest.store.redis import RedisStore
from fwrest.store.sqlite import SqliteStore
from tests.redis_support import RedisServer


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    """Each state store in turn: in memory, a sqlite file, a real ``redis-server``."""
    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param == "sqlite":
        sqlite_store = SqliteStore(tmp_path / "state.sqlite3")
        yield sqlite_store
        sqlite_store.close()
        return
    server = RedisServer(tmp_path).start()
    redis_store = RedisStore(server.url)
    try:
        yield redis_store
    finally:
        redis_store.close()
        server.stop()
