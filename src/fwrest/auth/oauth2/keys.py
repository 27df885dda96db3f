"""The access-token signing key: created once, shared by every worker and host (SPEC 7).

Kept as base64url text in ``[HTTPSERVER] SigningKeyFile`` (default ``signing.key`` under
``DataPath``), created with an exclusive create and mode 0600; with a Redis store and no
``SigningKeyFile`` it is created once in Redis (set-if-absent). A corrupt or short key
aborts the start.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from pathlib import Path

from fwrest.errors import ConfigError
from fwrest.store import StateStore, StoreError

__all__ = ["MIN_KEY_BYTES", "load_signing_key"]

MIN_KEY_BYTES = 32


def _decode(text: bytes, where: str) -> bytes:
    stripped = text.strip()
    try:
        key = base64.urlsafe_b64decode(stripped + b"=" * (-len(stripped) % 4))
    except (binascii.Error, ValueError):
        key = b""
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"the signing key in {where} is corrupt or shorter than {MIN_KEY_BYTES} bytes.",
            section="HTTPSERVER",
            key="SigningKeyFile",
            fix="remove the file to have a new key created (tokens issued with the old key "
            "stop working), or write 32+ random bytes as base64url text.",
        )
    return key


def _encode(key: bytes) -> bytes:
    return base64.urlsafe_b64encode(key).rstrip(b"=")


def _from_file(path: Path, create: bool) -> bytes | None:
    if path.exists():
        return _decode(path.read_bytes(), str(path))
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(MIN_KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another worker or host won the race: use its key
        return _decode(path.read_bytes(), str(path))
    with os.fdopen(fd, "wb") as fh:
        fh.write(_encode(key) + b"\n")
    return key


def load_signing_key(
    key_file: Path | None, data_path: Path, store: StateStore | None, *, create: bool = True
) -> bytes | None:
    """The service's signing key (None only when ``create`` is False and none exists yet).

    Raises:
        ConfigError: the key is corrupt or short, or the store holding it cannot be reached.
    """
    if key_file is not None:
        return _from_file(key_file, create)
    if store is not None and store.kind == "redis":
        if not create:
            return None
        try:
            raw = store.signing_key(_encode(secrets.token_bytes(MIN_KEY_BYTES)))
        except StoreError as exc:
            raise ConfigError(
                f"the signing key cannot be read from the state store: {exc}",
                section="HTTPSERVER",
                key="StateStore",
                fix="start the Redis server, or set SigningKeyFile.",
            ) from None
        return _decode(raw, "the Redis state store")
    return _from_file(data_path / "signing.key", create)
