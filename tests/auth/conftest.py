"""Fixtures of the authorization tests, and ``check``: ``fwrest check`` run for real or in
this process."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fwrest import cli
from fwrest.store import StateStore
from fwrest.store.memory import MemoryStore
from fwrest.store.redis import RedisStore
from fwrest.store.sqlite import SqliteStore
from tests.conftest import run_cli
from tests.redis_support import RedisServer


def check(config: Path, *, real: bool) -> subprocess.CompletedProcess[str]:
    """``fwrest check CONFIG``, run in the config's folder: its exit code and output.

    ``real``: the command itself, a process of its own. Otherwise the same ``fwrest.cli.main``
    in this process, its printing captured: the same code, exit code and text, without
    starting an interpreter (the config's modules are then imported into the test process:
    give them names unique in the test session). Each kind of check a test file makes goes
    once through the real command.
    """
    if real:
        return run_cli("check", str(config), cwd=config.parent)
    out, err = io.StringIO(), io.StringIO()
    path = list(sys.path)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["check", str(config)])
    finally:
        sys.path[:] = path  # the loader puts the config's folder on it
    return subprocess.CompletedProcess(
        ["fwrest", "check", str(config)], code, out.getvalue(), err.getvalue()
    )


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
