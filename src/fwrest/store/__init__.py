"""State that workers (and hosts) share: refresh-token families, revocations, failure counts,
rate-limit counts, run-time settings, the signing key, usage figures, the audit trail. Role
Protocols (:class:`TokenStore`, :class:`FailureStore`, :class:`RateStore`,
:class:`SettingsStore`, :class:`BlobStore`, :class:`AuditStore`) that :class:`StateStore`
combines; memory, sqlite and Redis implementations, chosen by :func:`open_store` (the Redis
URL forms of SPEC 15 and their options: ``store/redis_target.py``). No HTTP.
"""

from pathlib import Path

from fwrest.store.base import (
    AUDIT_KEEP,
    AuditStore,
    BlobStore,
    FailureStore,
    RateStore,
    RefreshRecord,
    SchemaStore,
    SettingsStore,
    StateStore,
    StoreBase,
    StoreError,
    TokenStore,
    UnconfirmedSpend,
    UnconfirmedWrite,
)
from fwrest.store.redis_target import RedisOptions, quiet_redis, shown_url

SQLITE_FILE = "state.sqlite3"  # StateStore=sqlite: this file under DataPath

__all__ = [
    "AUDIT_KEEP",
    "SQLITE_FILE",
    "AuditStore",
    "BlobStore",
    "FailureStore",
    "RateStore",
    "RedisOptions",
    "RefreshRecord",
    "SchemaStore",
    "SettingsStore",
    "StateStore",
    "StoreBase",
    "StoreError",
    "TokenStore",
    "UnconfirmedSpend",
    "UnconfirmedWrite",
    "open_store",
    "shown_url",
]


def open_store(
    spec: str, data_path: Path, redis: RedisOptions | None = None, *, retries: int = 2
) -> StateStore:
    """The store named by ``[HTTPSERVER] StateStore``: ``sqlite``, ``memory``, or a Redis URL
    (``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://``, ``redis+cluster://``,
    ``rediss+cluster://``) with ``redis``'s TLS
    files and password; ``retries``: a Redis connection error's (0 for one look)."""
    if spec == "memory":
        from fwrest.store.memory import MemoryStore

        return MemoryStore()
    if spec == "sqlite":
        from fwrest.store.sqlite import SqliteStore

        return SqliteStore(data_path / SQLITE_FILE)
    quiet_redis()
    from fwrest.store.redis import RedisClusterStore, RedisStore
    from fwrest.store.redis_target import CLUSTER_SCHEMES

    if spec.lower().startswith(CLUSTER_SCHEMES):
        return RedisClusterStore(spec, redis, retries)
    return RedisStore(spec, redis, retries)
