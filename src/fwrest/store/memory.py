"""One process only (tests, single-worker services)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import replace

from fwrest.store.base import AUDIT_KEEP, FLOOD_EVENTS, RefreshRecord, settings_stamp

__all__ = ["MemoryStore"]

_SWEEP_MIN = 1024


class MemoryStore:
    kind = "memory"
    family_slots = False
    in_process = True  # answers at once, without I/O: callers may call it on the event loop
    audit_keep = AUDIT_KEEP

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refresh: dict[str, tuple[RefreshRecord, str]] = {}  # hash -> (record, spent by)
        self._aliases: dict[str, str] = {}  # RefreshRecord.alias -> hash
        self._schema: bytes | None = None
        self._revoked: dict[str, float] = {}
        # authorization codes: hash -> (kept until, record, the family that took it or "")
        self._codes: dict[str, tuple[float, bytes, str]] = {}
        self._codes_swept = _SWEEP_MIN
        self._proofs: dict[str, float] = {}  # DPoP proof ids -> kept until
        self._proofs_swept = _SWEEP_MIN
        self._failures: dict[str, tuple[float, int]] = {}
        self._rates: dict[str, tuple[float, int]] = {}  # key -> (window's end, count)
        self._rates_swept = _SWEEP_MIN
        self._key: bytes | None = None
        self._settings: dict[str, int] = {}
        self._settings_stamp = 0  # the last change's time, microseconds (set_settings)
        self._locks: dict[str, float] = {}
        self._blobs: dict[str, bytes] = {}
        # the audit trail: (ts, order of arrival, event, entry), the newest audit_keep
        self._audit: deque[tuple[float, int, str, bytes]] = deque()
        self._audit_flood: deque[tuple[float, int, str, bytes]] = deque()  # FLOOD_EVENTS
        self._audit_seq = itertools.count()
        self._inserts = 0
        # failure counts are swept of ended windows when they have doubled since the last
        # sweep: many user names or addresses that failed once do not pile up
        self._failures_swept = _SWEEP_MIN

    def ping(self) -> None:
        return None

    def add_refresh(self, record: RefreshRecord) -> None:
        with self._lock:
            self._inserts += 1
            if self._inserts % 1000 == 0 and len(self._refresh) > 10000:
                # now and then (not on every insert): forget tokens expired a day ago
                cutoff = time.time() - 86400
                self._refresh = {k: v for k, v in self._refresh.items() if v[0].expires_at > cutoff}
                self._aliases = {a: h for a, h in self._aliases.items() if h in self._refresh}
            if record.alias:  # the lookup's, not the record's (as the other stores keep it)
                self._aliases[record.alias] = record.token_hash
                record = replace(record, alias="")
            self._refresh[record.token_hash] = (record, "")

    def refresh_alias(self, alias: str) -> str | None:
        with self._lock:
            return self._aliases.get(alias)

    def schema_marker(self) -> bytes | None:
        return self._schema

    def swap_schema_marker(self, old: bytes | None, new: bytes) -> bytes | None:
        with self._lock:
            if self._schema == old:
                self._schema = new
            return self._schema

    def spend_refresh(
        self, token_hash: str, claim: str, client_id: str | None = None
    ) -> tuple[str, RefreshRecord | None]:
        with self._lock:
            found = self._refresh.get(token_hash)
            if found is None:
                return "missing", None
            record, spent_by = found
            if spent_by:
                return ("ok" if spent_by == claim else "spent"), record
            if client_id is not None and record.client_id != client_id:
                return "client", record
            if record.expires_at <= time.time():
                return "expired", record
            self._refresh[token_hash] = (record, claim)
            return "ok", record

    def restore_refresh(self, token_hash: str, claim: str) -> None:
        with self._lock:
            found = self._refresh.get(token_hash)
            if found is not None and found[1] == claim:
                self._refresh[token_hash] = (found[0], "")

    def add_code(self, code_hash: str, record: bytes, keep_s: float) -> None:
        now = time.time()
        with self._lock:
            self._codes[code_hash] = (now + keep_s, record, "")
            if len(self._codes) > self._codes_swept:
                self._codes = {k: v for k, v in self._codes.items() if v[0] > now}
                self._codes_swept = max(_SWEEP_MIN, 2 * len(self._codes))

    def take_code(self, code_hash: str, family: str) -> tuple[str, bytes | None, str]:
        with self._lock:
            found = self._codes.get(code_hash)
            if found is None or found[0] <= time.time():
                return "missing", None, ""
            until, record, taken_by = found
            if taken_by and taken_by != family:
                return "used", record, taken_by
            self._codes[code_hash] = (until, record, family)
            return "ok", record, family

    def note_proof(self, proof_id: str, keep_s: float) -> bool:
        now = time.time()
        with self._lock:
            until = self._proofs.get(proof_id)
            if until is not None and until > now:
                return False
            self._proofs[proof_id] = now + keep_s
            if len(self._proofs) > self._proofs_swept:
                self._proofs = {k: t for k, t in self._proofs.items() if t > now}
                self._proofs_swept = max(_SWEEP_MIN, 2 * len(self._proofs))
            return True

    def revoke_family(self, family: str, until: float) -> None:
        with self._lock:
            self._revoked[family] = max(until, self._revoked.get(family, 0.0))

    def revoked_families(self) -> dict[str, float]:
        now = time.time()
        with self._lock:
            self._revoked = {f: u for f, u in self._revoked.items() if u > now}
            return dict(self._revoked)

    def refresh_record(self, token_hash: str) -> tuple[RefreshRecord, bool] | None:
        with self._lock:
            found = self._refresh.get(token_hash)
        return None if found is None else (found[0], bool(found[1]))

    def user_families(self, subject: str) -> dict[str, float]:
        cutoff = time.time() - 86400
        out: dict[str, float] = {}
        with self._lock:
            for record, _spent in self._refresh.values():
                if record.subject == subject and record.expires_at > cutoff:
                    out[record.family] = max(record.expires_at, out.get(record.family, 0.0))
        return out

    def hit_failure(self, key: str, window_s: float, before: float = 0.0) -> tuple[int, float]:
        with self._lock:
            now = time.time()
            if before and now > before:
                return 0, 0.0
            return self._hit_failure(key, window_s, now)

    def _hit_failure(self, key: str, window_s: float, now: float) -> tuple[int, float]:
        start, count = self._failures.get(key, (now, 0))
        if now - start >= window_s:
            start, count = now, 0
        count += 1
        self._failures[key] = (start, count)
        if len(self._failures) > self._failures_swept:
            self._failures = {k: v for k, v in self._failures.items() if now - v[0] < window_s}
            self._failures_swept = max(_SWEEP_MIN, 2 * len(self._failures))
        return count, start + window_s - now

    def hit_rate(self, key: str, window_s: float, before: float = 0.0) -> tuple[int, float]:
        with self._lock:
            now = time.time()
            if before and now > before:
                return 0, 0.0
            end, count = self._rates.get(key, (0.0, 0))
            if end <= now:
                end, count = now + window_s, 0
            count += 1
            self._rates[key] = (end, count)
            if len(self._rates) > self._rates_swept:  # ended windows, each its own length
                self._rates = {k: v for k, v in self._rates.items() if v[0] > now}
                self._rates_swept = max(_SWEEP_MIN, 2 * len(self._rates))
            return count, end - now

    def hit_failures(
        self, keys: tuple[str, ...], window_s: float, limit: int, before: float = 0.0
    ) -> list[tuple[int, float]]:
        with self._lock:
            now = time.time()
            if before and now > before:
                return [(0, 0.0) for _ in keys]
            found = [self._failures.get(key, (now, 0)) for key in keys]
            found = [(now, 0) if now - start >= window_s else (start, n) for start, n in found]
            if all(n < limit for _, n in found):
                return [self._hit_failure(key, window_s, now) for key in keys]
            return [(n + 1, start + window_s - now) for start, n in found]

    def failures(self, key: str, window_s: float) -> tuple[int, float]:
        now = time.time()
        with self._lock:
            start, count = self._failures.get(key, (now, 0))
            if now - start >= window_s:
                return 0, 0.0
            return count, start + window_s - now

    def release_failure(self, key: str, window_s: float) -> None:
        now = time.time()
        with self._lock:
            found = self._failures.get(key)
            if found is None or now - found[0] >= window_s:
                return
            if found[1] <= 1:
                del self._failures[key]
            else:
                self._failures[key] = (found[0], found[1] - 1)

    def clear_failures(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def add_lock(self, key: str, until: float, failures: int = 0, window_s: float = 0.0) -> None:
        now = time.time()
        with self._lock:
            start, count = self._failures.get(key, (0.0, 0))
            if now - start >= window_s:  # no window in force
                start, count = until - window_s, 0
            if failures > count:
                self._failures[key] = (max(start, until - window_s), failures)
            self._locks[key] = max(until, self._locks.get(key, 0.0))
            if len(self._locks) > _SWEEP_MIN:  # ended lock-outs, if no reader swept them
                self._locks = {k: u for k, u in self._locks.items() if u > now}

    def lift_lock(self, key: str) -> None:
        with self._lock:
            self._locks.pop(key, None)
            self._failures.pop(key, None)

    def locks(self) -> dict[str, float]:
        now = time.time()
        with self._lock:
            self._locks = {k: u for k, u in self._locks.items() if u > now}
            return dict(self._locks)

    def signing_key(self, candidate: bytes) -> bytes:
        with self._lock:
            if self._key is None:
                self._key = candidate
            return self._key

    def get_settings(self) -> dict[str, int]:
        with self._lock:
            return dict(self._settings)

    def set_settings(self, values: dict[str, int | None]) -> tuple[dict[str, int], float]:
        with self._lock:
            before = dict(self._settings)
            for key, value in values.items():
                if value is None:
                    self._settings.pop(key, None)
                else:
                    self._settings[key] = value
            self._settings_stamp = settings_stamp(self._settings_stamp)
            return before, self._settings_stamp / 1e6

    def put_blob(self, name: str, value: bytes) -> None:
        with self._lock:
            self._blobs[name] = value

    def blobs(self, prefix: str) -> dict[str, bytes]:
        with self._lock:
            return {k: v for k, v in self._blobs.items() if k.startswith(prefix)}

    def delete_blobs(self, prefix: str) -> None:
        with self._lock:
            self._blobs = {k: v for k, v in self._blobs.items() if not k.startswith(prefix)}

    def get_blob(self, name: str) -> bytes | None:
        with self._lock:
            return self._blobs.get(name)

    def swap_blob(self, name: str, old: bytes | None, new: bytes) -> bytes | None:
        with self._lock:
            if self._blobs.get(name) == old:
                self._blobs[name] = new
            return self._blobs.get(name)

    def add_audit(self, ts: float, event: str, entry: bytes) -> None:
        shelf = self._audit_flood if event in FLOOD_EVENTS else self._audit
        with self._lock:
            shelf.append((ts, next(self._audit_seq), event, entry))
            while len(shelf) > self.audit_keep:
                shelf.popleft()

    def audit_events(self, since: float, event: str | None, limit: int) -> list[bytes]:
        with self._lock:
            found = [
                r
                for r in (*self._audit, *self._audit_flood)
                if r[0] >= since and (event is None or r[2] == event)
            ]
        found.sort(key=lambda r: (r[0], r[1]), reverse=True)
        return [r[3] for r in found[:limit]]

    def close(self) -> None:
        return None
