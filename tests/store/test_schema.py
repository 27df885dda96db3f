"""Store schema versions (SPEC 17.2): ``fwrest store migrate CONFIG [--check]`` on the previous
release's sqlite file (v0.1.0 from its tag, tests/upgrade_support.py), on Redis and memory, and a
newer release's store refused."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import fwrest
from fwrest.config.loader import load_config
from fwrest.store.schema import SCHEMA, marker_of
from fwrest.testing import Client
from tests.conftest import ServerProcess, free_config, free_port, module_config, run_cli, run_forked
from tests.redis_support import RedisServer, started
from tests.upgrade_support import PREVIOUS_VERSION, previous_python

NEWER = {"schema": 9, "compatible": 9, "release": "9.1.0"}

# the previous release writes its store: a refresh token and a lock-out (its own code)
WRITE_PREVIOUS = """
import sys, time
from pathlib import Path
from fwrest.store.sqlite import SqliteStore
from fwrest.store import RefreshRecord
store = SqliteStore(Path(sys.argv[1]))
store.add_refresh(RefreshRecord("h-old", "fam-old", "web", "ada", time.time() + 3600))
store.add_refresh(RefreshRecord("h-old-2", "fam-old", "web", "ada", time.time() + 3600))
store.add_lock("OAUTH|user:ada", time.time() + 600)
store.close()
"""
SPEND_PREVIOUS = """
import sys
from pathlib import Path
from fwrest.store.sqlite import SqliteStore
store = SqliteStore(Path(sys.argv[1]))
print(store.spend_refresh(sys.argv[2], sys.argv[3])[0])
"""


def forked(*args: str) -> subprocess.CompletedProcess[str]:
    """``fwrest ARGS`` forked (``run_forked``) as :func:`run_cli`; the first test runs them for
    real."""
    return run_forked(*args, cwd=Path.cwd())


def store_config(folder: Path, store: str) -> Path:
    """A service on ``store``, its app module named uniquely: :func:`start_once` imports it."""
    module = f"tstore_schema_{uuid.uuid4().hex[:12]}"
    return module_config(folder, module, extra={"HTTPSERVER": {"StateStore": store}})


def start_once(config: Path) -> None:
    """A start and stop in process: what a start does to its store (its refusal: serve's tests)."""
    with Client(config):
        pass


@pytest.fixture
def sqlite_config(tmp_path: Path) -> Path:
    return store_config(tmp_path, "sqlite")


def store_file(config: Path) -> Path:
    """The service's sqlite file (not made), in its folder (made)."""
    path = load_config(str(config)).data_path / "state.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stored_marker(path: Path) -> dict[str, object] | None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
            return None
        row = db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
    return None if row is None else json.loads(row[0])


def mark(path: Path, marker: dict[str, object] | bytes) -> None:
    raw = marker if isinstance(marker, bytes) else json.dumps(marker).encode()
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # committed, then closed
        db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)")
        db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (raw,))


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".*.bak"))


def test_a_file_of_the_previous_release_is_migrated_once_with_a_copy_first(
    sqlite_config: Path,
) -> None:
    path = store_file(sqlite_config)
    previous_python(WRITE_PREVIOUS, str(path))
    assert stored_marker(path) is None  # v0.1.0 writes no marker: schema 1
    before = digest(path)

    looked = run_cli("check", str(sqlite_config))  # a note, no error: a start migrates it
    assert looked.returncode == 0, looked
    assert "the sqlite store is schema 1 (fwrest 0.1.0): `fwrest store migrate" in looked.stdout
    check = run_cli("store", "migrate", str(sqlite_config), "--check")
    print(check.stdout, check.stderr)
    assert check.returncode == 1, check
    assert "schema 1" in check.stdout and f"{SCHEMA}" in check.stdout
    assert digest(path) == before and backups(path) == []  # --check changes nothing

    done = run_cli("store", "migrate", str(sqlite_config))
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done
    [copy] = backups(path)
    assert str(copy) in done.stdout
    assert stored_marker(copy) is None  # the file as it was: the previous release's
    with contextlib.closing(sqlite3.connect(copy)) as db:
        assert db.execute("SELECT count(*) FROM refresh").fetchone() == (2,)
    marker = stored_marker(path)
    assert marker == {"schema": SCHEMA, "compatible": 1, "release": fwrest.__version__}

    again = run_cli("store", "migrate", str(sqlite_config))
    assert again.returncode == 0 and "current" in again.stdout, again
    assert backups(path) == [copy]  # idempotent: nothing to do, no second copy
    assert run_cli("store", "migrate", str(sqlite_config), "--check").returncode == 0
    looked = run_cli("check", str(sqlite_config))
    assert looked.returncode == 0 and "store migrate" not in looked.stdout, looked

    # the previous release still reads and writes the migrated file (SPEC 17.2: additive)
    assert previous_python(SPEND_PREVIOUS, str(path), "h-old", "claim-1").strip() == "ok"
    assert previous_python(SPEND_PREVIOUS, str(path), "h-old", "claim-2").strip() == "spent"
    from fwrest.store.sqlite import SqliteStore

    with contextlib.closing(SqliteStore(path)) as store:
        assert store.spend_refresh("h-old-2", "claim-now")[0] == "ok"
        assert store.spend_refresh("h-old", "claim-now")[0] == "spent"
        assert "OAUTH|user:ada" in store.locks()


def test_a_start_on_a_file_of_the_previous_release_takes_the_steps_itself(
    sqlite_config: Path,
) -> None:
    """A rolling upgrade on one sqlite file: this release takes the additive steps without a copy;
    the previous one keeps using the file, its new records found here."""
    path = store_file(sqlite_config)
    previous_python(WRITE_PREVIOUS, str(path))
    start_once(sqlite_config)
    assert stored_marker(path) == {"schema": SCHEMA, "compatible": 1, "release": fwrest.__version__}
    assert backups(path) == []
    assert previous_python(SPEND_PREVIOUS, str(path), "h-old", "claim-1").strip() == "ok"
    previous_python(WRITE_PREVIOUS.replace("h-old", "h-later"), str(path))
    from fwrest.store.sqlite import SqliteStore

    with contextlib.closing(SqliteStore(path)) as store:
        assert store.spend_refresh("h-later", "claim-now")[0] == "ok"
        assert store.spend_refresh("h-old", "claim-now")[0] == "spent"


def test_no_file_yet_and_the_memory_store_need_nothing(tmp_path: Path, sqlite_config: Path) -> None:
    for args in ((), ("--check",)):
        done = forked("store", "migrate", str(sqlite_config), *args)
        assert done.returncode == 0 and "no sqlite store" in done.stdout, done
    assert not store_file(sqlite_config).exists()  # not created by it
    (tmp_path / "memory").mkdir()
    memory = free_config(tmp_path / "memory")  # StateStore=memory
    done = forked("store", "migrate", str(memory), "--check")
    assert done.returncode == 0 and "nothing to migrate" in done.stdout, done


def refused(text: str) -> None:
    """The refusal names the store's release and schema and this release's."""
    assert "9.1.0" in text and "schema 9" in text, text
    assert f"fwrest {fwrest.__version__}" in text and f"schema {SCHEMA}" in text, text


# what the refusal tells to point StateStore at: the copy `fwrest store migrate` made of a sqlite
# file; a Redis has none (the command copies sqlite files only)
SQLITE_OLDER = f"a store of schema {SCHEMA} or older, e.g. the copy fwrest store migrate made"
REDIS_OLDER = f"a Redis of schema {SCHEMA} or older, e.g. one restored from a Redis backup"


def refused_by_check_and_start(config: Path, older: str = SQLITE_OLDER) -> None:
    """``fwrest check`` and ``fwrest serve`` exit 2 with :func:`refused`'s words: one error
    naming the file, the section and key, its problem ended before its fix, which names
    ``older``."""
    error = f"fwrest: configuration error: {config.resolve()}: [HTTPSERVER] StateStore: "
    fix = f"cannot read. Fix: run fwrest 9.1.0 or newer on it, or point StateStore at {older}"
    check = forked("check", str(config))
    assert check.returncode == 2, check
    refused(check.stderr)
    proc = ServerProcess(config)
    try:
        assert proc.proc.wait(30) == 2
        log = proc.log()
        refused(log)
    finally:
        proc.stop()
    for text in (check.stderr, log):
        assert error in text and fix in text, text
        if older == REDIS_OLDER:
            assert "store migrate" not in text, text


def test_a_file_of_a_newer_schema_is_refused_naming_both_versions(sqlite_config: Path) -> None:
    path = store_file(sqlite_config)
    mark(path, NEWER)
    before = digest(path)
    for args in (("--check",), ()):
        done = forked("store", "migrate", str(sqlite_config), *args)
        print(done.stdout, done.stderr)
        assert done.returncode == 2, done
        refused(done.stderr)
    assert digest(path) == before and backups(path) == []
    refused_by_check_and_start(sqlite_config)
    # the commands that open the file: an error as check's (exit 2), not a store out of reach
    config = str(sqlite_config)
    for args in (("lockouts", config, "list"), ("tokens", "revoke", config, "--user", "ada")):
        done = forked(*args)
        assert done.returncode == 2, (args, done)
        refused(done.stderr)
    # the start wrote nothing to it: no table of this release's, the marker as it was
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == [("meta",)]
    assert stored_marker(path) == NEWER


def test_a_newer_marker_that_keeps_this_release_compatible_is_used(sqlite_config: Path) -> None:
    """A newer additive release marks the store compatible: this one starts, keeping its marker."""
    path = store_file(sqlite_config)
    newer = {"schema": 3, "compatible": SCHEMA, "release": "0.3.0"}
    mark(path, newer)
    done = forked("store", "migrate", str(sqlite_config), "--check")
    assert done.returncode == 0 and "current" in done.stdout, done
    start_once(sqlite_config)
    assert stored_marker(path) == newer


def test_a_marker_fwrest_did_not_write_is_an_error(sqlite_config: Path) -> None:
    path = store_file(sqlite_config)
    mark(path, b"not json")
    done = forked("store", "migrate", str(sqlite_config), "--check")
    assert done.returncode == 2 and "schema marker" in done.stderr, done
    # the check and the start name the file; their fix is the backup, no release to start
    error = (
        f"fwrest: configuration error: {sqlite_config.resolve()}: [HTTPSERVER] StateStore: the "
        f"state store {path} holds a schema marker fwrest cannot read (b'not json'). Fix: "
        "restore the store's backup: fwrest did not write this marker"
    )
    check = forked("check", str(sqlite_config))
    proc = ServerProcess(sqlite_config)
    try:
        assert proc.proc.wait(30) == 2
        log = proc.log()
    finally:
        proc.stop()
    assert check.returncode == 2, check
    for text in (check.stderr, log):
        assert error in text and "start the release" not in text, text


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with started(RedisServer(tmp_path)) as server:
        yield server


def test_redis_needs_no_step_and_the_start_marks_it(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    (tmp_path / "svc").mkdir()
    config = store_config(tmp_path / "svc", url)
    for args in ((), ("--check",)):
        done = forked("store", "migrate", str(config), *args)
        print(done.stdout, done.stderr)
        assert done.returncode == 0 and "no migration step is needed" in done.stdout, done
    with contextlib.closing(redis_server.client()) as client:
        assert client.get("fwrest:schema") is None  # the command wrote nothing
        start_once(config)
        marker = marker_of(client.get("fwrest:schema"), "here")
        assert (marker.schema, marker.compatible, marker.release) == (
            SCHEMA, 1, fwrest.__version__
        )  # fmt: skip
        client.set("fwrest:schema", json.dumps(NEWER))
        for args in ((), ("--check",)):
            done = forked("store", "migrate", str(config), *args)
            assert done.returncode == 2, done
            refused(done.stderr)
        refused_by_check_and_start(config, REDIS_OLDER)
        assert json.loads(client.get("fwrest:schema")) == NEWER  # left as it was


def test_the_previous_release_is_the_tag_below_this_version() -> None:
    """SPEC 17.2: releases are tags vX.Y.Z; this is 0.2.0, the previous v0.1.0."""
    assert fwrest.__version__ == "0.2.0"
    assert PREVIOUS_VERSION == "0.1.0"


def test_a_redis_that_does_not_answer_is_an_error_of_the_check(tmp_path: Path) -> None:
    """``--check`` cannot say a Redis is current without asking it: 2, the reason said."""
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    config = free_config(tmp_path, extra={"HTTPSERVER": {"StateStore": url}})
    done = forked("store", "migrate", str(config), "--check")
    assert done.returncode == 2 and "fwrest store: error: redis store" in done.stderr, done
