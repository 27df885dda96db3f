"""Fixtures of the fault tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_support import RedisServer, started


@pytest.fixture
def redis_store(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own that keeps its data across a stop and a start (the
    outage tests stop it and start it again)."""
    folder = tmp_path / "redis"
    folder.mkdir()
    with started(RedisServer(folder, persist=True)) as server:
        yield server


@pytest.fixture
def frozen_store(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own that the test may freeze (SIGSTOP): thawed at the end
    whatever happened, so that its stop does not hang."""
    folder = tmp_path / "redis"
    folder.mkdir()
    with started(RedisServer(folder)) as server:
        try:
            yield server
        finally:
            server.thaw()
