"""Fixtures of the authorization tests, and ``check``: ``fwrest check`` for real or in process."""

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
from tests.redis_support import RedisServer, started


def fwrest_cli(*args: str, real: bool, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``fwrest ARGS``: exit code and output. ``real``: the command itself in ``cwd``; else
    ``fwrest.cli.main`` in this process, output captured (a config's modules are imported here: give
    them session-unique names). Each kind of command a test file runs goes once through the real
    command, unless the command is not its subject."""
    if real:
        return run_cli(*args, cwd=cwd)
    out, err = io.StringIO(), io.StringIO()
    path = list(sys.path)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(args))
    finally:
        sys.path[:] = path  # the loader puts the config's folder on it
    return subprocess.CompletedProcess(["fwrest", *args], code, out.getvalue(), err.getvalue())


def in_process(*args: str) -> tuple[int, str, str]:
    """``fwrest ARGS`` in this process (:func:`fwrest_cli`): exit code, out, err."""
    done = fwrest_cli(*args, real=False)
    return done.returncode, done.stdout, done.stderr


def check(config: Path, *, real: bool) -> subprocess.CompletedProcess[str]:
    """``fwrest check CONFIG`` (:func:`fwrest_cli`), run in the config's folder."""
    return fwrest_cli("check", str(config), real=real, cwd=config.parent)


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
    with started(RedisServer(tmp_path)) as server:
        redis_store = RedisStore(server.url)
        yield redis_store
        redis_store.close()
