"""``fwrest store migrate CONFIG [--check]`` (SPEC 17.2), and the read-only look at a store's
schema marker that ``fwrest check`` makes.

A sqlite file is brought up to this release's schema in place: first a copy beside it (by
sqlite's backup API, so that what the write-ahead log holds is in the copy too), then the
additive steps and the marker in one transaction. A Redis needs no step (what this release adds
are new keys, written as it goes). ``--check`` changes nothing: 0 current, 1 a migration due.
A store this release cannot read, or that cannot be read at all, is an error (2).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from fwrest import __version__
from fwrest.store import SQLITE_FILE, StoreError, shown_url
from fwrest.store.redis_target import RedisOptions
from fwrest.store.schema import SCHEMA, Marker, SchemaError, marker_of, refuse_newer

__all__ = ["CURRENT", "DUE", "ERROR", "Outcome", "look", "migrate"]

CURRENT, DUE, ERROR = 0, 1, 2  # migrate --check's exit codes


@dataclass(frozen=True, slots=True)
class Outcome:
    """What ``fwrest store migrate`` says (``lines``, to standard output; ``error``, to
    standard error) and its exit code."""

    code: int
    lines: tuple[str, ...] = ()
    error: str = ""


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)


def _sqlite_marker(path: Path) -> Marker:
    from fwrest.store.sqlite import stored_marker

    try:
        db = _read_only(path)
        try:
            raw = stored_marker(db)
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise StoreError(f"the sqlite store {path} cannot be read: {exc}") from None
    return marker_of(raw, str(path))


def look(spec: str, data_path: Path, redis: RedisOptions | None) -> Marker | None:
    """The marker of the store ``StateStore`` names, read without writing (``fwrest check``):
    None for memory, a sqlite file not created yet, or a Redis that does not answer.

    Raises:
        SchemaError: the store is newer than this release can read, or its marker is not one.
    """
    if spec == "memory":
        return None
    if spec == "sqlite":
        path = data_path / SQLITE_FILE
        if not path.exists():
            return None
        try:
            marker = _sqlite_marker(path)
        except SchemaError:
            raise
        except StoreError:
            return None  # the start says what is wrong with the file
        refuse_newer(marker, str(path))
        return marker
    from fwrest.store import open_store

    store = open_store(spec, data_path, redis, retries=0)
    try:
        marker = marker_of(store.schema_marker(), shown_url(spec))
    except SchemaError:
        raise
    except StoreError:
        return None
    finally:
        store.close()
    refuse_newer(marker, shown_url(spec), redis=True)
    return marker


def _backup(path: Path, marker: Marker) -> Path:
    """A copy of the file beside it, named for its schema and the time."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.schema{marker.schema}-{stamp}.bak")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.schema{marker.schema}-{stamp}-{n}.bak")
    source = sqlite3.connect(path, timeout=5)
    try:
        copy = sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            copy.close()
    finally:
        source.close()
    target.chmod(0o600)
    return target


def migrate(spec: str, data_path: Path, redis: RedisOptions | None, check: bool) -> Outcome:
    """``fwrest store migrate``: see the module's docstring."""
    if spec == "memory":
        return Outcome(CURRENT, ("fwrest store: the memory store keeps nothing between "
                                 "starts: nothing to migrate",))  # fmt: skip
    if spec != "sqlite":
        return _redis(spec, data_path, redis)
    path = data_path / SQLITE_FILE
    if not path.exists():
        return Outcome(CURRENT, (f"fwrest store: no sqlite store at {path} yet: the first "
                                 f"start creates it at schema {SCHEMA}",))  # fmt: skip
    try:
        marker = _sqlite_marker(path)
        refuse_newer(marker, str(path))
    except StoreError as exc:  # SchemaError among them
        return Outcome(ERROR, error=f"fwrest store: error: {exc}")
    if marker.schema >= SCHEMA:
        return Outcome(CURRENT, (f"fwrest store: {path} is current (schema {marker.schema}, "
                                 f"written by fwrest {marker.release})",))  # fmt: skip
    due = f"schema {marker.schema} (fwrest {marker.release}) -> {SCHEMA} (fwrest {__version__})"
    if check:
        return Outcome(DUE, (f"fwrest store: {path}: a migration is due: {due}; run fwrest "
                             "store migrate CONFIG (it copies the file beside itself first)",))  # fmt: skip
    from fwrest.store.sqlite import SqliteStore, stored_marker, upgrade

    try:
        backup = _backup(path, marker)
        db = sqlite3.connect(path, timeout=5, isolation_level=None)
        try:
            db.execute("PRAGMA busy_timeout=5000")
            db.execute("BEGIN IMMEDIATE")
            try:
                now = marker_of(stored_marker(db), str(path))  # as it is under the lock
                refuse_newer(now, str(path))
                if now.schema < SCHEMA:
                    upgrade(db, now)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()
        SqliteStore(path).close()  # opens as a start would: the file is current
    except (OSError, sqlite3.Error, StoreError) as exc:
        return Outcome(ERROR, error=f"fwrest store: error: {path}: {exc}")
    return Outcome(CURRENT, (f"fwrest store: {path}: migrated {due}",
                             f"fwrest store: the file as it was: {backup}"))  # fmt: skip


def _redis(spec: str, data_path: Path, redis: RedisOptions | None) -> Outcome:
    from fwrest.store import open_store

    shown = shown_url(spec)
    try:
        store = open_store(spec, data_path, redis, retries=0)
        try:
            marker = marker_of(store.schema_marker(), shown)
        finally:
            store.close()
        refuse_newer(marker, shown, redis=True)
    except StoreError as exc:  # SchemaError among them
        return Outcome(ERROR, error=f"fwrest store: error: {exc}")
    return Outcome(CURRENT, (f"fwrest store: {shown} is a Redis store: no migration step is "
                             f"needed (schema {marker.schema}, written by fwrest "
                             f"{marker.release}; fwrest {__version__} adds only keys the "
                             "previous release ignores, and marks the store at its start)",))  # fmt: skip
