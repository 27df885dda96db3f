"""State that workers (and hosts) share: refresh-token families, revocations, failure counts,
rate-limit counts, run-time settings, the signing key, usage figures, the audit trail. Role
Protocols (:class:`TokenStore`, :class:`FailureStore`, :class:`RateStore`,
:class:`SettingsStore`, :class:`BlobStore`, :class:`AuditStore`) that :class:`StateStore`
combines; memory, sqlite and Redis implementations, chosen by :func:`open_store`. No HTTP.
"""

from pathlib import Path

from fwrest.store.base import (
    AUDIT_KEEP,
    AuditStore,
    BlobStore,
    FailureStore,
    RateStore,
    RefreshRecord,
    SettingsStore,
    StateStore,
    StoreBase,
    StoreError,
    TokenStore,
)

__all__ = [
    "AUDIT_KEEP",
    "AuditStore",
    "BlobStore",
    "FailureStore",
    "RateStore",
    "RefreshRecord",
    "SettingsStore",
    "StateStore",
    "StoreBase",
    "StoreError",
    "TokenStore",
    "open_store",
]


def open_store(spec: str, data_path: Path) -> StateStore:
    """The store named by ``[HTTPSERVER] StateStore``: ``sqlite``, ``memory``, ``redis://...``."""
    if spec == "memory":
        from fwrest.store.memory import MemoryStore

        return MemoryStore()
    if spec == "sqlite":
        from fwrest.store.sqlite import SqliteStore

        return SqliteStore(data_path / "state.sqlite3")
    from fwrest.store.redis import RedisStore

    return RedisStore(spec)
