"""State that workers (and hosts) share: refresh-token families, revocations, failure counts,
run-time settings, the signing key. One :class:`StateStore` protocol; memory, sqlite and
Redis implementations. No HTTP.
"""

from fwrest.store.base import RefreshRecord, StateStore, StoreError, open_store

__all__ = ["RefreshRecord", "StateStore", "StoreError", "open_store"]
