"""The store protocol, its records, and choosing an implementation from ``StateStore``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "AUDIT_KEEP",
    "FLOOD_EVENTS",
    "AuditStore",
    "BlobStore",
    "CodeStore",
    "FailureStore",
    "RateStore",
    "RefreshRecord",
    "SchemaStore",
    "SettingsStore",
    "StateStore",
    "StoreBase",
    "StoreError",
    "TokenStore",
    "UnconfirmedSpend",
    "UnconfirmedWrite",
    "settings_stamp",
]


class StoreError(Exception):
    """The store cannot be reached or answered badly; callers fail closed (503)."""


class UnconfirmedWrite(StoreError):
    """A write that must outlive a failover (a family's revocation, a DPoP proof's use, a
    refresh token's spend) that its master did but no replica confirmed in time (Sentinel, a
    cluster): a failover could promote that replica without it. The caller answers 503; the
    write is idempotent for a retry (a proof's use was taken back)."""


class UnconfirmedSpend(UnconfirmedWrite):
    """A refresh token's spend that its master did but no replica confirmed in time (Sentinel,
    a cluster): a failover could hand the token, unspent, to that replica. The spend stands
    until its caller undoes it (``restore_refresh``); no new pair may be given for it."""


@dataclass(frozen=True, slots=True)
class RefreshRecord:
    """A refresh token as stored: only its hash, never the token."""

    token_hash: str
    family: str
    client_id: str
    subject: str
    expires_at: float  # epoch seconds
    # the scopes the family was granted, space-separated (SPEC 12.4); a record an earlier
    # fwrest stored has none: "default", all it could grant
    scope: str = "default"
    # when it was issued, epoch seconds (SPEC 12.3: introspection's ``iat``); 0 in a record
    # an earlier fwrest stored, which kept no such time
    issued_at: float = 0.0
    # the hash under the folded section name when the record is stored under the name as the
    # host spells it (fwrest 0.1.0's form, which it still reads: SPEC 17.2), else ""; hosts
    # spelling the section otherwise find the record through it (TokenStore.refresh_alias)
    alias: str = ""


class StoreBase(Protocol):
    """What every store is: blocking calls, which the server runs off the event loop."""

    kind: str
    # True when the store answers from this process's memory at once (no I/O): callers may
    # then call it on the event loop instead of a thread
    in_process: bool

    def ping(self) -> None: ...

    def close(self) -> None: ...


class TokenStore(StoreBase, Protocol):
    """Refresh tokens and revoked token families (the token service)."""

    # True where the store keeps a token family's records on one slot (a Redis Cluster, SPEC
    # 17.1): refresh tokens then carry the family's tag, their hashes ``tag.hash``
    family_slots: bool

    def add_refresh(self, record: RefreshRecord) -> None: ...

    def spend_refresh(
        self, token_hash: str, claim: str, client_id: str | None = None
    ) -> tuple[str, RefreshRecord | None]:
        """Atomically mark a refresh token spent by ``claim`` (a random id of one token
        request): ``("ok", rec)`` the first time, and again for the same ``claim`` (a client
        retrying the same call after a lost answer must not take its own spend for a replay);
        ``("spent", rec)`` when another claim spent it (a replay); ``("missing", None)`` when
        unknown. With ``client_id`` (the client the request authenticated as), an unspent token
        of another client is left unspent: ``("client", rec)`` (SPEC 7.1: a refresh keeps the
        token's own client, and a refused one does not spend it). An unspent token whose
        ``expires_at`` has passed is left unspent too: ``("expired", rec)`` (SPEC 4.2: it was
        never used, so presenting it again is no replay). A replay is a replay whichever
        client presents it, expired or not."""
        ...

    def restore_refresh(self, token_hash: str, claim: str) -> None:
        """Undo the spend of ``claim`` when no new pair reached the client (the request
        answered 503): the token is unspent again unless another claim spent it meanwhile."""
        ...

    def revoke_family(self, family: str, until: float) -> None:
        """Revoke ``family`` until ``until`` (a later ``until`` already kept stays).

        Raises:
            UnconfirmedWrite: (Sentinel, a cluster) no replica confirmed it in time: a
                failover could lose it; the same call again is harmless.
        """
        ...

    def revoked_families(self) -> dict[str, float]: ...

    def refresh_record(self, token_hash: str) -> tuple[RefreshRecord, bool] | None:
        """A refresh token's record and whether it is spent, without spending it (SPEC 12.3:
        revocation and introspection); None when unknown."""
        ...

    def refresh_alias(self, alias: str) -> str | None:
        """The hash a refresh record is stored under whose :attr:`RefreshRecord.alias` is
        ``alias``; None when there is none."""
        ...

    def user_families(self, subject: str) -> dict[str, float]:
        """The token families of a user (``subject``, exact): family -> the latest expiry of
        its refresh tokens (SPEC 12.3: ``fwrest tokens revoke --user``). Families whose
        refresh tokens all expired more than a day ago may be left out."""
        ...


class CodeStore(StoreBase, Protocol):
    """Authorization codes (SPEC 16.1): one record per code, under the code's hash, taken once."""

    def add_code(self, code_hash: str, record: bytes, keep_s: float) -> None:
        """Keep a new code's ``record`` (its JSON: client, redirect, challenge, user, scopes,
        expiry) for ``keep_s`` seconds, past the code's own validity: a code presented again
        within that time still finds the family it issued, to revoke it."""
        ...

    def take_code(self, code_hash: str, family: str) -> tuple[str, bytes | None, str]:
        """Atomically take a code for the token family ``family`` (a random id of the one
        token request that redeems it), across every worker and host of the store:
        ``("ok", record, family)`` the first time (and again for the same ``family``: a
        request retried after a lost answer); ``("used", record, first)`` when another
        request took it, ``first`` the family that request recorded (RFC 6749 4.1.2: what
        it issued is revoked); ``("missing", None, "")`` for a code unknown or forgotten."""
        ...


class ProofStore(StoreBase, Protocol):
    """The ids of the DPoP proofs seen (SPEC 16.2, RFC 9449 11.1): a proof is used once on
    every worker and host of the store."""

    def note_proof(self, proof_id: str, keep_s: float) -> bool:
        """Remember ``proof_id`` (a hash of the proof's key and ``jti``) for ``keep_s``
        seconds, the proof's window: True when it was not known, False when it was (a
        replay). Atomic: of simultaneous calls with one id, one answers True.

        Raises:
            UnconfirmedWrite: (Sentinel, a cluster) no replica confirmed the new id in time:
                a failover could lose it, so it was taken back (best effort) and the proof
                is not to be accepted now.
        """
        ...


class FailureStore(StoreBase, Protocol):
    """Failed attempts and lock-outs (the brute-force throttle)."""

    def hit_failure(self, key: str, window_s: float, before: float = 0.0) -> tuple[int, float]:
        """Count one failure; returns (failures in the window, seconds until it ends).
        ``before``: as :meth:`RateStore.hit_rate`'s, a count past it not taken: ``(0, 0.0)``."""
        ...

    def failures(self, key: str, window_s: float) -> tuple[int, float]: ...

    def hit_failures(
        self, keys: tuple[str, ...], window_s: float, limit: int, before: float = 0.0
    ) -> list[tuple[int, float]]:
        """Count one attempt under every key of ``keys`` (a user's and an address's), as
        :meth:`hit_failure` does, atomically and only when each key's count is below
        ``limit``: ``(count, seconds until its window ends)`` per key, the attempt in each
        count. When a key's count is at ``limit`` or over, nothing is counted under any key,
        and each count is what it would have been (one more than the key's count): one of
        them is then over ``limit``. So an attempt refused for one key never sits in the
        other's count, where another attempt could find it (the brute-force throttle: a count
        at ``limit`` is reached once, by an attempt that is checked). Past ``before`` (as
        :meth:`hit_failure`'s) nothing is counted, and each count is ``(0, 0.0)``."""
        ...

    def release_failure(self, key: str, window_s: float) -> None:
        """Take back one failure counted by :meth:`hit_failure` in the window in force (an
        attempt counted before its password was checked, whose password was right or was
        never checked): never below zero, never a new window; a count back at zero is no
        window at all."""
        ...

    def clear_failures(self, key: str) -> None: ...

    def add_lock(self, key: str, until: float, failures: int = 0, window_s: float = 0.0) -> None:
        """Record a lock-out (a key past maxFailures) that every worker should honour.

        ``failures``: the count that made it, when the store did not take it (a Basic port's
        host counted on its own while the store was away): the key's count is raised to it,
        counted first, in a window of ``window_s`` that ends with the lock-out (or later, a
        window in force that ends later), unless its window in force counts as many. So
        ``fwrest lockouts list`` shows the failures that led to the lock-out (SPEC 13.6)."""
        ...

    def locks(self) -> dict[str, float]:
        """Lock-outs in force: key -> epoch second they end."""
        ...

    def lift_lock(self, key: str) -> None:
        """End the lock-out of ``key`` now and forget its failures (``fwrest lockouts clear``,
        SPEC 13.6); a key not locked loses its failures only."""
        ...


class RateStore(StoreBase, Protocol):
    """Request counts of the rate limits (SPEC 13.7), apart from the failure counts (their
    windows differ, and neither sweeps the other's)."""

    def hit_rate(self, key: str, window_s: float, before: float = 0.0) -> tuple[int, float]:
        """Count one request of ``key`` in a fixed window that starts at the first request
        counted and ends ``window_s`` later: (requests counted in the window, this one
        included; seconds until it ends). The next request after the end starts a new one.
        ``before`` (``time.time()`` of the host, 0.0: none): the instant past which the
        request no longer waits for the count; a count that would be taken past it is not
        (sqlite: checked holding the write lock; Redis: by its clock, with a margin for
        clocks apart), and the answer is ``(0, 0.0)``."""
        ...


class SettingsStore(Protocol):
    """Run-time settings every worker and host applies (the settings manager)."""

    def get_settings(self) -> dict[str, int]: ...

    def set_settings(self, values: dict[str, int | None]) -> tuple[dict[str, int], float]:
        """Set run-time settings (``None`` clears one) in one atomic step, and return the
        run-time settings as the store held them just before it (the values in force for the
        service that a change replaced, SPEC 13.5, never a worker's stale copy) and the time
        of the step, an epoch second in whole microseconds taken in it (the store's clock where
        it has one) and later than every earlier change's: the changes' order is their
        order in the store (:func:`settings_stamp`), which their audit events keep."""
        ...


def settings_stamp(last: int) -> int:
    """The time of a settings change in whole microseconds: now, or one past ``last`` (the
    previous change's) when the clock has not moved past it (two changes within a
    microsecond, a clock set back)."""
    return max(time.time_ns() // 1000, last + 1)


class BlobStore(StoreBase, Protocol):
    """Small named values (usage figures, their epoch) and the shared signing key."""

    def signing_key(self, candidate: bytes) -> bytes:
        """The shared key: ``candidate`` stored if none exists yet (set-if-absent)."""
        ...

    def put_blob(self, name: str, value: bytes) -> None:
        """Store a small value under ``name`` (usage figures, epochs)."""
        ...

    def blobs(self, prefix: str) -> dict[str, bytes]:
        """Every value whose name starts with ``prefix``."""
        ...

    def delete_blobs(self, prefix: str) -> None: ...

    def get_blob(self, name: str) -> bytes | None:
        """The value under ``name``; None when there is none."""
        ...

    def swap_blob(self, name: str, old: bytes | None, new: bytes) -> bytes | None:
        """Compare-and-set: store ``new`` if the value is still ``old`` (None: absent);
        returns the value now (``new`` when it was stored). The key set's one write."""
        ...


AUDIT_KEEP = 10_000  # SPEC 13.5: the store keeps the newest 10,000 audit events
# Events that a client without credentials can cause at will (a flood of wrong passwords from
# rotating addresses makes a lock-out per address): kept in a budget of their own, the newest
# AUDIT_KEEP of them, so that they never push the other events (settings changes, reloads,
# revocations, key rotations) out of the trail (issue 34).
# The logins of the authorization code grant (SPEC 16.1) are as many as its users' visits, and
# its failures as many as a client likes: they share that budget.
FLOOD_EVENTS = frozenset({"lockout", "login", "login.failure"})


class AuditStore(StoreBase, Protocol):
    """The audit trail (SPEC 13.5): events as their JSON text, the newest ``audit_keep``
    (:data:`AUDIT_KEEP`) kept, shared by every worker and host of the store."""

    # how many events are kept: AUDIT_KEEP (a test lowers it on an instance)
    audit_keep: int

    def add_audit(self, ts: float, event: str, entry: bytes) -> None:
        """Keep one event (``entry``, its JSON) of epoch second ``ts`` named ``event``; the
        oldest go beyond ``audit_keep``, counted apart for :data:`FLOOD_EVENTS` and for the
        others (each keeps its newest ``audit_keep``)."""
        ...

    def audit_events(self, since: float, event: str | None, limit: int) -> list[bytes]:
        """At most ``limit`` events of ``ts >= since`` (named ``event``, when given), newest
        first."""
        ...


class SchemaStore(StoreBase, Protocol):
    """The store's schema marker (SPEC 17.2, ``store/schema.py``): read at start, never per
    request."""

    def schema_marker(self) -> bytes | None:
        """The marker as stored; None when the store has none (fwrest 0.1.0's)."""
        ...

    def swap_schema_marker(self, old: bytes | None, new: bytes) -> bytes | None:
        """Compare-and-set of the marker (``old`` None: absent); returns the marker now."""
        ...


class StateStore(
    TokenStore,
    CodeStore,
    ProofStore,
    FailureStore,
    RateStore,
    SettingsStore,
    BlobStore,
    AuditStore,
    SchemaStore,
    Protocol,
):
    """The whole store: every role. Each implementation (memory, sqlite, Redis) is one."""
