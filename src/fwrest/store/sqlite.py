"""A file under ``DataPath``, shared by the workers of one host.

WAL, ``busy_timeout``, ``BEGIN IMMEDIATE`` for writes, and one connection per process and
thread, opened after fork (a connection never crosses a fork).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fwrest.store import schema
from fwrest.store.base import (
    AUDIT_KEEP,
    FLOOD_EVENTS,
    RefreshRecord,
    StoreError,
    settings_stamp,
)

__all__ = ["SqliteStore", "stored_marker", "upgrade"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS refresh (
    token_hash TEXT PRIMARY KEY, family TEXT NOT NULL, client_id TEXT NOT NULL,
    subject TEXT NOT NULL, expires_at REAL NOT NULL, spent INTEGER NOT NULL DEFAULT 0,
    spent_by TEXT NOT NULL DEFAULT '', scope TEXT NOT NULL DEFAULT 'default',
    issued_at REAL NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS refresh_expiry ON refresh(expires_at);
CREATE INDEX IF NOT EXISTS refresh_subject ON refresh(subject);
CREATE TABLE IF NOT EXISTS codes (code_hash TEXT PRIMARY KEY, record BLOB NOT NULL,
    family TEXT NOT NULL DEFAULT '', keep_until REAL NOT NULL);
CREATE INDEX IF NOT EXISTS codes_keep ON codes(keep_until);
CREATE TABLE IF NOT EXISTS proofs (proof_id TEXT PRIMARY KEY, keep_until REAL NOT NULL);
CREATE INDEX IF NOT EXISTS proofs_keep ON proofs(keep_until);
CREATE TABLE IF NOT EXISTS revoked (family TEXT PRIMARY KEY, until REAL NOT NULL);
CREATE TABLE IF NOT EXISTS failures (key TEXT PRIMARY KEY, start REAL NOT NULL,
    count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS locks (key TEXT PRIMARY KEY, until REAL NOT NULL);
CREATE INDEX IF NOT EXISTS failures_start ON failures(start);
CREATE INDEX IF NOT EXISTS locks_until ON locks(until);
CREATE TABLE IF NOT EXISTS rates (key TEXT PRIMARY KEY, ends REAL NOT NULL,
    count INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS rates_ends ON rates(ends);
CREATE TABLE IF NOT EXISTS blobs (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL,
    event TEXT NOT NULL, entry BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS audit_ts ON audit(ts);
CREATE INDEX IF NOT EXISTS audit_event ON audit(event, seq);
"""
# columns that stores of earlier releases lack (ALTER TABLE ADD COLUMN: additive, the earlier
# release's statements name their columns); then what needs them
_COLUMNS = (
    ("spent_by", "TEXT NOT NULL DEFAULT ''"),
    ("scope", "TEXT NOT NULL DEFAULT 'default'"),
    ("issued_at", "REAL NOT NULL DEFAULT 0"),  # 0: not known (SPEC 12.3's iat)
    ("alias", "TEXT NOT NULL DEFAULT ''"),  # schema 2: RefreshRecord.alias
)
_AFTER_COLUMNS = "CREATE INDEX IF NOT EXISTS refresh_alias ON refresh(alias) WHERE alias != ''"


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def stored_marker(db: sqlite3.Connection) -> bytes | None:
    """The schema marker of the file (``store/schema.py``): None when it has none (a file of
    fwrest 0.1.0, or a new one)."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone():
        row = db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
        if row is not None:
            return bytes(row[0]) if isinstance(row[0], bytes) else str(row[0]).encode()
    return None


def upgrade(db: sqlite3.Connection, marker: schema.Marker) -> None:
    """Bring a file of ``marker``'s schema (or a new one) up to this release's, in the
    caller's transaction: additive steps only (SPEC 17.2: hosts of the previous release go on
    using the file), then the marker."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    columns = {row[1] for row in db.execute("PRAGMA table_info(refresh)")}
    for column, kind in _COLUMNS:
        if column not in columns:  # a store written by an earlier fwrest
            db.execute(f"ALTER TABLE refresh ADD COLUMN {column} {kind}")
    db.execute(_AFTER_COLUMNS)
    new = schema.Marker(
        schema.SCHEMA, max(marker.compatible, schema.COMPATIBLE), schema.current().release
    )
    db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (new.encode(),))


class SqliteStore:
    kind = "sqlite"
    family_slots = False
    in_process = False
    audit_keep = AUDIT_KEEP

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # made 0600 before sqlite opens it: sqlite gives the -wal and -shm files it makes
            # the database's mode (they hold the same token hashes); made by sqlite itself,
            # all three were 0644 under the usual umask until the chmod below. Only when it
            # is missing: closing a descriptor of a file drops every POSIX lock this process
            # holds on it, sqlite's too (a reload opens the store again beside the one in
            # use): a command's connection would then find no other user, checkpoint and
            # delete the -wal and -shm files the workers still write through
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600))
            db = self._conn()
            # the marker read (a reader waits for no writer); a newer store refused before
            # anything is written; an older one brought up to this release's schema in one
            # step (BEGIN IMMEDIATE), its marker read again under the lock
            marker = schema.marker_of(stored_marker(db), str(path))
            schema.refuse_newer(marker, str(path))
            if marker.schema < schema.SCHEMA:
                with _transaction(db):
                    marker = schema.marker_of(stored_marker(db), str(path))
                    schema.refuse_newer(marker, str(path))
                    if marker.schema < schema.SCHEMA:
                        upgrade(db, marker)
            # token hashes and counters: the service's eyes only (side files an earlier
            # release left readable too)
            for own in (
                path,
                path.with_name(path.name + "-wal"),
                path.with_name(path.name + "-shm"),
            ):
                with contextlib.suppress(FileNotFoundError):
                    own.chmod(0o600)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"the sqlite store {path} cannot be opened: {exc}") from None

    def _conn(self) -> sqlite3.Connection:
        pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != pid:
            conn = sqlite3.connect(self.path, timeout=5, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=5000")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn, self._local.pid = conn, pid
        return conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        try:
            db = self._conn()  # inside: a connection that cannot open is a StoreError too (503)
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None

    def ping(self) -> None:
        try:
            self._conn().execute("SELECT 1").fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None

    def add_refresh(self, record: RefreshRecord) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO refresh (token_hash, family, client_id, subject, expires_at, scope, "
                "issued_at, alias) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.token_hash,
                    record.family,
                    record.client_id,
                    record.subject,
                    record.expires_at,
                    record.scope,
                    record.issued_at,
                    record.alias,
                ),
            )
            if int(record.expires_at) % 50 == 0:  # now and then, forget long-expired tokens
                db.execute("DELETE FROM refresh WHERE expires_at < ?", (time.time() - 86400,))

    def add_code(self, code_hash: str, record: bytes, keep_s: float) -> None:
        now = time.time()
        with self._tx() as db:
            db.execute("DELETE FROM codes WHERE keep_until < ?", (now,))
            db.execute(
                "INSERT OR REPLACE INTO codes (code_hash, record, family, keep_until) "
                "VALUES (?, ?, '', ?)",
                (code_hash, record, now + keep_s),
            )

    def note_proof(self, proof_id: str, keep_s: float) -> bool:
        now = time.time()
        with self._tx() as db:
            found = db.execute(
                "SELECT keep_until FROM proofs WHERE proof_id = ?", (proof_id,)
            ).fetchone()
            if found is not None and float(found[0]) > now:
                return False
            if found is None and int(now * 10) % 16 == 0:  # now and then, forget the ended
                db.execute("DELETE FROM proofs WHERE keep_until < ?", (now,))
            db.execute(
                "INSERT OR REPLACE INTO proofs (proof_id, keep_until) VALUES (?, ?)",
                (proof_id, now + keep_s),
            )
            return True

    def take_code(self, code_hash: str, family: str) -> tuple[str, bytes | None, str]:
        with self._tx() as db:
            row = db.execute(
                "SELECT record, family FROM codes WHERE code_hash = ? AND keep_until > ?",
                (code_hash, time.time()),
            ).fetchone()
            if row is None:
                return "missing", None, ""
            record, taken_by = bytes(row[0]), str(row[1])
            if taken_by and taken_by != family:
                return "used", record, taken_by
            db.execute("UPDATE codes SET family = ? WHERE code_hash = ?", (family, code_hash))
            return "ok", record, family

    def spend_refresh(
        self, token_hash: str, claim: str, client_id: str | None = None
    ) -> tuple[str, RefreshRecord | None]:
        with self._tx() as db:
            row = db.execute(
                "SELECT token_hash, family, client_id, subject, expires_at, scope, issued_at, "
                "spent, spent_by FROM refresh WHERE token_hash = ?",
                (token_hash,),
            ).fetchone()
            if row is None:
                return "missing", None
            record = RefreshRecord(*row[:7])
            if row[7]:
                # spent (by an earlier fwrest: spent_by '', never a claim)
                return ("ok" if claim and row[8] == claim else "spent"), record
            if client_id is not None and record.client_id != client_id:
                return "client", record
            if record.expires_at <= time.time():
                return "expired", record
            db.execute(
                "UPDATE refresh SET spent = 1, spent_by = ? WHERE token_hash = ?",
                (claim, token_hash),
            )
        return "ok", record

    def restore_refresh(self, token_hash: str, claim: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE refresh SET spent = 0, spent_by = '' "
                "WHERE token_hash = ? AND spent = 1 AND spent_by = ?",
                (token_hash, claim),
            )

    def revoke_family(self, family: str, until: float) -> None:
        with self._tx() as db:
            # the revocations that have ended are forgotten here (a replay is rare; the reads,
            # every 0.5 s from every worker, skip them and write nothing): the table holds the
            # revocations in force and those ended since the last replay
            db.execute("DELETE FROM revoked WHERE until <= ?", (time.time(),))
            db.execute(
                "INSERT INTO revoked VALUES (?, ?) ON CONFLICT(family) DO UPDATE SET "
                "until = max(until, excluded.until)",
                (family, until),
            )

    def revoked_families(self) -> dict[str, float]:
        try:
            rows = self._conn().execute(
                "SELECT family, until FROM revoked WHERE until > ?", (time.time(),)
            )
            return dict(rows.fetchall())
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None

    def refresh_record(self, token_hash: str) -> tuple[RefreshRecord, bool] | None:
        try:
            row = (
                self._conn()
                .execute(
                    "SELECT token_hash, family, client_id, subject, expires_at, scope, "
                    "issued_at, spent FROM refresh WHERE token_hash = ?",
                    (token_hash,),
                )
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None
        return None if row is None else (RefreshRecord(*row[:7]), bool(row[7]))

    def refresh_alias(self, alias: str) -> str | None:
        try:
            row = (
                self._conn()
                .execute("SELECT token_hash FROM refresh WHERE alias = ? AND alias != ''", (alias,))
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None
        return None if row is None else str(row[0])

    def schema_marker(self) -> bytes | None:
        try:
            return stored_marker(self._conn())
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None

    def swap_schema_marker(self, old: bytes | None, new: bytes) -> bytes | None:
        with self._tx() as db:
            now = stored_marker(db)
            if now == old:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (new,))
                now = new
        return now

    def user_families(self, subject: str) -> dict[str, float]:
        try:
            rows = self._conn().execute(
                "SELECT family, max(expires_at) FROM refresh WHERE subject = ? "
                "GROUP BY family HAVING max(expires_at) > ?",
                (subject, time.time() - 86400),
            )
            return {family: float(until) for family, until in rows.fetchall()}
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None

    def hit_failure(self, key: str, window_s: float, before: float = 0.0) -> tuple[int, float]:
        with self._tx() as db:
            now = time.time()  # holding the write lock (as hit_rate's)
            if before and now > before:
                return 0, 0.0
            return self._hit_failure(db, key, window_s, now)

    @staticmethod
    def _hit_failure(
        db: sqlite3.Connection, key: str, window_s: float, now: float
    ) -> tuple[int, float]:
        row = db.execute("SELECT start, count FROM failures WHERE key = ?", (key,)).fetchone()
        start, count = (now, 0) if row is None or now - row[0] >= window_s else row
        if count == 0:
            # a new window: forget the ended ones (by the index; a failure is the slow
            # path anyway), so that names or addresses that failed once do not pile up
            db.execute("DELETE FROM failures WHERE start <= ?", (now - window_s,))
        count += 1
        db.execute("INSERT OR REPLACE INTO failures VALUES (?, ?, ?)", (key, start, count))
        return count, start + window_s - now

    def hit_failures(
        self, keys: tuple[str, ...], window_s: float, limit: int, before: float = 0.0
    ) -> list[tuple[int, float]]:
        with self._tx() as db:
            now = time.time()
            if before and now > before:
                return [(0, 0.0) for _ in keys]
            found = []
            for key in keys:
                row = db.execute(
                    "SELECT start, count FROM failures WHERE key = ?", (key,)
                ).fetchone()
                found.append((now, 0) if row is None or now - row[0] >= window_s else row)
            if all(n < limit for _, n in found):
                return [self._hit_failure(db, key, window_s, now) for key in keys]
        return [(int(n) + 1, float(start) + window_s - now) for start, n in found]

    def hit_rate(self, key: str, window_s: float, before: float = 0.0) -> tuple[int, float]:
        with self._tx() as db:
            now = time.time()  # holding the write lock: the instant the count is taken
            if before and now > before:
                return 0, 0.0  # the request gave up waiting (a lock held meanwhile)
            row = db.execute("SELECT ends, count FROM rates WHERE key = ?", (key,)).fetchone()
            if row is None or row[0] <= now:
                # a new window: forget the ended ones (each its own length), by the index
                db.execute("DELETE FROM rates WHERE ends <= ?", (now,))
                ends, count = now + window_s, 1
                db.execute("INSERT OR REPLACE INTO rates VALUES (?, ?, 1)", (key, ends))
            else:
                ends, count = float(row[0]), int(row[1]) + 1
                db.execute("UPDATE rates SET count = ? WHERE key = ?", (count, key))
        return count, ends - now

    def failures(self, key: str, window_s: float) -> tuple[int, float]:
        now = time.time()
        try:
            row = (
                self._conn()
                .execute("SELECT start, count FROM failures WHERE key = ?", (key,))
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None
        if row is None or now - row[0] >= window_s:
            return 0, 0.0
        return int(row[1]), float(row[0]) + window_s - now

    def release_failure(self, key: str, window_s: float) -> None:
        now = time.time()
        with self._tx() as db:
            db.execute(
                "UPDATE failures SET count = count - 1 WHERE key = ? AND count > 0 AND start > ?",
                (key, now - window_s),
            )
            db.execute("DELETE FROM failures WHERE key = ? AND count <= 0", (key,))

    def clear_failures(self, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM failures WHERE key = ?", (key,))

    def add_lock(self, key: str, until: float, failures: int = 0, window_s: float = 0.0) -> None:
        now = time.time()
        with self._tx() as db:
            if failures:
                row = db.execute("SELECT start, count FROM failures WHERE key = ?", (key,))
                start, count = row.fetchone() or (0.0, 0)
                if now - start >= window_s:  # no window in force
                    start, count = until - window_s, 0
                if failures > count:
                    db.execute(
                        "INSERT OR REPLACE INTO failures VALUES (?, ?, ?)",
                        (key, max(start, until - window_s), failures),
                    )
            db.execute("DELETE FROM locks WHERE until <= ?", (now,))  # ended ones
            db.execute(
                "INSERT INTO locks VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                "until = max(until, excluded.until)",
                (key, until),
            )

    def lift_lock(self, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM locks WHERE key = ?", (key,))
            db.execute("DELETE FROM failures WHERE key = ?", (key,))

    def locks(self) -> dict[str, float]:
        try:
            rows = self._conn().execute(
                "SELECT key, until FROM locks WHERE until > ?", (time.time(),)
            )
            return dict(rows.fetchall())
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None

    def signing_key(self, candidate: bytes) -> bytes:
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('signing_key', ?)", (candidate,))
            row = db.execute("SELECT value FROM meta WHERE name = 'signing_key'").fetchone()
        return bytes(row[0])

    def get_settings(self) -> dict[str, int]:
        try:
            return dict(self._conn().execute("SELECT name, value FROM settings").fetchall())
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None

    def set_settings(self, values: dict[str, int | None]) -> tuple[dict[str, int], float]:
        # BEGIN IMMEDIATE: the read, the writes and the time of the change are one step; the
        # last change's time is a row of meta (0.1.0 reads only its own rows there)
        with self._tx() as db:
            before = dict(db.execute("SELECT name, value FROM settings").fetchall())
            for name, value in values.items():
                if value is None:
                    db.execute("DELETE FROM settings WHERE name = ?", (name,))
                else:
                    db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (name, value))
            row = db.execute("SELECT value FROM meta WHERE name = 'settings_stamp'").fetchone()
            stamp = settings_stamp(0 if row is None else int(row[0]))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('settings_stamp', ?)", (stamp,))
        return before, stamp / 1e6

    def put_blob(self, name: str, value: bytes) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO blobs VALUES (?, ?)", (name, value))

    def blobs(self, prefix: str) -> dict[str, bytes]:
        try:
            rows = self._conn().execute(
                "SELECT name, value FROM blobs WHERE substr(name, 1, ?) = ?", (len(prefix), prefix)
            )
            return {name: bytes(value) for name, value in rows.fetchall()}
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None

    def delete_blobs(self, prefix: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM blobs WHERE substr(name, 1, ?) = ?", (len(prefix), prefix))

    def get_blob(self, name: str) -> bytes | None:
        try:
            row = self._conn().execute("SELECT value FROM blobs WHERE name = ?", (name,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None
        return None if row is None else bytes(row[0])

    def swap_blob(self, name: str, old: bytes | None, new: bytes) -> bytes | None:
        with self._tx() as db:  # BEGIN IMMEDIATE: the read and the write are one step
            row = db.execute("SELECT value FROM blobs WHERE name = ?", (name,)).fetchone()
            now = None if row is None else bytes(row[0])
            if now == old:
                db.execute("INSERT OR REPLACE INTO blobs VALUES (?, ?)", (name, new))
                now = new
        return now

    def add_audit(self, ts: float, event: str, entry: bytes) -> None:
        # AUTOINCREMENT numbers rows in order of arrival, never reused: the rows of the new
        # one's budget (FLOOD_EVENTS, or the others) more than audit_keep behind it go, the
        # oldest first (a flood's by the index on (event, seq))
        flood = event in FLOOD_EVENTS
        shelf = "event IN ({})".format(",".join("?" * len(FLOOD_EVENTS)))
        if not flood:
            shelf = f"NOT {shelf}"
        names = tuple(sorted(FLOOD_EVENTS))
        with self._tx() as db:
            db.execute("INSERT INTO audit (ts, event, entry) VALUES (?, ?, ?)", (ts, event, entry))
            db.execute(
                f"DELETE FROM audit WHERE {shelf} AND seq <= (SELECT seq FROM audit WHERE "  # noqa: S608
                f"{shelf} ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (*names, *names, self.audit_keep),
            )

    def audit_events(self, since: float, event: str | None, limit: int) -> list[bytes]:
        try:
            rows = self._conn().execute(
                "SELECT entry FROM audit WHERE ts >= ? AND (? IS NULL OR event = ?) "
                "ORDER BY ts DESC, seq DESC LIMIT ?",
                (since, event, event, limit),
            )
            return [bytes(row[0]) for row in rows.fetchall()]
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store: {exc}") from None

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            conn.close()
        self._local = threading.local()
