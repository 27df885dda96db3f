"""The access-token signing key: created once, shared by every worker and host (SPEC 7).

Kept as base64url text in ``[HTTPSERVER] SigningKeyFile`` (default ``signing.key`` under
``DataPath``), created with an exclusive create and mode 0600; with a Redis store and no
``SigningKeyFile`` it is created once in Redis (set-if-absent). A corrupt or short key
aborts the start.

The file never appears half written: the key is written to a private temporary file in the
same folder, then linked to its name (``link`` fails when the name exists: the exclusive
create), so a service starting while another creates the key reads the whole key, never an
empty file that it would take for a corrupt one. Where the file system cannot link, the key is
created with ``O_EXCL`` and written in place; a reader that finds the file empty then waits
(``EMPTY_WAIT_S``) for its writer.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fwrest.auth.oauth2.keyset import (
    KEYSET_BLOB,
    KEYSET_FILE,
    FileKeySet,
    KeyEntry,
    KeySetError,
    KeySource,
    StoreKeySet,
    check_entries,
    ensure,
    parse,
    read_entries,
)
from fwrest.errors import ConfigError
from fwrest.store import StateStore
from fwrest.store.calls import runs

if TYPE_CHECKING:
    from fwrest.store.redis import RedisStore

__all__ = [
    "EMPTY_WAIT_S",
    "MIN_KEY_BYTES",
    "REDIS_KEY",
    "check_stored_keys",
    "in_store",
    "keep_signing_key",
    "key_set_source",
    "load_key_set",
    "load_signing_key",
    "store_signing_key",
]

MIN_KEY_BYTES = 32
REDIS_KEY = "fwrest:signing_key"  # the key's name in a Redis store (fwrest/store/redis.py)
# An empty key file is a key still being written (by a host without link(), or an earlier
# fwrest) for this long; then it is a corrupt key.
EMPTY_WAIT_S = 2.0
_FILE_FIX = (
    "remove the file to have a new key created (tokens issued with the old key stop "
    "working), or write 32+ random bytes as base64url text."
)


def _decode(text: bytes, where: str, *, key: str = "SigningKeyFile", fix: str = _FILE_FIX) -> bytes:
    stripped = text.strip()
    try:
        raw = base64.urlsafe_b64decode(stripped + b"=" * (-len(stripped) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) < MIN_KEY_BYTES:
        raise ConfigError(
            f"the signing key in {where} is corrupt or shorter than {MIN_KEY_BYTES} bytes.",
            section="HTTPSERVER",
            key=key,
            fix=fix,
        )
    return raw


def _encode(key: bytes) -> bytes:
    return base64.urlsafe_b64encode(key).rstrip(b"=")


def _file_error(path: Path, doing: str, exc: OSError, key: str) -> ConfigError:
    return ConfigError(
        f"the signing key file {path} cannot be {doing}: {exc.strerror or exc}.",
        section="HTTPSERVER",
        key=key,
        fix="give a file in a folder the service may create and write to (the key is made "
        "there at the first start, mode 0600), or fix the file's permissions.",
    )


def _read(path: Path, key: str) -> bytes:
    """The key in ``path``; an empty file is waited on for ``EMPTY_WAIT_S`` (see the module)."""
    deadline = time.monotonic() + EMPTY_WAIT_S
    while True:
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise _file_error(path, "read", exc, key) from None
        if text.strip() or time.monotonic() >= deadline:
            return _decode(text, str(path), key=key)
        time.sleep(0.05)


def _folder_error(path: Path, key: str) -> ConfigError | None:
    """Why the key file's folder cannot be made or written (the words of `fwrest check`)."""
    from fwrest.config.loader import probe_writable

    why = probe_writable(path.parent, directory=True)
    if not why:
        return None
    return ConfigError(
        f"the signing key file {path} cannot be created in {path.parent}: {why}.",
        section="HTTPSERVER",
        key=key,
        fix="give a file in a folder the service may create and write to (or set "
        "SigningKeyFile to one).",
    )


def _create(path: Path, key: str) -> bytes:
    """Create the key file once (exclusive, mode 0600); the key in it, whoever made it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _folder_error(path, key) or _file_error(path, "created", exc, key) from None
    new = secrets.token_bytes(MIN_KEY_BYTES)
    text = _encode(new) + b"\n"
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".signing-key-")  # mode 0600
    except OSError as exc:
        raise _file_error(path, "created", exc, key) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # atomic, and fails when the name exists: the exclusive create
            return new
        except FileExistsError:  # another worker or host made it first: use its key
            return _read(path, key)
        except OSError:
            pass  # no hard links here: create in place below
    except OSError as exc:
        raise _file_error(path, "created", exc, key) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path, key)
    except OSError as exc:
        raise _file_error(path, "created", exc, key) from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(text)
    return new


def _from_file(path: Path, create: bool, key: str) -> bytes | None:
    if path.exists() or path.is_symlink():
        return _read(path, key)
    if not create:
        # `fwrest check`: the start will create the key here; say now if it cannot
        problem = _folder_error(path, key)
        if problem is not None:
            raise problem
        return None
    return _create(path, key)


def load_signing_key(
    key_file: Path | None, data_path: Path, store: StateStore | None, *, create: bool = True
) -> bytes | None:
    """The service's signing key (None only when ``create`` is False and none exists yet).

    Raises:
        ConfigError: the key is corrupt or short, or its file cannot be read or created.
        StoreError: the Redis store holding it did not answer.
    """
    if key_file is not None:
        return _from_file(key_file, create, "SigningKeyFile")
    if in_store(key_file, store):
        assert store is not None
        return store_signing_key(store) if create else None
    return _from_file(data_path / "signing.key", create, "SigningKeyFile")


def in_store(key_file: Path | None, store: StateStore | None) -> bool:
    """Whether the signing key lives in the (Redis) state store: no ``SigningKeyFile``."""
    return key_file is None and store is not None and store.kind == "redis"


@runs("signing_key")
def store_signing_key(store: StateStore) -> bytes:
    """(blocking) The signing key a Redis store holds, created there (set-if-absent: every
    worker and host that asks at once gets the one key) when it holds none.

    Raises:
        StoreError: the store did not answer.
        ConfigError: the key it holds is corrupt or short.
    """
    raw = store.signing_key(_encode(secrets.token_bytes(MIN_KEY_BYTES)))
    name = getattr(store, "signing_key_name", REDIS_KEY)  # a cluster's has its prefix
    return _decode_stored(raw, name)


def _decode_stored(raw: bytes, name: str) -> bytes:
    """The key of the Redis key ``name`` (the start's and ``fwrest check``'s words)."""
    return _decode(
        raw,
        f"the Redis state store (key {name})",
        key="StateStore",
        fix=f"delete the key ({name}) to have a new one created (tokens issued with "
        "the old key stop working), or set SigningKeyFile.",
    )


@runs("signing_key")
def keep_signing_key(store: StateStore, key: bytes) -> bytes:
    """(blocking) The signing key the Redis store holds, ``key`` written back first when it
    holds none (a store that lost its data while the service ran: every worker and host that
    still holds the one key puts it back, set-if-absent, so that a worker or host started
    since reads it, not a new one).

    Raises:
        StoreError: the store did not answer.
        ConfigError: the key it holds is corrupt or short.
    """
    raw = store.signing_key(_encode(key))
    name = getattr(store, "signing_key_name", REDIS_KEY)
    return _decode(raw, f"the Redis state store (key {name})", key="StateStore")


def key_set_source(key_file: Path | None, data_path: Path, store: StateStore | None) -> KeySource:
    """Where the asymmetric key set lives (SPEC 12.1): beside the signing key, so in
    ``keyset.json`` in the folder of ``SigningKeyFile`` (or ``DataPath``), or in the Redis
    store when the signing key is there."""
    if key_file is None and store is not None and store.kind == "redis":
        return StoreKeySet(store)
    folder = key_file.parent if key_file is not None else data_path
    return FileKeySet(folder / KEYSET_FILE)


def load_key_set(source: KeySource, algs: set[str], *, create: bool = True) -> list[KeyEntry]:
    """The key set, with a current and a next key for each of ``algs`` made when missing
    (``create``); without ``create`` (``fwrest check``) only read and checked.

    Raises:
        ConfigError: the key set cannot be read, parsed or written.
    """
    try:
        entries = ensure(source, algs) if create else read_entries(source)
        check_entries(entries, source.where)
    except KeySetError as exc:
        raise _key_set_error(exc, source) from None
    return entries


def _key_set_error(exc: KeySetError, source: KeySource) -> ConfigError:
    redis = isinstance(source, StoreKeySet)
    return ConfigError(
        f"{exc}.",
        section="HTTPSERVER",
        key="StateStore" if redis else "SigningKeyFile",
        fix=(
            "start the Redis server; if the key set is damaged, delete the blob "
            "fwrest-keyset of the store's fwrest:blobs hash (a new key is made; tokens "
            "signed with the old keys stop working)."
            if redis
            else f"make {KEYSET_FILE} readable by the service, or move the damaged file "
            "away to have a new key set made at the next start (tokens signed with the "
            "old keys stop working)."
        ),
    )


def check_stored_keys(store: RedisStore, algs: set[str]) -> None:
    """(blocking) ``fwrest check``: the signing key and, for ``algs`` (the asymmetric
    algorithms the ports sign with), the key set that a Redis store holds, read and checked as
    a start reads them, in its words. Nothing is made or written: what is missing, the start
    makes.

    Raises:
        ConfigError: the key is corrupt or short, or the key set is damaged.
        StoreError: the store did not answer.
    """
    raw = store.stored_signing_key()
    if raw is not None:
        _decode_stored(raw, store.signing_key_name)
    if not algs:
        return
    source = StoreKeySet(store)
    doc = store.get_blob(KEYSET_BLOB)  # a StoreError as it is: not the set's fault
    if doc is None:
        return
    try:
        check_entries(parse(doc, source.where), source.where)
    except KeySetError as exc:
        raise _key_set_error(exc, source) from None
