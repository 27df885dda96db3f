"""``AuditLog`` (SPEC 13.5) alone: recording never fails or waits for the store; a failing store is
one warning (and one on recovery); a hung store holds no caller; close lets writes in progress
finish. Through a service: tests/native/test_audit.py."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from fwrest.store import StoreError
from fwrest.store.audit import AuditEvent, AuditLog, iso_time
from fwrest.store.calls import StoreClient
from fwrest.store.memory import MemoryStore


class FlakyStore(MemoryStore):
    """A store whose audit writes fail while ``down`` is set, and hang while ``frozen`` is."""

    in_process = False  # called on the client's threads, as sqlite and Redis are

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.frozen = threading.Event()

    def add_audit(self, ts: float, event: str, entry: bytes) -> None:
        if self.frozen.is_set():
            time.sleep(3)
        if self.down:
            raise StoreError("redis store redis://127.0.0.1:1/0: Connection refused")
        super().add_audit(ts, event, entry)


def event(n: int) -> AuditEvent:
    return AuditEvent("settings.change", "ada", "10.0.0.7", "HTTP_REST", {"key": "k", "new": n})


def test_a_failing_store_is_one_warning_and_never_the_caller_s_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FlakyStore()
    client = StoreClient(store)
    audit = AuditLog(store, client)

    async def run() -> None:
        store.down = True
        for n in range(3):
            audit.record(event(n))  # returns at once: no exception, no wait
        await audit.drain()
        store.down = False
        audit.record(event(3))
        await audit.drain()

    with caplog.at_level(logging.WARNING, logger="fwrest"):
        asyncio.run(run())
    client.close()
    said = [r.getMessage() for r in caplog.records if r.name == "fwrest.server"]
    assert len(said) == 2, said
    assert said[0].startswith("audit event settings.change not kept in the state store: redis")
    assert "3 not kept meanwhile" in said[1]
    kept = store.audit_events(0.0, None, 10)
    assert len(kept) == 1 and b'"new":3' in kept[0]


def test_a_hung_store_holds_no_caller_and_the_close_waits_its_deadline_only() -> None:
    store = FlakyStore()
    client = StoreClient(store)
    audit = AuditLog(store, client)
    store.frozen.set()

    async def run() -> tuple[float, float]:
        started = time.monotonic()
        for n in range(5):
            audit.record(event(n))
        recorded = time.monotonic() - started
        started = time.monotonic()
        await audit.drain()
        return recorded, time.monotonic() - started

    recorded, drained = asyncio.run(run())
    client.close()
    print(f"5 events recorded in {recorded * 1000:.2f} ms; close waited {drained:.2f} s")
    assert recorded < 0.5  # the caller never waits on the store
    assert drained < 2.5  # the background deadline (1.4 s), not the hang (3 s)


def test_without_a_loop_a_command_s_event_is_kept_before_it_returns() -> None:
    store = MemoryStore()
    assert AuditLog(store).record_now(event(1)) is True
    [entry] = store.audit_events(0.0, None, 10)
    assert entry.startswith(b'{"ts":"') and b'"actor":"ada"' in entry
    failing = FlakyStore()
    failing.down = True
    assert AuditLog(failing).record_now(event(2)) is False  # said, not raised
    assert AuditLog(None).record_now(event(3)) is False  # no store: the log only


def test_ts_is_a_whole_microsecond_written_in_utc() -> None:
    made = event(1)
    assert round(made.ts * 1e6) / 1e6 == made.ts
    assert iso_time(0.000001) == "1970-01-01T00:00:00.000001Z"
    assert made.as_dict()["ts"] == iso_time(made.ts)
